"""Sampler and attribution checks on a real GPU, in one call (issues 3 and 4).

    PYTHONPATH=src python3 benchmarks/attribution_checks.py --out DIR [--pairs 5]

1. accuracy   : >= 60 s of varying load; energy integrated from the driver's ~20 ms power samples
                vs the total-energy counter over the same span (target: within 1%).
2. resolution : 40 ms on / 40 ms off; the power samples must show two separated levels.
3. overhead   : ResNet-50 training throughput without / with the sampler / with every phase marked
                (interleaved runs); the sampler's own CPU time per wall second.
4. step       : per phase kind, 1.5 s idle then 3 s of the kind: power and SM clock by time since
                the kind began (does the kind's power depend on how long it runs?).
5. attribution[:SET]: a set of phase kinds (KIND_SETS) in >= 1 s phases (ground truth by
                integration), then interleaved in 5-20 ms phases (deconvolution with a boxcar
                window and with an estimated sensor response; 2 s block regression); per-kind
                mean power compared (target: within 5%), with each kind's SM clock in both runs.
Writes CSVs and summary.json under --out and prints a short table last. Changes no GPU setting
(the SM carve-out of `matmul_half`/`matmul_quarter` is a cuBLASLt option of the process).
`--work DIR --analyse-only` repeats the analysis of step/attribution on saved traces, e.g. those
in results/reference/h200/attribution/run*/traces.tar.gz, without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from outdir import out_dir

from wattlife.attribution import attribute_energy, device_series
from wattlife.contracts import read_events, read_trace

HERE = Path(__file__).resolve().parent
PY = sys.executable
KIND_SETS = {  # attribution runs: phase kinds run long (ground truth) and short (deconvolved)
    # not clock-limited: tensor cores and memory on a quarter of the SMs, the idle GPU
    "quarter_sm": ["matmul_quarter", "copy_quarter", "wait"],
    "quarter": ["matmul_quarter", "copy", "wait"],
    # matmuls held by the SW power cap when long (clocks drop within ~50-100 ms), so their
    # 5-20 ms bursts run faster and draw more than their long phases
    "half": ["matmul_half", "copy", "wait_spin"],
    "full_sm": ["matmul_low", "matmul_narrow", "copy", "wait_spin"],
    "at_limit": ["matmul", "matmul_low", "copy", "wait"],
    "all": ["matmul", "matmul_low", "matmul_narrow", "matmul_half", "matmul_quarter", "copy",
            "copy_quarter", "wait", "wait_spin"],
}


def under_sampler(run_dir: Path, cmd: list[str],
                  env: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    run_dir.mkdir(parents=True, exist_ok=True)
    full = [PY, "-m", "wattlife.cli", "run", "--trace", str(run_dir / "trace.csv"),
            "--events", str(run_dir / "events.csv"), "--gpu", "nvml", "--cpu", "auto",
            "--idle-s", "1", "--"] + cmd
    r = subprocess.run(full, env=env or os.environ.copy(), capture_output=True, text=True)
    (run_dir / "output.txt").write_text(r.stdout + r.stderr)
    return r


def gpu_power(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    tr = read_trace(run_dir / "trace.csv")
    g = tr[tr["device"] == "gpu0"]
    return g[g["metric"] == "power_w"], g[g["metric"] == "energy_j"]


def check_accuracy(work: Path, seconds: float) -> dict[str, Any]:
    d = work / "accuracy"
    r = under_sampler(d, [PY, str(HERE / "gpu_loads.py"), "--mode", "varying",
                          "--seconds", str(seconds)])
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    tr = read_trace(d / "trace.csv")
    gpu = tr[tr["device"] == "gpu0"]
    series = [s for s in device_series(gpu) if s.device == "gpu0"][0]
    counter = gpu[gpu["metric"] == "energy_j"].sort_values("t_ns")
    t = counter["t_ns"].to_numpy()
    e = counter["value"].to_numpy()
    ok = (t >= series.t_ns[0]) & (t <= series.t_ns[-1])
    t, e = t[ok], e[ok]
    integ = series.energy_at(t)
    rows = pd.DataFrame({"t_ns": t, "counter_j": e - e[0], "samples_j": integ - integ[0]})
    rows.to_csv(work / "accuracy_windows.csv", index=False)
    total_counter = float(e[-1] - e[0])
    total_samples = float(integ[-1] - integ[0])
    p = series.power_w
    assert p is not None  # a power source: its readings are watts
    return {"span_s": float((t[-1] - t[0]) / 1e9), "counter_j": total_counter,
            "samples_j": total_samples, "rel_error": total_samples / total_counter - 1,
            "n_samples": int(len(p)), "sample_period_ms": series.spacing_s * 1e3,
            "power_min_w": float(p.min()), "power_max_w": float(p.max()), "source": series.source}


def check_resolution(work: Path) -> dict[str, Any]:
    d = work / "resolution"
    r = under_sampler(d, [PY, str(HERE / "gpu_loads.py"), "--mode", "square", "--seconds", "8",
                          "--on-ms", "40", "--off-ms", "40"])
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    power, _ = gpu_power(d)
    ev = read_events(d / "events.csv")
    t0, t1 = ev["start_ns"].min(), ev["end_ns"].max()
    p = power[(power["t_ns"] > t0) & (power["t_ns"] < t1)]["value"].to_numpy()
    power.to_csv(work / "resolution_samples.csv", index=False)
    # two levels: split at the midpoint between the 10th and 90th percentiles
    lo_p, hi_p = np.percentile(p, [10, 90])
    mid = (lo_p + hi_p) / 2
    low, high = p[p < mid], p[p >= mid]
    gap_sd = (high.mean() - low.mean()) / np.sqrt((high.var() + low.var()) / 2)
    hist, edges = np.histogram(p, bins=20)
    pd.DataFrame({"bin_lo_w": edges[:-1], "bin_hi_w": edges[1:], "count": hist}).to_csv(
        work / "resolution_histogram.csv", index=False)
    return {"n_samples": int(len(p)), "low_level_w": float(low.mean()),
            "high_level_w": float(high.mean()), "share_low": float(len(low) / len(p)),
            "separation_in_sd": float(gap_sd), "p10_w": float(lo_p), "p90_w": float(hi_p),
            "middle_bin_share": float(((p > lo_p + 0.4 * (hi_p - lo_p)) &
                                       (p < lo_p + 0.6 * (hi_p - lo_p))).mean())}


def check_overhead(work: Path, pairs: int, steps: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    rows = []
    loop = [PY, str(HERE / "train_loop.py"), "--steps", str(steps)]
    for i in range(pairs):
        for mode in ("bare", "sampler", "markers"):
            d = work / f"overhead_{mode}_{i}"
            env = os.environ.copy()
            if mode == "bare":
                r = subprocess.run(loop + ["--markers", "off"], capture_output=True, text=True)
            elif mode == "sampler":
                r = under_sampler(d, loop + ["--markers", "off"])
            else:
                d.mkdir(parents=True, exist_ok=True)
                env["WATTLIFE_EVENTS"] = str(d / "events.csv")
                r = subprocess.run(loop + ["--markers", "on"], env=env, capture_output=True,
                                   text=True)
            if r.returncode:
                raise RuntimeError(f"{mode}: {r.stderr[-2000:]}")
            res = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
            row = {"pair": i, "mode": mode, **res}
            if mode == "sampler":
                meta = json.loads((d / "meta.json").read_text())
                wall = (meta["end_ns"] - meta["start_ns"]) / 1e9
                row["sampler_cpu_s"] = meta["sampler"]["cpu_time_s"]
                row["sampler_wall_s"] = wall
            if mode == "markers":
                row["events"] = len(read_events(d / "events.csv"))
            rows.append(row)
            print(f"  overhead pair {i} {mode}: {res['images_per_s']:.0f} img/s", flush=True)
    df = pd.DataFrame(rows)
    piv = df.pivot(index="pair", columns="mode", values="images_per_s")
    slow_s = 1 - piv["sampler"] / piv["bare"]
    slow_m = 1 - piv["markers"] / piv["bare"]
    s = df[df["mode"] == "sampler"]
    return df, {"pairs": pairs, "bare_img_s_median": float(piv["bare"].median()),
                "sampler_slowdown_median": float(slow_s.median()),
                "markers_slowdown_median": float(slow_m.median()),
                "sampler_cpu_share_of_core": float((s["sampler_cpu_s"]
                                                    / s["sampler_wall_s"]).median())}


def phase_clocks(ck: pd.DataFrame, ev: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Mean SM clock, temperature and the share of polls with any clock-event (throttle) reason
    other than idle, per phase kind, from the workload's 5 ms clock polls `ck`."""
    ev = ev[ev["phase"].isin(names)].sort_values("start_ns")
    i = np.searchsorted(ev["start_ns"].to_numpy(), ck["t_ns"].to_numpy(), "right") - 1
    ok = (i >= 0) & (ck["t_ns"].to_numpy() < ev["end_ns"].to_numpy()[np.clip(i, 0, None)])
    ck = ck[ok].assign(phase=ev["phase"].to_numpy()[i[ok]])
    idle_bit = 0x1  # GpuIdle: not a limit
    ck["limited"] = (ck["event_reasons"].astype(np.int64) & ~idle_bit) != 0
    return ck.groupby("phase").agg(sm_clock_mhz=("sm_clock_mhz", "mean"),
                                   temp_c=("temp_c", "mean"), limited_share=("limited", "mean"),
                                   polls=("t_ns", "size"))


