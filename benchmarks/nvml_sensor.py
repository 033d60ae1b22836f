"""NVML's power sensor characterised on this GPU (issue 46), in one call of at most --budget-s:

    PYTHONPATH=src python3 benchmarks/nvml_sensor.py --out DIR [--budget-s 150] [--gpu 0]

The suite's own sampler (`Sampler` + `NvmlBackend`, production settings) records the trace for
the whole run while a thread polls the total-energy counter every ~1 ms. On a synthetic load
(default: bf16 4096^3 matmul on 1/4 of the SMs through cuBLASLt's SM carve-out, a library
option of this process, so the power cap does not act and the power does not depend on phase
length; GPU-timed with CUDA events mapped to the host clock as the markers do):
1. spacing : the driver's sample buffer (timestamp deltas); power usage, the energy counter and
             (where pynvml has them) the instant/average power fields polled at ~1 ms under
             2.5 s of load: how often each value changes, the counter's step (mJ).
2. window  : --steps idle->load->idle steps (0.8 s each) at random offsets to the reading grid;
             a boxcar of width w and delay d fitted to the readings around the steps, the
             10-90 % rise of a monotone fit, window / spacing.
3. lengths : per length L (--lengths, ms) load phases separated by idle gaps (>= 1 s of load,
             >= 3 phases): block energy from the readings vs the counter; per phase the plain
             integration of the readings, the counter and the suite's attribution (method auto,
             each phase its own name; and all under one name) against the truth, long-run power
             x measured length (power from the middles of the >= 0.8 s loads); whether the
             suite's interval (energy_lo_j, energy_hi_j) holds the truth.
Writes sensor_spacing.csv, sensor_window.csv, sensor_phase_length.csv, summary.json and
sensor_raw.tar.gz (trace, events, polls, per-phase rows) under --out; prints a table last.
Changes no GPU setting; a part that fails is recorded in summary.json and the rest still runs.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from nvml_poller import Poller
from nvml_sensor_analysis import analyse_run, findings, print_table
from outdir import out_dir

from wattlife.contracts import EVENTS_COLUMNS, read_events, read_trace, write_table

LENGTHS_MS = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
RESERVE_S = 12.0  # analysis, tables and the archive after the GPU work
STEP_MS, STEP_IDLE_S = 800.0, 0.8


def gap_ms(L: float) -> float:
    return min(max(L, 80.0), 500.0)


def reps(L: float) -> int:
    return max(3, math.ceil(1000.0 / L))


def block_cost_s(L: float) -> float:
    return reps(L) * (L + gap_ms(L) + 12.0) / 1e3 + 0.4


class Gpu:
    """The load (GPU-timed) and the map of CUDA events to the host's epoch-ns clock."""

    def __init__(self, torch: Any, kind: str, ordinal: int) -> None:
        self.torch, self.notes = torch, []
        torch.cuda.set_device(ordinal)
        d = torch.device("cuda", ordinal)
        n = 4096
        self.a = torch.randn(n, n, device=d, dtype=torch.bfloat16)
        self.b = torch.randn(n, n, device=d, dtype=torch.bfloat16)
        self.c = torch.empty(n, n, device=d, dtype=torch.bfloat16)
        self.op: Callable[[], Any] = lambda: torch.matmul(self.a, self.b, out=self.c)
        self.kind, self.full_ms = kind, self._time()
        if kind == "copy":
            self.src = torch.empty(64 * 2**20, device=d, dtype=torch.float32)
            self.dst = torch.empty_like(self.src)
            self.op = lambda: self.dst.copy_(self.src)
        elif kind == "matmul_quarter":
            try:
                n_sm = torch.cuda.get_device_properties(ordinal).multi_processor_count
                torch.backends.cuda.preferred_blas_library("cublaslt")
                torch._C._set_sm_carveout_experimental(n_sm - n_sm // 4)
            except Exception as exc:  # noqa: BLE001
                self.kind = "matmul"
                self.notes.append(f"SM carve-out unavailable ({exc}); full-GPU matmul instead")
        self.unit_ms = self._time()
        self.anchor()

    def _time(self, n: int = 40) -> float:
        for _ in range(5):
            self.op()
        e0, e1 = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        e0.record()
        for _ in range(n):
            self.op()
        e1.record()
        e1.synchronize()
        result: float = e0.elapsed_time(e1) / n
        return result

    def anchor(self) -> None:
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        ev.synchronize()
        self.anchor_ev = (ev, time.time_ns())

    def event(self) -> Any:
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev, self.anchor_ev

    @staticmethod
    def to_ns(rec: Any) -> int:
        ev, (a, t0) = rec
        result: int = t0 + int(round(a.elapsed_time(ev) * 1e6))
        return result

    def launch(self, n: int) -> None:
        """n kernels, in chunks of ~20 ms with at most 3 queued: the GPU never starves and the
        host waits in event.synchronize (GIL released), so the poll threads keep their rate."""
        chunk, done, pending = max(1, int(20.0 / self.unit_ms)), 0, []
        while done < n:
            for _ in range(min(chunk, n - done)):
                self.op()
            done += min(chunk, n - done)
            ev = self.torch.cuda.Event()
            ev.record()
            pending.append(ev)
            if len(pending) > 2:
                pending.pop(0).synchronize()

    def phase(self, ms: float) -> tuple[int, int]:
        """A load phase of ~ms of GPU time from an idle GPU: (start_ns, end_ns), host clock."""
        s = self.event()
        self.launch(max(1, round(ms / self.unit_ms)))
        e = self.event()
        e[0].synchronize()
        return self.to_ns(s), self.to_ns(e)


def nvml_handle(nv: Any, gpu: int) -> Any:
    from wattlife.devices.nvidia import resolve_visible_devices

    indices, _ = resolve_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), nv)
    return indices[gpu], nv.nvmlDeviceGetHandleByIndex(indices[gpu])


