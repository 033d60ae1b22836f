"""`wattlife` commands of a measurement's custody: measure (one cell, as a sealed attempt),
attempt (a PFI cap or a transfer, likewise), cells (each measurement's state: cells, PFI caps,
transfers), retire (measure again), relink (a cell's files again from its attempt), seal-derived
(a derived file's seal), drop-checkpoint (a cell's checkpoint folder, after its upload)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError

LOG_FORMAT = "%(name)s: %(levelname)s: %(message)s"


def _log_to_stderr() -> None:
    """The controller's log lines as "wattlife.measure: INFO: ...", other libraries' alike."""
    from ..diagnostics import install

    install(logging.INFO, "wattlife.measure", LOG_FORMAT)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)


def _slice(text: str, of: str) -> Any:
    """--slice, the config slice of the cell or job `of` names, as JSON (one line if not)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"--slice: expected the {of}'s config slice as JSON ({exc})") from None


def cmd_measure(a: argparse.Namespace) -> int:
    from .. import jobs as J
    from ..custody import measure_cell

    _log_to_stderr()
    slice_doc = _slice(a.slice, "cell")
    ex = J.slice_execution(slice_doc)
    order = _order(a.order) if a.order else None
    return measure_cell(a.results, a.cell, slice_doc, pointer=a.pointer, poll_s=a.poll_s,
                        checkpoints=None if a.keep_checkpoint else checkpoint_folder(
                            slice_doc, a.cell, expand=False),
                        checkpoint_nodes=ex.nodes if ex is not None else 1, order=order)


ORDER_KEYS = {"round_position", "round_cells", "order_seed", "order_enforced"}


def _order(text: str) -> dict[str, Any]:
    """--order: the cell's place in its round as JSON, exactly the keys ORDER_KEYS."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(f"--order: expected the cell's place in its round as JSON ({exc})"
                         ) from None
    if not isinstance(doc, dict) or set(doc) != ORDER_KEYS:
        raise InputError(f"--order {text}: expected exactly the keys {sorted(ORDER_KEYS)}")
    return doc


def checkpoint_folder(slice_doc: dict[str, Any], cell: str, expand: bool = True) -> Path:
    """Where the cell's workload writes its checkpoints on this node: <storage>/checkpoints/<run
    id>/ (`workloads.checkpoint_space`), from the cell's config slice, typed here at the edge
    (`expand`: False: the storage root's variables left to each node of the job)."""
    from ..config import settings
    from ..custody.measure import cell_keys, cell_run_id
    from ..workloads.checkpoint_space import cell_checkpoint_folder, checkpoint_root

    k = cell_keys(cell)
    s = settings(slice_doc)
    if not expand:
        return checkpoint_root(s, k["workload"], k["storage"]) / cell_run_id(cell)
    return cell_checkpoint_folder(s, k["workload"], k["storage"], cell_run_id(cell))


def cmd_attempt(a: argparse.Namespace) -> int:
    from ..custody import attempt_job

    _log_to_stderr()
    slice_doc = _slice(a.slice, "job")
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    return attempt_job(a.results, a.into, a.kind, slice_doc, cmd, poll_s=a.poll_s)


def cmd_cells(a: argparse.Namespace) -> int:
    from ..config import load_config
    from ..custody import cell_states, format_states

    cfg = load_config(a.config)
    rows = cell_states(Path(a.results or cfg["results_dir"]), cfg, a.transfers)
    print(format_states(rows, a.json))
    return 0 if all(r["state"] == "current" for r in rows) else 3


def cmd_retire(a: argparse.Namespace) -> int:
    from ..custody import folders_of, retire

    for cell in a.cells:
        n = retire(Path(a.results), cell)
        trace = folders_of(Path(a.results), cell)[1] / "trace.csv"
        print(f"{cell}: {n} sealed attempt(s) retired (kept); measure it again with: snakemake "
              f"... --forcerun {trace}")
    return 0


def cmd_relink(a: argparse.Namespace) -> int:
    from ..custody import folders_of, relink

    for cell in a.cells:
        pointer = relink(Path(a.results), folders_of(Path(a.results), cell)[1])
        print(f"{cell}: linked again from the attempt of {pointer}")
    return 0


def cmd_seal_derived(a: argparse.Namespace) -> int:
    from ..custody import published, seal_derived

    pointer = Path(a.pointer) if a.pointer else None
    if pointer is None:
        pub = published(Path(a.file).parent)
        if pub is None:
            raise InputError(f"{a.file}: no published seal (sealed-*.json) beside it; give "
                             "--pointer")
        pointer = pub[0]
    print(seal_derived(Path(a.file), pointer))
    return 0


def cmd_drop_checkpoint(a: argparse.Namespace) -> int:
    import os

    from ..nodename import short_node_name
    from ..workloads.checkpoint_space import remove_checkpoint_folder, summary_checkpoint_folder

    if (a.summary is None) == (a.folder is None):
        raise InputError("drop-checkpoint: give either SUMMARY or --folder (one of them)")
    if a.folder is not None:  # one node's copy of a multi-node cell's folder (measure's step)
        print(f"{short_node_name()}: "
              f"{remove_checkpoint_folder(Path(os.path.expandvars(a.folder)))}")
        return 0
    folder = summary_checkpoint_folder(a.summary)
    print(f"{a.summary}: lists no checkpoint; nothing removed" if folder is None
          else remove_checkpoint_folder(folder))
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
    m.add_argument("--keep-checkpoint", action="store_true",
                   help="keep the cell's checkpoint folder when the job ends (the upload cell's: "
                        "its upload reads it; default: removed, a checkpoint is not a measurement)")
    m.add_argument("--order", help="the cell's place in its round of repeats (JSON: "
                                   "round_position, round_cells, order_seed, order_enforced), "
                                   "recorded in meta.json's cell (default: none recorded)")
    m.set_defaults(fn=cmd_measure)
    j = sub.add_parser("attempt", help="run a PFI cap or a transfer as a sealed attempt",
                       description="A measuring job other than a training cell: waits for a live "
                                   "earlier attempt of it, adopts a sealed result of the same "
                                   "slice, else runs CMD in a new attempt folder (@ATTEMPT@ in "
                                   "CMD), seals it and publishes it into --into.")
    j.add_argument("--results", required=True, help="the results folder")
    j.add_argument("--into", required=True, help="the job's folder under the results folder, "
                                                 "where its declared outputs lie")
    j.add_argument("--kind", required=True, choices=["pfi-cap", "transfer"],
                   help="pfi-cap: a point recording a failure is measured again, not adopted")
    j.add_argument("--slice", required=True, help="the job's config slice (JSON)")
    j.add_argument("--poll-s", type=float, default=None,
                   help="seconds between looks at a live earlier attempt (default: 1, 15 in Slurm)")
    j.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...] (@ATTEMPT@: the "
                                                         "attempt folder)")
    j.set_defaults(fn=cmd_attempt)
    _add_cells(sub)
    for name, fn, what in (
            ("retire", cmd_retire, "measure cells again at the next run: their sealed attempts "
                                   "are kept but never adopted again, their pointers removed"),
            ("relink", cmd_relink, "link cells' files again from their published, intact "
                                   "attempt (after they were removed, cut or edited)")):
        r = sub.add_parser(name, help=what.split(":")[0], description=what)
        r.add_argument("results", help="the results folder")
        r.add_argument("cells", nargs="+", metavar="CELL",
                       help="<workload>/<storage>/ckpt-<mode>/r<N>, or the folder of a PFI cap "
                            "or a transfer relative to the results folder (pfi/<cell>/cap-<W>, "
                            "transfers/<artefact>)")
        r.set_defaults(fn=fn)
    s = sub.add_parser("seal-derived", help="seal a derived file (phases.csv) of a cell",
                       description="Write FILE.seal.json: FILE's size, rows and sha256 and the "
                                   "published pointer it was derived from.")
    s.add_argument("file", help="the derived file (a cell's phases.csv)")
    s.add_argument("--pointer", help="the sealed-<hash>.json it was derived from (default: the "
                                     "one published beside FILE)")
    s.set_defaults(fn=cmd_seal_derived)
    _add_drop_checkpoint(sub)


