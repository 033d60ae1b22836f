"""The suite side by side with Zeus (ml.energy) on one GPU (issue 19), in one call.

    PYTHONPATH=src python3 benchmarks/peers_zeus.py --out DIR [--repeats 3] [--zeus-wheel W ...]

Zeus comes from the environment (`pip install zeus==0.16.0`), or, where the GPU host has no
registry access, from wheels the user points to (`--zeus-wheel`: zeus and whatever of its
dependencies the host lacks; installed with --no-deps into a folder under --work, not into the
environment). Three parts:

1. overhead : ResNet-50, batch 128, bf16 autocast, channels_last, synthetic on-GPU data
   (benchmarks/train_loop.py), `--repeats` interleaved rounds of four modes: `bare` (nothing
   measured), `suite` (under `wattlife run --gpu nvml` with every phase of every step marked),
   `zeus_step` (a Zeus window around every step) and `zeus_phase` (Zeus windows around every
   forward, backward and optimizer). Throughput cost = 1 - mode / bare of the same round.
2. long     : phases of three kinds (bf16 matmul, 1 GiB copies, idle wait), `--long-phase-s`
   each (default 8), two rounds in random order (benchmarks/gpu_loads.py --mode long), under the
   suite's sampler with each phase marked AND inside a Zeus window: the suite's attributed energy
   per kind (`wattlife attribute`) against the sum of Zeus's windows of that kind (target: within
   1.5 %).
3. short    : the 10-20 ms phases of part 1: Zeus's per-window energies (`zeus_phase` mode: share
   of windows reading exactly 0 J, spread) against the suite's attributed energy per phase
   instance in the `suite` mode (deconvolution, with its 95 % interval).
Writes overhead.csv, long_phases.csv, short_phases.csv, zeus_windows.csv.gz, summary.json and
runs.tar.gz (every run's trace, events, meta, phases) under --out; prints a short table last.
Changes no GPU setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from outdir import out_dir

HERE = Path(__file__).resolve().parent
PY = sys.executable
MODES = ("bare", "suite", "zeus_step", "zeus_phase")
LONG_KINDS = ("matmul", "copy", "wait")
STEP_PHASES = ("forward", "backward", "optimizer")


def zeus_env(work: Path, wheels: list[str]) -> dict[str, str]:
    """The environment the measured processes run in: Zeus importable, from the environment or
    from the given wheels (installed with --no-deps under `work`)."""
    env = os.environ.copy()
    if wheels:
        site = work / "zeus-site"
        subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--target", str(site), *wheels], check=True)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    r = subprocess.run([PY, "-c", "import zeus, zeus.monitor; print(zeus.__version__)"], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit("peers_zeus: Zeus is not importable (pip install zeus==0.16.0, or "
                         f"--zeus-wheel PATH ... for an offline host): {r.stderr.strip()[-300:]}")
    env["ZEUS_VERSION"] = r.stdout.strip()
    return env


def under_sampler(d: Path, cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    d.mkdir(parents=True, exist_ok=True)
    full = [PY, "-m", "wattlife.cli", "run", "--trace", str(d / "trace.csv"), "--events",
            str(d / "events.csv"), "--gpu", "nvml", "--idle-s", "1", "--run-id", d.name, "--"] + cmd
    return subprocess.run(full, env=env, capture_output=True, text=True)


def attribute(d: Path) -> pd.DataFrame:
    subprocess.run([PY, "-m", "wattlife.cli", "attribute", "--trace", str(d / "trace.csv"),
                    "--events", str(d / "events.csv"), "-o", str(d / "phases.csv")],
                   check=True, capture_output=True)
    ph = pd.read_csv(d / "phases.csv")
    return ph[ph["device_kind"] == "gpu"]


def _last_json(stdout: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        [ln for ln in stdout.splitlines() if ln.startswith("{")][-1])
    return result


def overhead_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per mode: median throughput and median cost against `bare` of the same round."""
    piv = runs.pivot(index="round", columns="mode", values="images_per_s")
    rows = []
    for m in piv.columns:
        cost = 1 - piv[m] / piv["bare"]
        rows.append({"mode": m, "images_per_s_median": float(piv[m].median()),
                     "cost_median": float(cost.median()), "cost_min": float(cost.min()),
                     "cost_max": float(cost.max()), "rounds": int(piv[m].notna().sum())})
    return pd.DataFrame(rows)


