"""Two GPU models side by side from committed run folders (issue 46), no GPU needed:

    PYTHONPATH=src python3 benchmarks/gpu_compare.py --out results/reference/gpu-compare \
        --runs results/reference/h100/workflow-repeats results/reference/h200/workflow-repeats \
               results/reference/h100/workflow-qwen results/reference/h200/workflow:qwen

A root may name the workloads it gives (`ROOT:qwen`, `ROOT:qwen,resnet`): `h200/workflow` holds
an older ResNet-50 run beside its Qwen3 runs, which the ResNet comparison (the repeats) leaves
out. A root that does not exist yet (`h100/workflow-qwen` before its device call) is listed in
`skipped.csv` and said on stdout, never an error, so one command rebuilds whatever exists;
`sources.csv` says what each root gave (runs per workload and GPU model).

Every run folder under each `--runs` root (`runs/<workload>/<storage>/<ckpt>/r<k>/` with meta.json,
events.csv, trace.csv[.gz], work/summary.json) gives one row of `compare_runs.csv`
(`wattlife.analysis.gpu_compare.run_row`), its phases attributed afresh from the trace and
events by today's code with the workflow's default options (so both models' shares share one
attribution, whatever code wrote their committed phases.csv); `compare_cells.csv` puts the two
GPU models side by side per cell and metric with 95 % intervals (`compare_cells`). A run whose
folder lacks a file is listed in `skipped.csv` with the file, never filled. Figures:
`fig_gpu_compare_<workload>.png/pdf`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd
from outdir import out_dir

from wattlife.analysis.gpu_compare import compare_cells, run_row
from wattlife.attribution import attribute_files
from wattlife.contracts import TRACE_FILES, read_events, read_trace
from wattlife.figures.gpu_compare import draw_gpu_compare


def parse_root(arg: str) -> tuple[Path, set[str] | None]:
    """`ROOT` or `ROOT:workload[,workload...]` -> (root, the workloads taken, None for all)."""
    root, sep, names = arg.rpartition(":") if ":" in arg else (arg, "", "")
    if not sep:
        return Path(arg), None
    taken = {n.strip() for n in names.split(",") if n.strip()}
    if not taken:
        raise SystemExit(f"--runs {arg}: no workload after ':' (ROOT:qwen,resnet)")
    return Path(root), taken


def run_dirs(root: Path, workloads: set[str] | None) -> list[Path]:
    """The run folders under `root` (runs/<workload>/<storage>/<ckpt>/r<k>/), of `workloads`."""
    runs = sorted(p.parent for p in root.glob("runs/*/*/*/r*/meta.json"))
    return [r for r in runs if workloads is None or r.relative_to(root).parts[1] in workloads]


def _load(run: Path, label: str) -> dict[str, object]:
    trace = next((run / n for n in TRACE_FILES if (run / n).exists()), None)
    need = [run / "events.csv", run / "work" / "summary.json"]
    missing = [str(p) for p in need if not p.exists()] + ([] if trace else [f"{run}/trace.csv"])
    if missing:
        raise FileNotFoundError(", ".join(missing))
    assert trace is not None  # in `missing` otherwise
    meta = json.loads((run / "meta.json").read_text())
    summary = json.loads((run / "work" / "summary.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:  # re-attributed by today's code, both models alike
        phases = attribute_files(trace, run / "events.csv", Path(tmp) / "phases.csv")
    return run_row(meta, summary, read_events(run / "events.csv"), read_trace(trace), phases,
                   label)


def _options(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True,
                    help="results folders holding runs/<workload>/<storage>/<ckpt>/r<k>/, "
                         "each optionally ROOT:workload[,workload]")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--first", default="NVIDIA H100 80GB HBM3",
                    help="gpu_model shown first (default: %(default)s)")
    ap.add_argument("--second", default="NVIDIA H200",
                    help="gpu_model shown second (default: %(default)s)")
    return ap.parse_args(argv)


def collect(roots: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(one row per run, named by its folder under the roots' grandparent, e.g.
    `h100/workflow-repeats/runs/...`; the runs and roots skipped with why; what each root
    gave)."""
    rows, skipped, sources = [], [], []
    for arg in roots:
        root, workloads = parse_root(arg)
        if not root.is_dir():
            skipped.append({"run": str(root), "missing": f"{root}: no such folder (not yet run?)"})
            print(f"skipped {arg}: no such folder")
            continue
        got = []
        for run in run_dirs(root, workloads):
            label = str(run.relative_to(root.parent.parent))
            try:
                got.append(_load(run, label))
            except FileNotFoundError as exc:
                skipped.append({"run": label, "missing": str(exc)})
        for (wl, model), g in (pd.DataFrame(got).groupby(["workload", "gpu_model"])
                               if got else []):
            sources.append({"root": str(root.relative_to(root.parent.parent))
                            + (":" + ",".join(sorted(workloads)) if workloads else ""),
                            "workload": wl, "gpu_model": model, "runs": len(g)})
        rows += got
    return (pd.DataFrame(rows), pd.DataFrame(skipped, columns=["run", "missing"]),
            pd.DataFrame(sources, columns=["root", "workload", "gpu_model", "runs"]))


def main(argv: list[str] | None = None) -> int:
    a = _options(argv)
    out = out_dir(a.out, "--out")
    runs, skipped, sources = collect(a.runs)
    runs.to_csv(out / "compare_runs.csv", index=False)
    skipped.to_csv(out / "skipped.csv", index=False)
    sources.to_csv(out / "sources.csv", index=False)
    print(sources.to_string(index=False))
    cells = compare_cells(runs, a.first, a.second)
    cells.to_csv(out / "compare_cells.csv", index=False)
    for path in draw_gpu_compare(cells, out):
        print(f"wrote {path}")
    show = cells[cells["metric"].isin(["throughput", "steady_power_w", "j_per_item"])]
    print(show[["workload", "storage", "checkpoint", "metric", "n_first", "mean_first",
                "n_second", "mean_second", "ratio", "within_noise"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