def _add_cells(sub: Any) -> None:
    c = sub.add_parser("cells", help="each cell's state: current, stale, other-code, damaged, "
                                     "missing, unsealed",
                       description="For a results folder and the config: which measurements "
                                   "(training cells, PFI caps, transfers) are current (exit 0 "
                                   "when all are), which not (exit 3), and why.")
    c.add_argument("--config", required=True, help="the workflow's config file")
    c.add_argument("results", nargs="?", help="the results folder (default: the config's)")
    c.add_argument("--transfers", type=int, default=1, metavar="N",
                   help="transfers at once, as the run's --resources transfers=N (part of a "
                        "transfer's slice; default: 1, the profiles')")
    c.add_argument("--json", action="store_true", help="JSON rows (default: off: text)")
    c.set_defaults(fn=cmd_cells)


def _add_drop_checkpoint(sub: Any) -> None:
    """The `drop-checkpoint` command's parser."""
    d = sub.add_parser("drop-checkpoint", help="remove the checkpoint folder of a cell's last "
                                               "checkpoint (after its upload)",
                       description="Remove <root>/checkpoints/<run id>/, the folder of the last "
                                   "checkpoint SUMMARY lists (the upload rule, once the upload "
                                   "is sealed). A checkpoint is not a measurement: no seal lists "
                                   "it.")
    d.add_argument("summary", nargs="?", help="the cell's work/summary.json")
    d.add_argument("--folder", help="remove this checkpoint folder (<root>/checkpoints/<run id>) "
                                    "on this node instead, its environment variables expanded "
                                    "here (what `measure` runs on each node of a multi-node "
                                    "job; default: the one SUMMARY lists)")
    d.set_defaults(fn=cmd_drop_checkpoint)
