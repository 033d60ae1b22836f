"""GPU-side image decoding (`decode: gpu`) against the CPU path and synthetic data (issue 30),
in one call on one GPU:

    PYTHONPATH=src python3 benchmarks/h200_gpu_decode.py --out DIR

1. JPEGs as ImageNet's: 500 x 375 px, ~74 KB (quality 90), `--classes` x `--per-class`, written
   to local disk (the page cache holds them after the first epoch, as on a node with RAM to spare).
2. ResNet-50 (bf16, batch 128, channels_last) on synthetic on-GPU data (`train_loop.py`, no
   phase markers: wall time over 150 steps after 30 warm-up steps), eagerly and, when a cell
   uses them, with CUDA graphs (`--graphs`): the ceilings, measured in each round. (Calls before
   this flag read `--markers on`, which without `wattlife run` marked nothing either.)
3. The decoder alone (`--decoder-probe`, its own process): nvImageCodec's batch decode + resize +
   normalise of 128-image batches, full image vs the crop's region only, and which backends decode.
4. The image workload as cells under `wattlife run` (NVML GPU power, attributed per phase):
   `decode: cpu` (PIL in `--workers` loader workers) and `decode: gpu` (the shipped defaults, the
   same `workers`), plus `decode: gpu` variants (full-image decode; more CPU helpers; `-graphs`:
   the model's forward and backward replayed from CUDA graphs, `cuda_graphs: true`; the decode
   stream's priority; batches left in flight).
Writes DIR/gpu_decode.csv (one row a cell: images/s on the `step` basis, GPU-timed as the
workloads report it, and on the `wall` basis; the share of synthetic; the data_load phase's time
share and its GPU and CPU energy; J per image; a cell's share is over the synthetic rate of its
kind, eager or graphs, and `share_of_eager_synthetic` over the eager one),
DIR/decoder_probe.json, DIR/summary.json and the cells' raw files (DIR/cells/<cell>/); prints a
short table. Changes no GPU setting.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from h200_execution import cell
from outdir import out_dir

PY = sys.executable
HERE = Path(__file__).resolve().parent
DRY = os.environ.get("WL_DRY") == "1"  # CPU rehearsal: tiny sizes, simulated GPU, no decoder


def _write_jpegs(job: tuple) -> int:
    """One class's JPEGs: 500 x 375, a class-dependent pattern plus noise (~74 KB at q90)."""
    from PIL import Image

    folder, c, n, w, h = job
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(c)
    yy, xx = np.mgrid[0:h, 0:w] / h
    noise = [rng.normal(0, 0.05, (h, w, 3)).astype(np.float32) for _ in range(4)]
    hue = np.array([(c * 37) % 255, (c * 91) % 255, (c * 53) % 255]) / 255.0
    for i in range(n):
        f = folder / f"{c:03d}_{i:05d}.JPEG"
        if f.exists():
            continue
        ph = rng.uniform(0, 2 * np.pi)
        base = np.stack([np.sin(2 * np.pi * (1 + c % 5) * xx + ph + k + yy * (c % 3))
                         for k in range(3)], -1)
        img = 0.5 + 0.25 * base + 0.25 * hue + np.roll(noise[i % 4], rng.integers(w), axis=1)
        Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(f, quality=90)
    return n


