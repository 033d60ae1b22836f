"""Where `decode: gpu` loses to synthetic data (issue 30), in one process on one GPU:

    PYTHONPATH=src:benchmarks python3 benchmarks/decode_profile.py --out DIR

ResNet-50 as `train_loop.py` trains it (bf16 autocast, channels_last, SGD with momentum, batch
128), `--steps` steps after `--warmup`, in four modes:
  synthetic          batches already on the GPU;
  synthetic+decode   the same batches while a `GpuDecodeLoader` decodes in the background and its
                     batches are dropped: what decoding costs a step whose data never waits;
  decoded            the loader's batches (`--readers` reader workers, no CPU helpers);
  decoded+helpers    the loader's batches with `--helpers` CPU helpers as well (the shipped split).
Per mode: images/s over the timed steps (wall, one synchronisation at each end), and from a
torch.profiler window of `--profile-steps` steps the training stream's kernel time per step (up
under decoding: the GPU's SMs are shared), its idle time per step (up: the thread that launches
the step's kernels is late, e.g. waiting for the interpreter), the other streams' (decoding's)
kernel time per step; and in the decode thread the decoder call's and the augment's time a batch.
Each decoding mode runs once per `--switch-ms` (the interpreter's switch interval: how long a
thread that wants the GIL back may wait for the other to hand it over). Writes DIR/profile.csv,
DIR/kernels_<mode>_<ms>ms.csv (kernel time per stream and name) and DIR/summary.json; prints
the table. Changes no GPU setting. `--device cpu` rehearses the script (PIL in the decoder's
place, no kernels).
"""

import argparse
import io
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch
import torch.nn.functional as F
import torchvision
from jpeg_tree import make_tree
from outdir import out_dir

import wattlife.workloads.gpu_decode as gd
from wattlife.workloads.gpu_decode import GpuDecodeLoader
from wattlife.workloads.image import collate, image_dataset


# --device cpu: a real decoder in nvImageCodec's place
def _pil_decode(datas: Any, boxes: Any, stream: Any) -> Any:
    import numpy as np
    from PIL import Image

    return [torch.from_numpy(np.asarray(Image.open(io.BytesIO(d)).convert("RGB")).copy())
            for d in datas]


TIMES: dict[str, list[float]] = {"decode_call_ms": [], "augment_ms": []}


def _timed(fn: Any, key: str) -> Any:
    """`fn`, its wall time a call (in the decode thread) appended to TIMES[key]."""
    def wrapped(*args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            TIMES[key].append(1e3 * (time.perf_counter() - t))
    return wrapped


def _batches(loader: Any) -> Any:
    while True:
        for x, y, _ in loader:
            if x is not None:
                yield x, y


def _kernels(trace: Path) -> pd.DataFrame:
    """The profiled window's GPU kernels: stream, name, start and duration (us)."""
    ev = json.loads(trace.read_text())["traceEvents"]
    rows = [(e["args"].get("stream"), e["name"], e["ts"], e["dur"]) for e in ev
            if e.get("cat") == "kernel" and "args" in e]
    return pd.DataFrame(rows, columns=["stream", "name", "ts", "dur"])


def synthetic_batches(batch: int, dev: Any) -> list[Any]:
    """4 random channels-last image batches with labels, on `dev`."""
    return [(torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last),
             torch.randint(0, 1000, (batch,), device=dev)) for _ in range(4)]


def stream_split(k: pd.DataFrame, step_ms: float, steps: int, csv: Path) -> dict[str, Any]:
    """The training stream's (the busiest) kernel ms per step, its idle rest and the other
    streams' kernel ms; the 40 costliest kernels into `csv`. Nothing without kernels."""
    if not len(k):
        return {}
    main_stream = k.groupby("stream")["dur"].sum().idxmax()  # the step's kernels
    tr, other = k[k.stream == main_stream], k[k.stream != main_stream]
    busy = tr["dur"].sum() / 1e3 / steps
    (k.groupby(["stream", "name"])["dur"].agg(["count", "sum"])
     .sort_values("sum", ascending=False).head(40).to_csv(csv))
    return {"train_kernel_ms_per_step": busy, "train_idle_ms_per_step": step_ms - busy,
            "other_streams_kernel_ms_per_step": other["dur"].sum() / 1e3 / steps}