def run_attribution(work: Path, long_s: float, short_s: float, kinds: list[str], tag: str) -> None:
    """The GPU part: the kinds in long phases, then in short ones, under the sampler."""
    for mode, secs in (("long", long_s), ("short", short_s)):
        d = work / f"attr_{tag}_{mode}"
        r = under_sampler(d, [PY, str(HERE / "gpu_loads.py"), "--mode", mode, "--kinds",
                              ",".join(kinds), "--seconds", str(secs),
                              "--clocks", str(d / "clocks.csv")])
        if r.returncode:
            raise RuntimeError(r.stderr[-2000:])


def comparison_rows(kinds: list[str], out: dict[str, Any], blocks: dict[str, Any],
                    clocks: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kind: the long phases' integrated power (the truth) beside the short phases' block
    regression, deconvolution (boxcar and estimated response) and both runs' clocks."""
    cmp_rows = []
    for kind in kinds:
        truth = out["long"].loc[kind, "mean_power_w"]
        got = out["short"].loc[kind]
        cmp_rows.append({"kind": kind, "long_integrated_w": truth,
                         "short_block_regression_w": blocks.get(kind, np.nan),
                         "short_deconvolved_w": got["mean_power_w"],
                         "short_lo_w": got["energy_lo_j"] / got["time_s"],
                         "short_hi_w": got["energy_hi_j"] / got["time_s"],
                         "rel_error": got["mean_power_w"] / truth - 1,
                         "rel_error_vs_blocks": got["mean_power_w"] / blocks.get(kind, np.nan) - 1,
                         "short_phases": int(got["count"]),
                         "short_deconvolved_estimated_response_w":
                             out["short_response"].loc[kind, "mean_power_w"],
                         "rel_error_estimated_response":
                             out["short_response"].loc[kind, "mean_power_w"] / truth - 1,
                         "identifiability": got.get("identifiability", np.nan),
                         "long_sm_clock_mhz": clocks["long"]["sm_clock_mhz"].get(kind, np.nan),
                         "short_sm_clock_mhz": clocks["short"]["sm_clock_mhz"].get(kind, np.nan),
                         "long_limited_share": clocks["long"]["limited_share"].get(kind, np.nan),
                         "short_limited_share": clocks["short"]["limited_share"].get(kind, np.nan),
                         "long_temp_c": clocks["long"]["temp_c"].get(kind, np.nan),
                         "short_temp_c": clocks["short"]["temp_c"].get(kind, np.nan)})
    return cmp_rows


def analyse_attribution(work: Path, kinds: list[str], tag: str
                        ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Long-phase ground truth vs the short phases' deconvolution (boxcar window, estimated
    sensor response) and block regression, with each kind's SM clock in both runs. Runs on
    the saved traces, so it can be repeated without a GPU."""
    out = {}
    clocks = {}
    for mode in ("long", "short"):
        d = work / f"attr_{tag}_{mode}"
        tr = read_trace(d / "trace.csv")
        ev = read_events(d / "events.csv")
        gpu = tr[tr["device"] == "gpu0"]
        if mode == "long":
            # ground truth: the middle of each >= 1 s phase, away from the sensor's window edges
            e2 = ev.copy()
            trim = 200_000_000
            e2["start_ns"] += trim
            e2["end_ns"] -= trim
            ph = attribute_energy(gpu, e2, method="integrate")
        else:
            ph = attribute_energy(gpu, ev, method="deconvolve", n_boot=200)
            est = attribute_energy(gpu, ev, method="deconvolve", n_boot=200, response="estimate")
            est.to_csv(work / f"attribution_{tag}_short_response.csv", index=False)
            est.attrs["sensor_responses"][(est["host"].iloc[0], "gpu0")].to_csv(
                work / f"attribution_{tag}_sensor_response.csv")
            out["short_response"] = est.set_index("phase")
        ph.to_csv(work / f"attribution_{tag}_{mode}.csv", index=False)
        out[mode] = ph.set_index("phase")
        clocks[mode] = phase_clocks(pd.read_csv(d / "clocks.csv"), ev, kinds)
        if mode == "short":
            seg = (ev["end_ns"] - ev["start_ns"]) / 1e6
            seg = seg[ev["phase"].isin(kinds)]
            out["short_phase_ms"] = (float(seg.min()), float(seg.median()), float(seg.max()))
            out["window_ms"] = float(ph["window_ms"].dropna().iloc[0])
            blocks = block_regression(gpu, ev, work / f"attribution_{tag}_blocks.csv")
    cmp = pd.DataFrame(comparison_rows(kinds, out, blocks, clocks))
    return cmp, {"kinds": kinds, "short_phase_ms_min_median_max": out["short_phase_ms"],
                 "deconvolution_window_ms": out["window_ms"],
                 "max_abs_rel_error": float(cmp["rel_error"].abs().max()),
                 "max_abs_rel_error_vs_blocks": float(cmp["rel_error_vs_blocks"].abs().max())}


def run_step(work: Path, kinds: list[str]) -> None:
    d = work / "step"
    r = under_sampler(d, [PY, str(HERE / "gpu_loads.py"), "--mode", "step", "--kinds",
                          ",".join(kinds), "--clocks", str(d / "clocks.csv")])
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])


def analyse_step(work: Path, kinds: list[str]) -> pd.DataFrame:
    """Step response per kind: mean power of the driver's samples and the SM clock by time since
    the kind began after 1.5 s of idle. A kind whose power is flat from the first 20 ms on has
    one power whatever its phase length; one that overshoots or sags does not."""
    d = work / "step"
    power, _ = gpu_power(d)
    ck = pd.read_csv(d / "clocks.csv")
    ev = read_events(d / "events.csv")
    edges_ms = np.array([0, 20, 50, 100, 200, 500, 1000, 2000, 3000])
    rows = []
    for kind in kinds:
        if not (ev["phase"] == kind).any():
            continue  # a run made before this kind existed
        e = ev[ev["phase"] == kind].iloc[0]
        for what, t, v in (("power_w", power["t_ns"], power["value"]),
                           ("sm_clock_mhz", ck["t_ns"], ck["sm_clock_mhz"])):
            # a power sample averages the ~20 ms before its stamp: bin it by its window's middle
            since = (t.to_numpy() - (10e6 if what == "power_w" else 0) - e["start_ns"]) / 1e6
            b = np.digitize(since, edges_ms) - 1
            for j in range(len(edges_ms) - 1):
                m = b == j
                rows.append({"kind": kind, "metric": what, "from_ms": edges_ms[j],
                             "to_ms": edges_ms[j + 1], "mean": float(v.to_numpy()[m].mean())
                             if m.any() else np.nan, "n": int(m.sum())})
    return pd.DataFrame(rows)


def block_regression(gpu: pd.DataFrame, ev: pd.DataFrame, out_csv: Path) -> dict[str, float]:
    """Per-kind power from 2 s blocks of differing mixes: E_block = sum_k P_k t_k (NNLS).

    Each block's energy is integrated over 2 s, so the sensor's ~20-30 ms window matters only at
    the block edges (~1%): a window-free estimate of the same short-phase physics."""
    from scipy.optimize import nnls

    s = [x for x in device_series(gpu) if x.device == "gpu0"][0]
    blocks = ev[ev["phase"] == "block"].sort_values("start_ns")
    kinds = ev[ev["phase"] != "block"]
    bi = np.searchsorted(blocks["start_ns"].to_numpy(), kinds["start_ns"].to_numpy(), "right") - 1
    names = sorted(kinds["phase"].unique())
    t = np.zeros((len(blocks), len(names)))
    dur = (kinds["end_ns"] - kinds["start_ns"]).to_numpy() / 1e9
    for j, n in enumerate(names):
        m = (kinds["phase"] == n).to_numpy()
        np.add.at(t[:, j], bi[m], dur[m])
    gaps = (blocks["end_ns"] - blocks["start_ns"]).to_numpy() / 1e9 - t.sum(1)
    a = np.column_stack([t, gaps])
    e = s.energy_at(blocks["end_ns"].to_numpy()) - s.energy_at(blocks["start_ns"].to_numpy())
    beta = nnls(a, e)[0]
    pd.DataFrame(np.column_stack([a, e]), columns=names + ["gap", "energy_j"]).to_csv(
        out_csv, index=False)
    return dict(zip(names + ["gap"], beta, strict=False))


def gpu_name(summary: dict[str, Any]) -> None:
    """The first GPU's name and the driver into `summary` (`gpu`: unknown and why, without)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        summary["gpu"] = name.decode() if isinstance(name, bytes) else name
        drv = pynvml.nvmlSystemGetDriverVersion()
        summary["driver"] = drv.decode() if isinstance(drv, bytes) else drv
    except Exception as exc:  # noqa: BLE001
        summary["gpu"] = f"unknown ({exc})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--accuracy-s", type=float, default=65)
    ap.add_argument("--only", default="resolution,attribution,accuracy,overhead",
                    help="comma-separated parts: accuracy, resolution, overhead, step, "
                         "attribution[:KIND_SET] with KIND_SET one of " + ", ".join(KIND_SETS))
    ap.add_argument("--work", help="folder of the runs' traces (default $TMPDIR/wattlife-h200)")
    ap.add_argument("--analyse-only", action="store_true",
                    help="step/attribution: analyse the traces already in --work (no GPU needed)")
    a = ap.parse_args()
    out = out_dir(a.out)
    work = Path(a.work) if a.work else Path(os.environ.get("TMPDIR", "/tmp")) / "wattlife-h200"
    work.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "analysed_from": str(work) if a.analyse_only else "this run"}
    gpu_name(summary)
    for part in a.only.split(","):
        t = time.time()
        print(f"== {part}", flush=True)
        try:
            if part == "accuracy":
                summary["accuracy"] = check_accuracy(work, a.accuracy_s)
            elif part == "resolution":
                summary["resolution"] = check_resolution(work)
            elif part == "overhead":
                df, summary["overhead"] = check_overhead(work, a.pairs, a.steps)
                df.to_csv(out / "overhead_runs.csv", index=False)
            elif part == "step":
                if not a.analyse_only:
                    run_step(work, KIND_SETS["all"])
                analyse_step(work, KIND_SETS["all"]).to_csv(out / "step_response.csv", index=False)
            elif part.startswith("attribution"):
                tag = part.partition(":")[2] or "quarter_sm"
                kinds = KIND_SETS[tag]
                if not a.analyse_only:
                    run_attribution(work, 6 * len(kinds), 60, kinds, tag)
                cmp, summary[f"attribution_{tag}"] = analyse_attribution(work, kinds, tag)
                cmp.to_csv(out / f"attribution_{tag}_comparison.csv", index=False)
                for m in ("long", "short", "blocks", "short_response", "sensor_response"):
                    f = f"attribution_{tag}_{m}.csv"
                    (out / f).write_bytes((work / f).read_bytes())
        except Exception:  # noqa: BLE001 - keep the other parts' results
            summary[part] = {"error": traceback.format_exc()[-3000:]}
        summary.setdefault("seconds", {})[part] = time.time() - t
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for f in ("accuracy_windows.csv",):
        if (work / f).exists():
            (out / f).write_bytes((work / f).read_bytes())
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
