"""Issue 43: `wattlife attribute` of a long trace whose readings are out of time order.
CPU only, any machine.

Every device's readings are out of order (the rows in blocks of 2^20 written in reverse block
order): each device's readings are put in time order on disk (`attribution.time_sort`) instead
of its series loaded whole and sorted.

The run is one of `long_trace.py` (its trace.csv.zst and events.csv, e.g. 24 h of one GPU); the
reordered trace.csv is written once under --out (read whole to be written: ~1.5 GB for 17.3 M
rows; `--keep` reuses it). The command runs in a child process of its own (wall s, CPU s of
user + system, peak RSS); the phases table goes to --out/phases.<label>.csv.

    PYTHONPATH=src python3 benchmarks/long_trace.py --hours 24 --gpus 1 --forms zst --out /tmp/lt24
    PYTHONPATH=src python3 benchmarks/unordered_trace.py --run /tmp/lt24/run-17M-1gpu \\
        --out /tmp/lt24s --label after
    python3 benchmarks/unordered_trace.py --run /tmp/lt24/run-17M-1gpu --out /tmp/lt24s --keep \\
        --label before --src <a checkout of 61a1e39>/src
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from long_trace import WATTLIFE, timed  # noqa: E402
from outdir import out_dir  # noqa: E402

#: rows of a block kept in order (the blocks written last to first)
BLOCK = 1 << 20


def write_unordered(run: Path, out: Path) -> int:
    """The run's trace with its blocks of `BLOCK` rows in reverse order, and its events."""
    from wattlife.contracts import read_trace

    df = read_trace(run / "trace.csv.zst")
    n = len(df)
    blocks = [np.arange(a, min(a + BLOCK, n)) for a in range(0, n, BLOCK)][::-1]
    df.iloc[np.concatenate(blocks)].to_csv(out / "trace.csv", index=False)
    shutil.copy(run / "events.csv", out / "events.csv")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="a run folder of long_trace.py")
    ap.add_argument("--out", required=True, help="where the reordered run is written")
    ap.add_argument("--src", help="PYTHONPATH of the wattlife to time (default: this one)")
    ap.add_argument("--keep", action="store_true", help="reuse the reordered trace written before")
    ap.add_argument("--label", default="after", help="a label for the row (default: after)")
    a = ap.parse_args()
    out = out_dir(a.out)
    if not (a.keep and (out / "trace.csv").exists()):
        print(f"{write_unordered(Path(a.run), out):,} rows written in reverse blocks", flush=True)
    cmd = [*WATTLIFE, "attribute", "--trace", str(out / "trace.csv"), "--events",
           str(out / "events.csv"), "-o", str(out / f"phases.{a.label}.csv")]
    wall, cpu, rss, rc = timed(cmd, a.src)
    print("| label | wall s | CPU s | peak RSS GB | exit |\n|---|---|---|---|---|")
    print(f"| {a.label} | {wall:.1f} | {cpu:.1f} | {rss:.2f} | {rc} |")


if __name__ == "__main__":
    main()
