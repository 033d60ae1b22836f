"""`wattlife` commands of a measurement's custody: measure (one cell, as a sealed attempt),
cells (each cell's state), retire (measure again), relink (a cell's files again from its
attempt), seal-derived (a derived file's seal)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any


def _log_to_stderr() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(name)s: %(levelname)s: %(message)s")


def cmd_measure(a: argparse.Namespace) -> int:
    from ..custody import measure_cell

    _log_to_stderr()
    try:
        slice_doc = json.loads(a.slice)
    except ValueError as exc:
        raise ValueError(f"--slice: expected the cell's config slice as JSON ({exc})") from None
    return measure_cell(a.results, a.cell, slice_doc, pointer=a.pointer, poll_s=a.poll_s)


def cmd_cells(a: argparse.Namespace) -> int:
    from ..config import load_config
    from ..custody import cell_states, format_states

    cfg = load_config(a.config)
    rows = cell_states(Path(a.results or cfg["results_dir"]), cfg)
    print(format_states(rows, a.json))
    return 0 if all(r["state"] == "current" for r in rows) else 3


def cmd_retire(a: argparse.Namespace) -> int:
    from ..custody import retire

    for cell in a.cells:
        n = retire(Path(a.results), cell)
        trace = Path(a.results) / "runs" / cell / "trace.csv"
        print(f"{cell}: {n} sealed attempt(s) retired (kept); measure it again with: snakemake "
              f"... --forcerun {trace}")
    return 0


def cmd_relink(a: argparse.Namespace) -> int:
    from ..custody import cell_dir, relink

    for cell in a.cells:
        pointer = relink(Path(a.results), cell_dir(Path(a.results), cell))
        print(f"{cell}: linked again from the attempt of {pointer}")
    return 0


def cmd_seal_derived(a: argparse.Namespace) -> int:
    from ..custody import seal_derived

    print(seal_derived(Path(a.file), Path(a.pointer)))
    return 0


def add_parsers(sub: Any) -> None:
    m = sub.add_parser("measure", help="measure one cell as a sealed attempt and publish it",
                       description="One training cell of the workflow: waits for a live earlier "
                                   "attempt of the cell, adopts a sealed result of the same "
                                   "slice, else measures a new attempt, seals and publishes it.")
    m.add_argument("--results", required=True, help="the results folder")
    m.add_argument("--cell", required=True, help="<workload>/<storage>/ckpt-<mode>/r<N>")
    m.add_argument("--slice", required=True, help="the cell's config slice (JSON)")
    m.add_argument("--pointer", help="the pointer the rule expects (its hash is checked; "
                                     "default: none, not checked)")
    m.add_argument("--poll-s", type=float, default=None,
                   help="seconds between looks at a live earlier attempt (default: 1, 15 in Slurm)")
    m.set_defaults(fn=cmd_measure)
    c = sub.add_parser("cells", help="each cell's state: current, stale, other-code, damaged, "
                                     "missing, unsealed",
                       description="For a results folder and the config: which cells are current "
                                   "(exit 0 when all are), which not (exit 3), and why.")
    c.add_argument("--config", required=True, help="the workflow's config file")
    c.add_argument("results", nargs="?", help="the results folder (default: the config's)")
    c.add_argument("--json", action="store_true", help="JSON rows (default: off: text)")
    c.set_defaults(fn=cmd_cells)
    for name, fn, what in (
            ("retire", cmd_retire, "measure cells again at the next run: their sealed attempts "
                                   "are kept but never adopted again, their pointers removed"),
            ("relink", cmd_relink, "link cells' files again from their published, intact "
                                   "attempt (after they were removed, cut or edited)")):
        r = sub.add_parser(name, help=what.split(":")[0], description=what)
        r.add_argument("results", help="the results folder")
        r.add_argument("cells", nargs="+", metavar="CELL",
                       help="<workload>/<storage>/ckpt-<mode>/r<N>")
        r.set_defaults(fn=fn)
    s = sub.add_parser("seal-derived", help="seal a derived file (phases.csv) of a cell",
                       description="Write FILE.seal.json: FILE's size, rows and sha256 and the "
                                   "published pointer it was derived from.")
    s.add_argument("file", help="the derived file (a cell's phases.csv)")
    s.add_argument("--pointer", required=True, help="the cell's sealed-<hash>.json")
    s.set_defaults(fn=cmd_seal_derived)
