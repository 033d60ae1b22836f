"""Issue 39: what custody costs a cell after its measurement ends, for a trace of --mb MB.

Runs `wattlife.custody.measure.measure_new` for one cell whose command only hard-links a
pre-made trace (and events, meta, summary) into its attempt folder, so the time it takes is the
seal (every file's size, rows, sha256) and the publication; then `relink` (rule `link_cell`) and
`cell_problems` (what `check`, `aggregate` and the waiting tables do before reading a cell). A
checkpoint of --ckpt-mb MB is written where a workload writes one (`<storage>/checkpoints/<run
id>/`, outside the attempt): it is never part of a seal, so it costs the seal nothing.

    PYTHONPATH=src python3 benchmarks/seal_time.py --mb 1024 --out /tmp/seal
    # another checkout, for "before":
    PYTHONPATH=../old/src python3 benchmarks/seal_time.py --mb 1024 --out /tmp/seal-old

Prints one table (seconds, and MB/s of the trace); the numbers live in docs/MEASUREMENTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from outdir import out_dir  # noqa: E402

CELL = "resnet/local/ckpt-on/r1"
LINE = b"1767225600000000000,node1,gpu0,power_w,312.5,measured\n"


def write_big(path: Path, mb: float, line: bytes) -> None:
    """A file of `mb` MB made of `line` repeated (written in 1 MiB blocks)."""
    block = line * max(1, (1 << 20) // len(line))
    with open(path, "wb") as fh:
        for _ in range(max(1, int(mb * (1 << 20) // len(block)))):
            fh.write(block)


def make_inputs(src: Path, storage: Path, mb: float, ckpt_mb: float) -> None:
    src.mkdir(parents=True, exist_ok=True)
    write_big(src / "trace.csv", mb, LINE)
    (src / "events.csv").write_text("run_id,phase,start_ns,end_ns\nr,step,1,2\n")
    (src / "meta.json").write_text(json.dumps({"run_id": "bench"}))
    (src / "summary.json").write_text("{}")
    ckpt = storage / "checkpoints" / "resnet-local-ckpton-r1"
    ckpt.mkdir(parents=True, exist_ok=True)
    write_big(ckpt / "model.pt", ckpt_mb, b"\x00" * 4096)


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def run(out: Path, mb: float, ckpt_mb: float) -> dict[str, float]:
    from wattlife.custody import cell_dir, cell_problems, relink
    from wattlife.custody import measure as M

    src, results = out / "made", out / "results"
    shutil.rmtree(results, ignore_errors=True)
    make_inputs(src, out / "storage", mb, ckpt_mb)
    M.cell_command = lambda slice_doc, cell, attempt, order=None: (  # files at once
        f"ln {src}/trace.csv {src}/events.csv {src}/meta.json {attempt}/ && "
        f"mkdir {attempt}/work && ln {src}/summary.json {attempt}/work/")
    t_measure, rc = timed(M.measure_new, results, CELL, {"slice": "bench"})
    assert rc == 0, f"measure_new exited {rc}"
    cell = cell_dir(results, CELL)
    t_relink, _ = timed(relink, results, cell)
    t_verify, bad = timed(cell_problems, cell)
    assert not bad, bad
    return {"seal+publish (job)": t_measure, "relink (link_cell)": t_relink,
            "verify (each reader)": t_verify}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1024, help="trace size, MB (default: 1024)")
    ap.add_argument("--ckpt-mb", type=float, default=1024,
                    help="checkpoint size, MB, outside the attempt (default: 1024)")
    ap.add_argument("--out", required=True, help="a scratch folder (its files are rewritten)")
    a = ap.parse_args()
    out = out_dir(a.out)
    rows = run(out, a.mb, a.ckpt_mb)
    print(f"trace {a.mb:g} MB, checkpoint {a.ckpt_mb:g} MB (outside the attempt)")
    for name, s in rows.items():
        rate = f"{a.mb / s:8.0f} MB/s of trace" if s >= 0.01 else "(reads no file)"
        print(f"{name:24s} {s:8.2f} s  {rate}")
    shutil.rmtree(out / "results", ignore_errors=True)
    shutil.rmtree(out / "made", ignore_errors=True)
    shutil.rmtree(out / "storage", ignore_errors=True)


if __name__ == "__main__":
    main()
