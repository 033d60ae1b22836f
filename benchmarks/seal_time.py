"""Issue 39: what custody costs a cell after its measurement ends, for a trace of --mb MB.

Runs `wattlife.custody.measure.measure_new` for one cell whose command only writes a trace (and
events, meta, summary) into its attempt folder, so the time it takes beyond that writer's is the
seal (every file's size, rows, sha256) and the publication; then `relink` (rule `link_cell`) and
`cell_problems` (what `check`, `aggregate` and the waiting tables do before reading a cell). A
checkpoint of --ckpt-mb MB is written where a workload writes one (`<storage>/checkpoints/<run
id>/`, outside the attempt): it is never part of a seal, so it costs the seal nothing.

    PYTHONPATH=src python3 benchmarks/seal_time.py --mb 1024 --out /tmp/seal
    # another checkout, for "before":
    PYTHONPATH=../old/src python3 benchmarks/seal_time.py --mb 1024 --out /tmp/seal-old

The command (this script, `--write-into`) writes the trace as the sampler does
(`safewrite.SafeAppender`, 1 MiB of rows a write) and meta.json's `recording.trace` keeps what
the writer recorded: where it hashed the bytes while writing them (`digest`), the seal takes that
instead of reading the trace back (custody.seal.writer_digests); older code reads it. Each step's
wall and CPU seconds are printed (CPU: of this process, where the seal and the checks run; the
writer's own, of the command).

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


def write_trace(path: Path, mb: float) -> dict[str, Any]:
    """The trace written through the sampler's writer; what it records for meta.json."""
    from wattlife.safewrite import SafeAppender

    block = (LINE * max(1, (1 << 20) // len(LINE))).decode()
    out = SafeAppender(path, "", "bench", truncate=True)
    for _ in range(max(1, int(mb * (1 << 20) // len(block)))):
        out.write(block)
    return out.close()


def write_cell(attempt: Path, mb: float, times: Path) -> None:
    """The measured command: the cell's files in its attempt; the writer's (wall s, CPU s) in
    `times`, outside it."""
    t, rec = timed(write_trace, attempt / "trace.csv", mb)
    (attempt / "events.csv").write_text("run_id,phase,start_ns,end_ns\nr,step,1,2\n")
    (attempt / "meta.json").write_text(json.dumps({"run_id": "bench",
                                                   "recording": {"trace": rec}}))
    (attempt / "work").mkdir()
    (attempt / "work/summary.json").write_text("{}")
    times.write_text(json.dumps(t))


def make_checkpoint(storage: Path, ckpt_mb: float) -> None:
    ckpt = storage / "checkpoints" / "resnet-local-ckpton-r1"
    ckpt.mkdir(parents=True, exist_ok=True)
    write_big(ckpt / "model.pt", ckpt_mb, b"\x00" * 4096)


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[tuple[float, float], Any]:
    """((wall s, CPU s of this process), fn's result)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    return (time.perf_counter() - t, time.process_time() - c), out


def run(out: Path, mb: float, ckpt_mb: float) -> dict[str, tuple[float, float]]:
    from wattlife.custody import cell_dir, cell_problems, relink
    from wattlife.custody import measure as M

    results, times = out / "results", out / "writer.json"
    shutil.rmtree(results, ignore_errors=True)
    make_checkpoint(out / "storage", ckpt_mb)
    M.cell_command = lambda slice_doc, cell, attempt, order=None: (  # the measured command
        f"{sys.executable} {Path(__file__).resolve()} --write-into {attempt} --mb {mb} "
        f"--out {times}")
    (wall, cpu), rc = timed(M.measure_new, results, CELL, {"slice": "bench"})
    assert rc == 0, f"measure_new exited {rc}"
    t_write = tuple(json.loads(times.read_text()))
    t_measure = (wall - t_write[0], cpu)  # beyond the command's own time: seal and publish
    cell = cell_dir(results, CELL)
    t_relink, _ = timed(relink, results, cell)
    t_verify, bad = timed(cell_problems, cell)
    assert not bad, bad
    seal = json.loads(next(cell.glob("sealed-*.json")).read_text())
    print("hashed while written:", seal.get("hashed_while_written", "(not recorded: older code)"))
    return {"trace writer (command)": t_write, "seal+publish (job)": t_measure,
            "relink (link_cell)": t_relink, "verify (each reader)": t_verify}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1024, help="trace size, MB (default: 1024)")
    ap.add_argument("--ckpt-mb", type=float, default=1024,
                    help="checkpoint size, MB, outside the attempt (default: 1024)")
    ap.add_argument("--out", required=True, help="a scratch folder (its files are rewritten)")
    ap.add_argument("--write-into", help=argparse.SUPPRESS)  # the measured command's own call
    a = ap.parse_args()
    if a.write_into:
        write_cell(Path(a.write_into), a.mb, Path(a.out))
        return
    out = out_dir(a.out)
    rows = run(out, a.mb, a.ckpt_mb)
    print(f"trace {a.mb:g} MB, checkpoint {a.ckpt_mb:g} MB (outside the attempt)")
    for name, (s, cpu) in rows.items():
        rate = f"{a.mb / s:8.0f} MB/s of trace" if s >= 0.01 else "(reads no file)"
        print(f"{name:24s} {s:8.2f} s wall {cpu:8.2f} CPU s  {rate}")
    shutil.rmtree(out / "results", ignore_errors=True)
    shutil.rmtree(out / "storage", ignore_errors=True)


if __name__ == "__main__":
    main()