def field_fn(nv: Any, h: Any, fid: int) -> Any:
    from wattlife.devices.nvidia import sample_value

    def f() -> Any:
        v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
        if v.nvmlReturn != 0:
            raise nv.NVMLError(v.nvmlReturn)
        return sample_value(nv, v.valueType, v.value), v.timestamp
    return f


def part_spacing(a: Any, g: Gpu, nv: Any, h: Any, summary: dict[str, Any], loads: list[Any],
                 left: Any) -> None:
    """Power usage and the power fields polled every ~1 ms under 2.5 s of load."""
    fns = {"power_usage": lambda: (nv.nvmlDeviceGetPowerUsage(h), 0)}
    for nm in ("NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_POWER_AVERAGE"):
        if hasattr(nv, nm):
            fns["field_" + nm[len("NVML_FI_DEV_"):].lower()] = field_fn(nv, h, getattr(nv, nm))
    polls = [Poller(k, f).start() for k, f in fns.items()]
    summary["_polls"] = polls
    time.sleep(0.3)
    try:
        s, e = g.phase(2500.0)
        loads.append({"part": "spacing", "name": "spacing_load", "L_ms": 2500.0,
                      "start_ns": s, "end_ns": e})
    finally:
        for p in polls:
            p.stop()


def part_window(a: Any, g: Gpu, nv: Any, h: Any, summary: dict[str, Any], loads: list[Any],
                left: Any) -> None:
    """Idle -> load -> idle steps at random offsets to the reading grid (as many as leave room
    for the lengths, at least 4)."""
    rng = np.random.default_rng(a.seed)
    n_steps, lengths_s = a.steps, 1.05 * sum(block_cost_s(L) for L in a.lengths)
    while n_steps > 4 and n_steps * (STEP_MS / 1e3 + STEP_IDLE_S + 0.06) + 1 + lengths_s > left():
        n_steps -= 1
    summary["window_steps"] = n_steps
    g.anchor()
    for k in range(n_steps):
        time.sleep(STEP_IDLE_S + rng.uniform(0.0, 0.1))
        s, e = g.phase(STEP_MS)
        loads.append({"part": "window", "name": f"step_{k:02d}", "L_ms": STEP_MS,
                      "start_ns": s, "end_ns": e})
    time.sleep(STEP_IDLE_S)


