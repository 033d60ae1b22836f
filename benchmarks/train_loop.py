"""ResNet-50 training loop on synthetic on-GPU data (batch 128, bf16 autocast, channels_last, SGD),
optionally with the forward and backward replayed from CUDA graphs (`--graphs`, the image
workload's `cuda_graphs: true`), optionally marking every phase of every step, or measuring with
Zeus windows (`--zeus step`: a window around every step; `--zeus phase`: around every forward,
backward and optimizer, each window's energy written to `--zeus-csv`). Prints one JSON line with
the throughput (wall time over the timed steps). `--steps-csv F` also writes each timed step's
GPU time (a CUDA event before and after it on the training stream; no synchronisation until the
end) as `step,gpu_ms`, the raw record a rate can be recomputed from
(`gpu_decode_table.steps_rate`), and adds that rate to the JSON line as `images_per_s_steps`.

Used by attribution_checks.py and peers_zeus.py to measure the cost of measuring on real training.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
import torch.nn.functional as F
import torchvision

from wattlife import markers
from wattlife.markers import phase, step


def timed(body: Any, steps: int, batch: int, steps_csv: str | None) -> tuple[float, dict[str, Any]]:
    """Wall seconds of `steps` calls of `body` (synchronised before and after); with `steps_csv`,
    each step's GPU ms (CUDA events on the current stream) written there as `step,gpu_ms` and
    their rate returned as `images_per_s_steps`."""
    torch.cuda.synchronize()
    marks = ([torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
              for _ in range(2 * steps)] if steps_csv else [])
    t = time.perf_counter()
    for i in range(steps):
        if marks:
            marks[2 * i].record()
        body(i)
        if marks:
            marks[2 * i + 1].record()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    if not marks:
        return dt, {}
    ms = [marks[2 * i].elapsed_time(marks[2 * i + 1]) for i in range(steps)]
    with open(steps_csv, "w") as f:  # type: ignore[arg-type]
        f.write("step,gpu_ms\n" + "".join(f"{i},{m!r}\n" for i, m in enumerate(ms)))
    return dt, {"images_per_s_steps": steps * batch / (sum(ms) / 1e3)}


def _options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--markers", choices=["on", "off"], default="off")
    ap.add_argument("--graphs", action="store_true",
                    help="forward + backward replayed from CUDA graphs captured before the "
                         "warm-up (wattlife.workloads.cuda_graphs; default off: eager)")
    ap.add_argument("--zeus", choices=["off", "step", "phase"], default="off",
                    help="Zeus windows around every step or every phase (default off)")
    ap.add_argument("--zeus-csv", help="CSV of every Zeus window (phase, step, time_s, energy_j)")
    ap.add_argument("--steps-csv", help="CSV of every timed step's GPU ms (step, gpu_ms)")
    return ap.parse_args()


class Loop:
    """The model, its optimiser and 4 synthetic batches; one training step each way: plain,
    with the suite's markers, inside a Zeus window per step or per phase (`windows`)."""

    def __init__(self, batch: int, graphs: bool, zeus: str) -> None:
        dev = torch.device("cuda")
        self.batch = batch
        self.model = torchvision.models.resnet50().to(dev, memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.xs = [torch.randn(batch, 3, 224, 224, device=dev)
                   .to(memory_format=torch.channels_last) for _ in range(4)]
        self.ys = [torch.randint(0, 1000, (batch,), device=dev) for _ in range(4)]
        self.fwd = self.model
        if graphs:
            from wattlife.workloads.cuda_graphs import GraphedModel

            self.fwd = GraphedModel(self.model, tuple(self.xs[0].shape), dev, amp=True)
        self.windows: list[tuple[str, int, float, float]] = []
        self.mon = None
        if zeus != "off":
            from zeus.monitor import ZeusMonitor

            self.mon = ZeusMonitor(gpu_indices=[0])

    def _loss(self, i: int) -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return F.cross_entropy(self.fwd(self.xs[i % 4]), self.ys[i % 4])

    def _optim(self) -> None:
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def plain(self, i: int) -> None:
        self._loss(i).backward()
        self._optim()

    def with_markers(self, i: int) -> None:
        with step(items=self.batch):
            with phase("data_load"):
                x, y = self.xs[i % 4], self.ys[i % 4]
            with phase("forward"):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = F.cross_entropy(self.fwd(x), y)
            with phase("backward"):
                loss.backward()  # type: ignore[no-untyped-call]
            with phase("optimizer"):
                self._optim()

    def _win(self, name: str, i: int, fn: Any) -> Any:
        assert self.mon is not None
        self.mon.begin_window(name)
        out = fn()
        m = self.mon.end_window(name)
        self.windows.append((name, i, m.time, float(sum(m.gpu_energy.values()))))
        return out

    def zeus_step(self, i: int) -> None:
        self._win("step", i, lambda: self.plain(i))

    def zeus_phase(self, i: int) -> None:
        loss = self._win("forward", i, lambda: self._loss(i))
        self._win("backward", i, loss.backward)
        self._win("optimizer", i, self._optim)


def main() -> None:
    a = _options()
    torch.backends.cudnn.benchmark = True
    # markers before the CUDA-graph capture, as before the loop became a class
    marked = a.markers == "on" and markers.configure(gpu_timeline=True) is not None
    loop = Loop(a.batch, a.graphs, a.zeus)
    body = ({"step": loop.zeus_step, "phase": loop.zeus_phase}.get(a.zeus)
            or (loop.with_markers if marked else loop.plain))
    for i in range(a.warmup):
        body(i)
    dt, extra = timed(body, a.steps, a.batch, a.steps_csv)
    if a.zeus_csv and loop.windows:
        import pandas as pd

        w = pd.DataFrame(loop.windows, columns=["phase", "step", "time_s", "energy_j"])
        w["measured"] = w["step"] >= a.warmup
        w.to_csv(a.zeus_csv, index=False)
    print(json.dumps({"images_per_s": a.steps * a.batch / dt, "markers": marked, "zeus": a.zeus,
                      "graphs": a.graphs, "step_ms": dt / a.steps * 1e3, **extra}), flush=True)


if __name__ == "__main__":
    main()