def long_table(suite: pd.DataFrame, zeus: pd.DataFrame) -> pd.DataFrame:
    """Per phase kind: the suite's attributed energy against the sum of Zeus's windows."""
    z = zeus.groupby("phase").agg(zeus_energy_j=("energy_j", "sum"), zeus_time_s=("time_s", "sum"),
                                  windows=("energy_j", "size"))
    s = suite.set_index("phase").reindex(z.index)
    out = z.join(s[["energy_j", "energy_lo_j", "energy_hi_j", "time_s", "method", "source"]]
                 .rename(columns={"energy_j": "suite_energy_j", "energy_lo_j": "suite_lo_j",
                                  "energy_hi_j": "suite_hi_j", "time_s": "suite_time_s"}))
    out["rel_diff"] = out["suite_energy_j"] / out["zeus_energy_j"] - 1
    out["suite_mean_w"] = out["suite_energy_j"] / out["suite_time_s"]
    out["zeus_mean_w"] = out["zeus_energy_j"] / out["zeus_time_s"]
    return out.reset_index()


def short_table(suite: pd.DataFrame, zeus: pd.DataFrame) -> pd.DataFrame:
    """Per step phase: Zeus's per-window energies (measured steps) against the suite's energy
    per phase instance (attributed total / count, with its interval)."""
    zw = zeus[zeus["measured"]] if "measured" in zeus else zeus
    rows = []
    for p, g in zw.groupby("phase"):
        e = g["energy_j"].to_numpy(float)
        s = suite.set_index("phase").loc[p] if p in set(suite["phase"]) else None
        n = float(s["count"]) if s is not None else np.nan
        rows.append({"phase": p, "zeus_windows": len(e),
                     "zeus_ms_median": float(g["time_s"].median() * 1e3),
                     "zeus_zero_share": float((e == 0).mean()), "zeus_j_mean": float(e.mean()),
                     "zeus_j_p5": float(np.percentile(e, 5)), "zeus_j_p50": float(np.median(e)),
                     "zeus_j_p95": float(np.percentile(e, 95)),
                     "zeus_cv": float(e.std() / e.mean()) if e.mean() else np.nan,
                     "suite_instances": n,
                     "suite_ms_mean": float(s["time_s"] / n * 1e3) if s is not None else np.nan,
                     "suite_j_per_instance": float(s["energy_j"] / n) if s is not None else np.nan,
                     "suite_j_lo": float(s["energy_lo_j"] / n) if s is not None else np.nan,
                     "suite_j_hi": float(s["energy_hi_j"] / n) if s is not None else np.nan,
                     "suite_method": s["method"] if s is not None else "",
                     "suite_source": s["source"] if s is not None else ""})
    return pd.DataFrame(rows)