def part_lengths(a: Any, g: Gpu, nv: Any, h: Any, summary: dict[str, Any], loads: list[Any],
                 left: Any) -> None:
    """Per length, shortest first, its block of load phases and idle gaps; a block that would
    overrun the budget is dropped (and so every longer one)."""
    rng = np.random.default_rng(a.seed + 1)
    for L in sorted(a.lengths):
        if block_cost_s(L) > left():
            summary["dropped_lengths_ms"].append(L)
            continue
        g.anchor()
        bs = time.time_ns()
        time.sleep(0.3)
        block = []
        for i in range(reps(L)):
            s, e = g.phase(L)
            block.append({"part": "lengths", "name": f"L{L:g}ms_{i:03d}", "L_ms": float(L),
                          "start_ns": s, "end_ns": e})
            time.sleep((gap_ms(L) + rng.uniform(0.0, 20.0)) / 1e3)
        be = time.time_ns()
        loads += [dict(r, block_start_ns=bs, block_end_ns=be) for r in block]
        print(f"  L = {L:g} ms: {len(block)} phases, {(be - bs) / 1e9:.1f} s", flush=True)


def archive(work: Path, out: Path, summary: dict[str, Any]) -> None:
    """Raw files into sensor_raw.tar.gz (<= 10 MB: the polls go first if it is larger)."""
    names = ["trace.csv.gz", "events.csv", "polls.csv.gz", "window_points.csv",
             "phases_per_instance.csv", "suite_phases.csv"]
    if (work / "trace.csv").exists():
        pd.read_csv(work / "trace.csv").to_csv(work / "trace.csv.gz", index=False)
    for drop in ([], ["polls.csv.gz"]):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            for n in names:
                if (work / n).exists() and n not in drop:
                    tf.add(work / n, arcname=n)
        if buf.tell() <= 10 * 2**20:
            break
    (out / "sensor_raw.tar.gz").write_bytes(buf.getvalue())
    summary["raw_left_out"] = drop


def gpu_info(nv: Any, h: Any, torch: Any) -> dict[str, Any]:
    from importlib.metadata import version

    txt: Callable[[Any], str] = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "python": sys.version.split()[0]}
    for k, fn in (("gpu", lambda: txt(nv.nvmlDeviceGetName(h))),
                  ("driver", lambda: txt(nv.nvmlSystemGetDriverVersion())),
                  ("nvml", lambda: txt(nv.nvmlSystemGetNVMLVersion())),
                  ("nvidia_ml_py", lambda: version("nvidia-ml-py")),
                  ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3)):
        try:
            info[k] = fn()
        except Exception as exc:  # noqa: BLE001
            info[k] = f"unknown ({exc})"
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--gpu", type=int, default=0, help="CUDA ordinal (default 0)")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS_MS)), help="phase lengths, ms")
    ap.add_argument("--load", choices=["matmul_quarter", "matmul", "copy"],
                    default="matmul_quarter")
    ap.add_argument("--steps", type=int, default=10, help="window part: idle/load steps")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.lengths = [float(x) for x in a.lengths.split(",") if x.strip()]
    out = out_dir(a.out)
    t_start = time.monotonic()
    import pynvml as nv
    import torch

    if not torch.cuda.is_available():
        sys.exit("nvml_sensor: no CUDA GPU visible (torch.cuda.is_available() is False); "
                 "nothing was run")
    try:
        nv.nvmlInit()
        idx, h = nvml_handle(nv, a.gpu)
    except (nv.NVMLError, IndexError) as exc:
        sys.exit(f"nvml_sensor: no NVML handle for CUDA device {a.gpu} ({exc}); nothing was run")
    summary: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "budget_s": a.budget_s,
        "args": {k: v for k, v in vars(a).items()}, "nvml_index": idx,
        **gpu_info(nv, h, torch), "dropped_lengths_ms": [], "errors": {}}
    work = Path(tempfile.mkdtemp(prefix="nvml-sensor-"))
    loads, counter = measure(a, torch, nv, h, idx, work, summary, t_start)
    finish(a, out, work, idx, loads, counter, summary, t_start)


