"""Two GPU models side by side from committed run folders (issue 46), no GPU needed:

    PYTHONPATH=src python3 benchmarks/gpu_compare.py --out results/reference/gpu-compare \
        --runs results/reference/h100/workflow-repeats results/reference/h100/workflow-qwen \
               results/reference/h200/workflow-repeats results/reference/h200/workflow

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


def _run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("runs/*/*/*/r*/meta.json"))


def _load(run: Path, label: str) -> dict[str, object]:
    trace = next((run / n for n in TRACE_FILES if (run / n).exists()), None)
    need = [run / "events.csv", run / "work" / "summary.json"]
    missing = [str(p) for p in need if not p.exists()] + ([] if trace else [f"{run}/trace.csv"])
    if missing:
        raise FileNotFoundError(", ".join(missing))
    meta = json.loads((run / "meta.json").read_text())
    summary = json.loads((run / "work" / "summary.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:  # re-attributed by today's code, both models alike
        phases = attribute_files(trace, run / "events.csv", Path(tmp) / "phases.csv")
    return run_row(meta, summary, read_events(run / "events.csv"), read_trace(trace), phases,
                   label)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, type=Path,
                    help="results folders holding runs/<workload>/<storage>/<ckpt>/r<k>/")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--first", default="NVIDIA H100 80GB HBM3",
                    help="gpu_model shown first (default: %(default)s)")
    ap.add_argument("--second", default="NVIDIA H200",
                    help="gpu_model shown second (default: %(default)s)")
    a = ap.parse_args(argv)
    out = out_dir(a.out, "--out")
    rows, skipped = [], []
    for root in a.runs:
        for run in _run_dirs(root):
            label = str(run.relative_to(root.parent))
            try:
                rows.append(_load(run, label))
            except FileNotFoundError as exc:
                skipped.append({"run": label, "missing": str(exc)})
    runs = pd.DataFrame(rows)
    runs.to_csv(out / "compare_runs.csv", index=False)
    pd.DataFrame(skipped, columns=["run", "missing"]).to_csv(out / "skipped.csv", index=False)
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