def run_mode(mode: str, a: argparse.Namespace, dev: Any, model: Any, opt: Any, data: Any,
             out: Path) -> dict[str, Any]:
    """Train `a.warmup + a.steps` steps in `mode`, the last `a.profile_steps` under the
    profiler; the mode's row."""
    cuda = dev.type == "cuda"
    synth = synthetic_batches(a.batch, dev)
    loader = None
    if mode != "synthetic":
        loader = GpuDecodeLoader(data, a.batch, 224, dev, collate=collate, readers=a.readers,
                                 helpers=a.helpers if mode == "decoded+helpers" else 0,
                                 decode=None if cuda else _pil_decode)
        loader.decode = _timed(loader.decode, "decode_call_ms")
    for v in TIMES.values():
        v.clear()
    feed: Any = _batches(loader) if loader is not None else None  # None: synthetic alone

    def one(i: int) -> None:
        x, y = synth[i % 4]
        if mode.startswith("decoded"):
            x, y = next(feed)
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        elif mode == "synthetic+decode":
            next(feed)  # decoded, dropped
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    try:
        for i in range(a.warmup):
            one(i)
        sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)
        sync()
        t = time.perf_counter()
        for i in range(a.steps - a.profile_steps):
            one(i)
        sync()
        rate = a.batch * (a.steps - a.profile_steps) / (time.perf_counter() - t)
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts[:2 if cuda else 1]) as prof:
            t = time.perf_counter()
            for i in range(a.profile_steps):
                one(i)
            sync()
            window = time.perf_counter() - t
        tag = f"{mode.replace('+', '_')}_{sys.getswitchinterval() * 1e3:g}ms"
        trace = out / f"trace_{tag}.json"
        prof.export_chrome_trace(str(trace))
    finally:
        if loader is not None:
            loader.close()
    k = _kernels(trace)
    row = {"mode": mode, "images_per_s": rate, "profiled_step_ms": 1e3 * window / a.profile_steps,
           "decoded_batches": json.dumps(loader.decoded) if loader else None,
           **{k: sum(v) / len(v) for k, v in TIMES.items() if v}}
    row.update(stream_split(k, row["profiled_step_ms"], a.profile_steps,
                            out / f"kernels_{tag}.csv"))
    trace.unlink()  # large; the per-kernel summary stays
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--work", default="/tmp/wl-decode-profile",
                    help="JPEG folder (default /tmp/wl-decode-profile)")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a rehearsal)")
    ap.add_argument("--batch", type=int, default=128, help="images a step (default 128)")
    ap.add_argument("--steps", type=int, default=80, help="timed steps a mode (default 80)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    ap.add_argument("--profile-steps", type=int, default=10,
                    help="the timed steps' last ones profiled (default 10)")
    ap.add_argument("--readers", type=int, default=4, help="reader workers (default 4)")
    ap.add_argument("--helpers", type=int, default=8,
                    help="CPU helpers of decoded+helpers (default 8)")
    ap.add_argument("--modes", default="synthetic,synthetic+decode,decoded,decoded+helpers",
                    help="which modes, in order (default all four)")
    ap.add_argument("--switch-ms", default="5",
                    help="the interpreter's switch intervals (sys.setswitchinterval, ms) each "
                         "decoding mode runs with, comma-separated (default 5, Python's own)")
    a = ap.parse_args()
    out = out_dir(a.out)
    # patched where gpu_decode looks it up (its import of gpu_augment's function)
    gd.augment_batch = _timed(gd.augment_batch, "augment_ms")  # type: ignore[attr-defined]
    dev = torch.device(a.device, 0) if a.device == "cuda" else torch.device(a.device)
    cpu = dev.type == "cpu"
    root = Path(a.work) / "jpeg500"
    res = {"argv": sys.argv, "torch": torch.__version__,
           "data": make_tree(root, 4, 16 if cpu else 800, *(64, 48) if cpu else (500, 375))}
    if cpu:
        a.batch, a.steps, a.warmup, a.profile_steps = 4, 6, 2, 2
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = image_dataset(root, True, 224)
    rows = []
    for mode in a.modes.split(","):
        for ms in ["5"] if mode == "synthetic" else a.switch_ms.split(","):
            sys.setswitchinterval(float(ms) / 1e3)
            rows.append({**run_mode(mode, a, dev, model, opt, data, out), "switch_ms": ms})
            sys.setswitchinterval(0.005)
            pd.DataFrame(rows).to_csv(out / "profile.csv", index=False)
            print(rows[-1], flush=True)
    (out / "summary.json").write_text(json.dumps({**res, "rows": rows}, indent=1, default=str))
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