def make_tree(root: Path, classes: int, per_class: int, w: int, h: int) -> dict:
    from multiprocessing import Pool

    t = time.time()
    jobs = [(root / split / f"n{c:08d}", c, n, w, h) for split, n in
            (("train", per_class), ("val", max(2, per_class // 50))) for c in range(classes)]
    with Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        pool.map(_write_jpegs, jobs)
    files = list((root / "train").rglob("*.JPEG"))
    return {"images": len(files), "mean_kb": float(np.mean([f.stat().st_size for f in files]))
            / 1e3, "generation_s": time.time() - t}


def _rate(dec, items: list, stream, size: int, augment: str, batches: int) -> float:
    """Images/s of `dec` over 128-image batches, with no augment (`""`) or the loader's
    `augment_batch` image by image (`"per-image"`) or batched (`"batched"`). (The committed
    probes up to gpu-decode-graphs/call-1 timed the per-image way without its flips.)"""
    import torch

    from wattlife.workloads import gpu_augment

    def one(b: list) -> None:
        with torch.cuda.stream(stream):
            imgs = dec([r[0] for r in b], [r[1] for r in b], stream)
            if augment:
                gpu_augment.BATCHED = augment == "batched"
                gpu_augment.augment_batch(imgs, [r[1] for r in b], [r[2] for r in b], size,
                                          dec.roi)

    one(items[:128])  # warm-up
    torch.cuda.synchronize()
    t = time.perf_counter()
    for k in range(batches):
        one(items[128 * k:128 * (k + 1)])
    stream.synchronize()
    return 128 * batches / (time.perf_counter() - t)


def decoder_probe(root: Path, batches: int = 12, size: int = 224) -> dict:
    """Decode (+ resize + normalise) rate of 128-image batches on the GPU, full vs region, and
    which nvImageCodec backends decode full images and regions."""
    import torch
    from nvidia import nvimgcodec as nv

    from wattlife.workloads.gpu_decode import NvDecode
    from wattlife.workloads.image import _dataset
    from wattlife.workloads.raw_jpegs import RawJpegs

    dev = torch.device("cuda", 0)
    raw = RawJpegs(_dataset(root, True, size).samples)
    items = [raw[i] for i in range(128 * batches)]
    res: dict = {"nvimgcodec": getattr(nv, "__version__", "?")}
    stream = torch.cuda.Stream(dev)
    for name, roi in (("region", True), ("full", False)):
        dec = NvDecode(dev, roi=roi)
        for mode, aug in (("decode", ""), ("decode+augment_batched", "batched"),
                          ("decode+augment_per_image", "per-image")):
            res[f"{name}_{mode}_images_per_s"] = _rate(dec, items, stream, size, aug, batches)
    few = items[:8]
    for kind in ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU"):
        try:
            d = nv.Decoder(device_id=0, backends=[nv.Backend(getattr(nv, kind))])
            srcs = [nv.CodeStream(r[0]) for r in few]
            regions = [nv.Region(t, left, t + h, left + w) for t, left, h, w in
                       (r[1] for r in few)]
            roi = [s.get_sub_code_stream(region=g) for s, g in zip(srcs, regions, strict=True)]
            res[f"{kind}_full_decoded"] = sum(x is not None for x in d.decode(srcs))
            res[f"{kind}_region_decoded"] = sum(x is not None for x in d.decode(roi))
        except Exception as exc:  # noqa: BLE001 (a probe: record what the library said)
            res[f"{kind}_error"] = str(exc)[:200]
    return res


def steady_busy(cell_dir: Path) -> dict:
    """Median and 90th percentile over a cell's steady steps (rank 0's steps after warm-up, the
    step basis's) of the host's busy share, % of all its cores (`util_cpu`: psutil's, the CPU
    estimate's input), and the GPU's `sm_active` (NVML GPM, a fraction); None where not traced."""
    from wattlife.attribution.steady import steady_steps
    from wattlife.contracts import read_events, read_trace

    ev = read_events(cell_dir / "events.csv")
    steps = steady_steps(ev[ev["rank"] == ev["rank"].min()])
    trace = read_trace(cell_dir / "trace.csv.gz")
    win = trace[trace["t_ns"].between(steps["start_ns"].min(), steps["end_ns"].max())]
    row: dict = {}
    for metric, name in (("util_cpu", "host_busy_pct"), ("sm_active", "sm_active")):
        v = win.loc[win["metric"] == metric, "value"]
        row[f"{name}_median"] = float(v.median()) if len(v) else None
        row[f"{name}_p90"] = float(v.quantile(0.9)) if len(v) else None
    return row


def phase_row(out: Path, name: str, r: dict, synthetic: float | None) -> dict:
    """The table row of one cell from its attributed phases and summary."""
    c = out / "cells" / name
    if "error" in r:
        return {"cell": name, "error": r["error"][-500:]}
    ph = pd.read_csv(c / "phases.csv")
    s = json.loads((c / "work" / "summary.json").read_text())
    ph = ph[ph["phase"] != "deconvolution_residual"]
    by = ph.groupby(["device_kind", "phase"])[["energy_j", "time_s"]].sum()
    steps = ["data_load", "h2d", "forward", "backward", "optimizer"]
    gpu = by.loc["gpu"] if "gpu" in by.index.get_level_values(0) else pd.DataFrame()
    t_step = float(gpu.reindex(steps)["time_s"].fillna(0).sum()) if len(gpu) else float("nan")
    items = float(s["steps"] * s.get("batch_size", 128) - s.get("skipped_items", 0))
    row = {"cell": name, "decode": s.get("decode"), "cuda_graphs_ran": s.get("cuda_graphs"),
           "cuda_graphs_fallback": s.get("cuda_graphs_fallback"),
           "images_per_s_step": r["throughput"],
           "images_per_s_wall": r["throughput_wall"],
           "share_of_synthetic": r["throughput"] / synthetic if synthetic else None,
           "step_clock": r.get("step_clock"), "steps": s["steps"],
           "data_load_share_of_step_time": float(gpu["time_s"].get("data_load", 0)) / t_step
           if t_step else None,
           "decode_batches": json.dumps(s.get("decode_batches")),
           "decode_stage_ms": json.dumps(s.get("decode_stage_ms")), **steady_busy(c),
           "decode_fallback": s.get("decode_fallback")}
    for kind in ("gpu", "cpu"):
        if kind in by.index.get_level_values(0):
            k = by.loc[kind]
            row[f"{kind}_data_load_j"] = float(k["energy_j"].get("data_load", 0))
            row[f"{kind}_training_j_per_image"] = float(k.reindex(steps)["energy_j"].sum()) / items
    row["gpu_source"] = ",".join(sorted(set(ph.loc[ph["device_kind"] == "gpu", "source"])))
    row["cpu_source"] = ",".join(sorted(set(ph.loc[ph["device_kind"] == "cpu", "source"])))
    return row


G = "import wattlife.workloads.gpu_decode as g; "
A = "import wattlife.workloads.gpu_augment as a; "
# a cell is `cpu` or `gpu` (the workload's `decode`) followed by any of these settings, each
# `-<token>`: (workers added to --workers, Python run first in the cell's process, cuda_graphs)
TOKENS = {
    # the model's forward + backward replayed from CUDA graphs (`cuda_graphs: true`); the cell
    # is then shared against the synthetic rate with graphs too
    "graphs": (0, "", True),
    "no-helpers": (0, G + "g.split_workers = lambda w: (4, 0); ", False),  # 4 readers only
    "readers-6": (0, G + "g.split_workers = lambda w: (6, w - 6); ", False),
    "helpers-12": (0, G + "g.split_workers = lambda w: (4, 12); ", False),  # 4 readers, 12 PIL
    "more-helpers": (2, "", False),
    "full-image": (0, G + "g.ROI = False; ", False),  # decode whole images, crop after
    # the augment of the first H200 run (a1be292): augment() image by image, stacked
    "per-image": (0, G + A + "import torch; g.augment_batch = lambda imgs, boxes, flips, size, "
                  "cropped: torch.stack([a.augment(*x, size, cropped) for x in zip(imgs, boxes, "
                  "flips)]).contiguous(memory_format=torch.channels_last); ", False),
    "batched": (0, A + "a.BATCHED = True; ", False),  # the batched resize
    "priority": (0, G + "g.PRIORITY = -5; ", False),  # the decode stream at the highest priority
    "in-flight": (0, G + "g.IN_FLIGHT = 2; ", False),  # 2 batches not waited for
    "ahead-6": (0, G + "g.AHEAD = 6; ", False),  # 6 decoded batches queued for the step, not 3
    "bytes": (0, G + "g.PACK = False; ", False),  # raw batches as pickled bytes, not packed
    "threads-4": (0, G + "g.DECODER_THREADS = 4; ", False),  # nvImageCodec's CPU threads
    # the helpers' batches as float from their workers (before gpu_decode.HELPERS_UINT8)
    "float-helpers": (0, G + "g.HELPERS_UINT8 = False; ", False),
}
CELLS = ("cpu", "gpu", "gpu-per-image", "gpu-full-image", "gpu-no-helpers", "gpu-readers-6",
         "gpu-more-helpers", "cpu-graphs", "gpu-graphs", "gpu-no-helpers-graphs")  # the default


def cell_settings(name: str) -> tuple[str, int, str, bool]:
    """(decode, workers added, prelude, cuda_graphs) of cell `name`: `cpu` or `gpu`, then
    `TOKENS` joined by `-` in any order (e.g. `gpu-graphs-priority-in-flight`)."""
    decode, _, rest = name.partition("-")
    if decode not in ("cpu", "gpu"):
        raise ValueError(f"cell {name!r}: starts with cpu or gpu (the decode path)")
    more, prelude, graphs = 0, "", False
    while rest:
        token = max((t for t in TOKENS if rest == t or rest.startswith(t + "-")), key=len,
                    default=None)
        if token is None:
            raise ValueError(f"cell {name!r}: {rest!r} does not start with a setting; "
                             f"settings: {', '.join(TOKENS)}")
        dm, dp, dg = TOKENS[token]
        more, prelude, graphs = more + dm, prelude + dp, graphs or dg
        rest = rest[len(token) + 1:]
    return decode, more, prelude, graphs


# "gpu-process" (decoding in a process of its own) ran at 61ac38a, whose
# workloads/gpu_decode_process.py was removed after it measured slower
# (results/reference/h200/gpu-decode-batched/README.md)


def run_cells(a: argparse.Namespace, out: Path, work: Path, res: dict,
              synthetic: dict[bool, float | None], save, round_no: int = 1) -> list[dict]:
    """One round of the workload's cells (and the decoder probe after the first `gpu` cell of
    the first round); table rows, each cell's share against the round's synthetic rate of the
    same kind (`synthetic[cuda_graphs]`: eager, or with CUDA graphs) and the eager one. With
    repeats each round starts one cell later in the list, so
    no cell always runs first; cell folders are then `<cell>-r<round>`."""
    shared = work / "shared"
    rows = []
    names = a.cells.split(",")
    k = (round_no - 1) % len(names)
    for name in names[k:] + names[:k]:
        decode, more, prelude, graphs = cell_settings(name)
        cfg = {"storage": {"shared": str(shared), "local": str(work / "local")},
               "workloads": {"r50": {
                   "kind": "image_classification", "dataset": "jpeg500", "model": "resnet50",
                   "device": "cpu" if DRY else "cuda", "precision": "bf16",
                   "image_size": 32 if DRY else 224, "batch_size": 4 if DRY else 128,
                   "steps": 6 if DRY else a.steps, "workers": 1 if DRY else a.workers + more,
                   "prefetch": 4, "val_every": 0, "lr": 0.1, "decode": decode,
                   "cuda_graphs": graphs}}}
        run = name if a.repeats == 1 else f"{name}-r{round_no}"
        res[run] = cell(work, run, cfg, "r50", "shared", False, out, prelude=prelude)
        rows.append({"setting": name, "repeat": round_no, "cuda_graphs": graphs,
                     "synthetic_images_per_s": synthetic[graphs],
                     "synthetic_eager_images_per_s": synthetic[False],
                     **phase_row(out, run, res[run], synthetic[graphs])})
        if synthetic[False] and "images_per_s_step" in rows[-1]:
            rows[-1]["share_of_eager_synthetic"] = rows[-1]["images_per_s_step"] / synthetic[False]
        save()
        if decode == "gpu" and "decoder_probe" not in res and not DRY:  # the decoder alone, once
            r = subprocess.run([PY, __file__, "--out", str(out), "--decoder-probe",
                                str(shared / "jpeg500")], capture_output=True, text=True)
            res["decoder_probe"] = json.loads(r.stdout.strip().splitlines()[-1]) \
                if r.returncode == 0 else r.stderr[-2000:]
            (out / "decoder_probe.json").write_text(json.dumps(res["decoder_probe"], indent=1))
            save()
    return rows


def synthetic_rate(res: dict, key: str, graphs: bool = False) -> float | None:
    """ResNet-50 on synthetic on-GPU data (`train_loop.py`; `graphs`: with CUDA graphs),
    images/s; recorded in res[key]."""
    if DRY:
        return None
    r = subprocess.run([PY, str(HERE / "train_loop.py"), "--batch", "128", "--steps", "150",
                        "--warmup", "30", "--markers", "off", *(["--graphs"] if graphs else [])],
                       capture_output=True, text=True)
    res[key] = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 \
        else r.stderr[-2000:]
    return res[key].get("images_per_s") if r.returncode == 0 else None


def settings_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per setting over its repeats: n, the mean step rate and share of synthetic (each run over
    its own round's synthetic rate) with 95 % t intervals, and each `decode: gpu` setting's
    difference from `cpu` (Welch's 95 % interval; `within noise` where it spans zero)."""
    from wattlife.analysis.repeats import significant, t_interval, welch_interval

    rows = []
    for name, g in table.groupby("setting", sort=False):
        n, rate, _, lo, hi = t_interval(g["images_per_s_step"])
        _, share, _, s_lo, s_hi = t_interval(g["share_of_synthetic"].astype(float))
        row = {"setting": name, "n": n, "images_per_s_step": rate, "rate_lo": lo, "rate_hi": hi,
               "share_of_synthetic": share, "share_lo": s_lo, "share_hi": s_hi,
               "gpu_data_load_j": float(g["gpu_data_load_j"].mean())}
        if "share_of_eager_synthetic" in g:  # a CUDA-graph cell against the eager ceiling
            _, e_share, _, e_lo, e_hi = t_interval(g["share_of_eager_synthetic"].astype(float))
            row.update(share_of_eager_synthetic=e_share, eager_share_lo=e_lo, eager_share_hi=e_hi)
        if name != "cpu" and "cpu" in set(table["setting"]):
            base = table.loc[table["setting"] == "cpu", "images_per_s_step"]
            d, d_lo, d_hi = welch_interval(g["images_per_s_step"], base)
            sig = significant(d_lo, d_hi)
            row.update(vs_cpu=d, vs_cpu_lo=d_lo, vs_cpu_hi=d_hi,
                       vs_cpu_reading="n = 1" if sig is None else
                       ("differs" if sig else "within noise"))
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--classes", type=int, default=10, help="JPEG classes (default 10)")
    ap.add_argument("--per-class", type=int, default=600,
                    help="training JPEGs a class (default 600)")
    ap.add_argument("--workers", type=int, default=12,
                    help="loader workers of each cell (default 12)")
    ap.add_argument("--steps", type=int, default=200, help="training steps a cell (default 200)")
    ap.add_argument("--cells", default=",".join(CELLS),
                    help="which cells, comma-separated: cpu or gpu, each followed by any of "
                         f"the settings -{', -'.join(TOKENS)} (default {','.join(CELLS)})")
    ap.add_argument("--work", default="/tmp/wl-gpu-decode",
                    help="data and scratch folder (default /tmp/wl-gpu-decode)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of (synthetic, then every cell in a rotated order); above 1 "
                         "also DIR/gpu_decode_summary.csv with 95 %% intervals (default 1)")
    ap.add_argument("--decoder-probe", metavar="ROOT", help=argparse.SUPPRESS)
    a = ap.parse_args()
    for name in a.cells.split(","):  # a misspelt cell stops here, before any GPU work
        try:
            cell_settings(name)
        except ValueError as exc:
            ap.error(str(exc))
    if a.decoder_probe:
        print(json.dumps(decoder_probe(Path(a.decoder_probe))))
        return
    out = out_dir(a.out)
    work, res = Path(a.work), {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv}
    shared = work / "shared"

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(res, indent=1, default=str))

    res["data"] = make_tree(shared / "jpeg500", *(2, 6) if DRY else (a.classes, a.per_class),
                            *(64, 48) if DRY else (500, 375))
    save()
    rows: list[dict] = []
    for round_no in range(1, a.repeats + 1):
        key = "synthetic" if a.repeats == 1 else f"synthetic-r{round_no}"
        synthetic = {False: synthetic_rate(res, key)}
        synthetic[True] = synthetic_rate(res, f"{key}-graphs", True) \
            if any(cell_settings(c)[3] for c in a.cells.split(",")) else None
        save()
        rows += run_cells(a, out, work, res, synthetic, save, round_no)
        pd.DataFrame(rows).to_csv(out / "gpu_decode.csv", index=False)
    if a.repeats > 1:
        summary = settings_summary(pd.DataFrame(rows))
        summary.to_csv(out / "gpu_decode_summary.csv", index=False)
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    table = pd.DataFrame(rows)
    cols = [c for c in ("cell", "decode", "images_per_s_step", "images_per_s_wall",
                        "share_of_synthetic", "data_load_share_of_step_time", "gpu_data_load_j",
                        "cpu_data_load_j", "gpu_training_j_per_image", "host_busy_pct_median",
                        "decode_batches")
            if c in table]
    print(f"synthetic (on-GPU data, the last round; eager, CUDA graphs): {synthetic[False]}, "
          f"{synthetic[True]} images/s")
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if "decode_stage_ms" in table:  # where each decode side's thread spent a batch's time
        for cell, stages in zip(table["cell"], table["decode_stage_ms"], strict=True):
            print(f"  {cell}: ms a batch {stages}")
    print(json.dumps(res.get("decoder_probe"), indent=None))


if __name__ == "__main__":
    main()