def measure(a: Any, torch: Any, nv: Any, h: Any, idx: int, work: Path, summary: dict[str, Any],
            t_start: float
            ) -> tuple[list[dict[str, Any]], Poller]:
    """The suite's sampler and the counter poller around the GPU parts; the load phases."""
    from wattlife.devices.nvml import NvmlBackend
    from wattlife.sampler import Sampler

    sampler = Sampler([NvmlBackend(indices=[idx])], work / "trace.csv")
    counter = Poller("energy_counter",
                     lambda: (nv.nvmlDeviceGetTotalEnergyConsumption(h), 0)).start()
    sampler.start()
    loads: list[dict[str, Any]] = []
    try:
        g = Gpu(torch, a.load, a.gpu)
        summary.update(load=g.kind, load_notes=g.notes, kernel_ms=g.unit_ms,
                       kernel_full_gpu_matmul_ms=g.full_ms, setup_s=time.monotonic() - t_start)
        print(f"{summary['gpu']}: {g.kind} kernel {g.unit_ms:.3f} ms (full-GPU matmul "
              f"{g.full_ms:.3f} ms); setup {summary['setup_s']:.1f} s", flush=True)
        left = lambda: t_start + a.budget_s - time.monotonic() - RESERVE_S  # noqa: E731
        for name, part in (("spacing", part_spacing), ("window", part_window),
                           ("lengths", part_lengths)):
            try:
                part(a, g, nv, h, summary, loads, left)
            except Exception:  # noqa: BLE001 - the other parts still run
                summary["errors"][f"gpu_{name}"] = traceback.format_exc()[-3000:]
                torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - analyse what was measured
        summary["errors"]["gpu"] = traceback.format_exc()[-3000:]
    finally:
        time.sleep(0.6)  # the sampler drains the buffer every 0.5 s
        counter.stop()
        sampler.stop()
    summary["poll_errors"] = {p.name: dict(p.errors) for p in
                              summary.get("_polls", []) + [counter] if p.errors}
    summary["sampler"] = {"errors": sampler.errors, "sensors": sampler.sensors()}
    summary["gpu_s"] = time.monotonic() - t_start
    return loads, counter


def finish(a: Any, out: Path, work: Path, idx: int, loads: list[dict[str, Any]], counter: Poller,
           summary: dict[str, Any], t_start: float) -> None:
    """Events through the contract, the analysis, the tables (always), the archive, summary."""
    ld = pd.DataFrame(loads, columns=["part", "name", "L_ms", "start_ns", "end_ns",
                                      "block_start_ns", "block_end_ns"])
    tables: dict[str, Any] = {}
    try:
        host = str(pd.read_csv(work / "trace.csv", nrows=1)["host"].iat[0])
        ev = ld.assign(run_id="nvml-sensor", host=host, rank=0, step=np.nan, items=np.nan,
                       phase=ld["name"])
        write_table(ev, work / "events.csv", EVENTS_COLUMNS)
        ld = ld.assign(start_ns=read_events(work / "events.csv")["start_ns"].to_numpy())
        tr = read_trace(work / "trace.csv")
        polls = {p.name: p.frame() for p in summary.pop("_polls", [])}
        polls["energy_counter"] = counter.frame()
        pd.concat(polls.values(), ignore_index=True).to_csv(work / "polls.csv.gz", index=False)
        tables, extra = analyse_run(tr[tr["device"] == f"gpu{idx}"].assign(device="gpu0"), ld,
                                    polls, summary, a.n_boot, STEP_MS)
        for name, df in extra.items():
            df.to_csv(work / name, index=False)
    except Exception:  # noqa: BLE001
        summary["errors"]["analysis"] = traceback.format_exc()[-3000:]
    summary.pop("_polls", None)
    for key, name in (("spacing", "sensor_spacing.csv"), ("window", "sensor_window.csv"),
                      ("lengths", "sensor_phase_length.csv")):
        tables.get(key, pd.DataFrame()).to_csv(out / name, index=False)
    try:
        findings(summary, tables)
        archive(work, out, summary)
    except Exception:  # noqa: BLE001
        summary["errors"]["archive"] = traceback.format_exc()[-2000:]
    summary["total_s"] = time.monotonic() - t_start
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print_table(tables, summary)

if __name__ == "__main__":
    main()