def _options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the tables and runs.tar.gz")
    ap.add_argument("--work", default="/tmp/wl-peers",
                    help="scratch folder (default /tmp/wl-peers)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="interleaved rounds of the four modes (default 3)")
    ap.add_argument("--steps", type=int, default=150, help="measured steps per run (default 150)")
    ap.add_argument("--warmup", type=int, default=30, help="warm-up steps per run (default 30)")
    ap.add_argument("--long-phase-s", type=float, default=8.0,
                    help="long phases' length (default 8)")
    ap.add_argument("--long-rounds", type=int, default=2,
                    help="rounds of the three long kinds (default 2)")
    ap.add_argument("--zeus-wheel", nargs="*", default=[],
                    help="Zeus wheel(s) to install under --work "
                         "(default: Zeus from the environment)")
    return ap.parse_args()


def overhead_rounds(a: argparse.Namespace, work: Path, env: dict[str, Any]
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Interleaved rounds of the training loop in every mode: one row per run, and the Zeus
    windows of the `zeus_phase` runs."""
    loop = [PY, str(HERE / "train_loop.py"), "--steps", str(a.steps), "--warmup", str(a.warmup)]
    runs, zeus_windows = [], []
    for r in range(a.repeats):
        for mode in MODES:
            d = work / f"overhead_{mode}_{r}"
            d.mkdir(parents=True, exist_ok=True)
            if mode == "suite":
                p = under_sampler(d, loop + ["--markers", "on"], env)
            else:
                z = mode.split("_")[1] if mode.startswith("zeus") else "off"
                p = subprocess.run(loop + ["--zeus", z, "--zeus-csv", str(d / "zeus.csv")], env=env,
                                   capture_output=True, text=True)
            if p.returncode:
                raise RuntimeError(f"{mode} round {r}: {p.stderr[-2000:]}")
            runs.append({"round": r, "mode": mode, **_last_json(p.stdout)})
            if mode == "zeus_phase":
                zeus_windows.append(pd.read_csv(d / "zeus.csv").assign(round=r))
            print(f"round {r} {mode}: {runs[-1]['images_per_s']:.0f} images/s", flush=True)
    return pd.DataFrame(runs), pd.concat(zeus_windows, ignore_index=True)


def long_phases(a: argparse.Namespace, d: Path, env: dict[str, Any]) -> pd.DataFrame:
    """The long kinds under the sampler with a Zeus window around each: both energies."""
    secs = a.long_phase_s * len(LONG_KINDS) * a.long_rounds - 1
    p = under_sampler(d, [PY, str(HERE / "gpu_loads.py"), "--mode", "long", "--kinds",
                          ",".join(LONG_KINDS), "--seconds", str(secs), "--phase-ms",
                          str(a.long_phase_s * 1e3), "--zeus-csv", str(d / "zeus.csv")], env)
    if p.returncode:
        raise RuntimeError(f"long phases: {p.stderr[-2000:]}")
    return long_table(attribute(d), pd.read_csv(d / "zeus.csv"))


def print_tables(ovh: pd.DataFrame, long: pd.DataFrame, short: pd.DataFrame) -> None:
    pd.set_option("display.width", 200)
    print(ovh.round(4).to_string(index=False))
    print(long[["phase", "windows", "zeus_energy_j", "suite_energy_j", "rel_diff",
                "method"]].round(4)
          .to_string(index=False))
    print(short[["phase", "zeus_ms_median", "zeus_zero_share", "zeus_j_p50", "zeus_cv",
                 "suite_j_per_instance", "suite_j_lo", "suite_j_hi"]].round(3)
          .to_string(index=False))


def main() -> None:
    a = _options()
    out, work = out_dir(a.out), Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    env = zeus_env(work, a.zeus_wheel)
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "zeus_version": env["ZEUS_VERSION"]}
    runs_df, zw = overhead_rounds(a, work, env)
    runs_df.to_csv(out / "overhead_runs.csv", index=False)
    ovh = overhead_table(runs_df)
    ovh.to_csv(out / "overhead.csv", index=False)
    zw.to_csv(out / "zeus_windows.csv.gz", index=False)
    suite_short = pd.concat([attribute(work / f"overhead_suite_{r}").assign(round=r)
                             for r in range(a.repeats)])
    sums = suite_short.groupby("phase", as_index=False)[["energy_j", "energy_lo_j", "energy_hi_j",
                                                        "time_s", "count"]].sum()
    first = suite_short.groupby("phase")[["method", "source"]].first().reset_index()
    short = short_table(sums.merge(first, on="phase"), zw[zw["phase"].isin(STEP_PHASES)])
    short.to_csv(out / "short_phases.csv", index=False)
    d = work / "long"
    long = long_phases(a, d, env)
    long.to_csv(out / "long_phases.csv", index=False)
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for run in sorted(work.glob("overhead_*")) + [d]:
            for f in ("trace.csv", "events.csv", "meta.json", "phases.csv", "zeus.csv"):
                if (run / f).exists():
                    tar.add(run / f, arcname=f"{run.name}/{f}")
    summary.update({"overhead": ovh.to_dict("records"), "long": long.to_dict("records"),
                    "short": short.to_dict("records"),
                    "long_max_abs_rel_diff": float(long["rel_diff"].abs().max())})
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print_tables(ovh, long, short)


if __name__ == "__main__":
    main()
