"""`wattlife attempt`: a measuring job other than a training cell (a PFI cap, a download, the
upload) as an attempt of its own, like `wattlife measure` does for a cell.

The rule names the folder it publishes into (`--into`, the folder of its declared outputs,
`<results>/pfi/<cell>/cap-<W>/` or `<results>/transfers/<artefact>/`) and the command; every
`@ATTEMPT@` in the command is the attempt folder, `<results>/attempts/<that folder relative to
the results>/a<time>-<host>-<pid>/`, where the command writes. Under that job's lock (a live
orphan waited for), a sealed attempt of the same slice is adopted, else the command runs in a new
attempt that gets the slice as `config.json`, is sealed on exit 0 and published (hard links and
the pointer `sealed-<slice hash>.json` in `--into`, the rule's one output: its name holds the
slice's hash, so a changed slice is a missing output), or kept aside with its reason. The
command's output is the attempt's `run.log` (published with it).

A PFI cap whose point records a failure (`status` not ok: the device refused the cap, the run
failed) is sealed and published, so the curve shows it, but never adopted: the job of that cap,
run again (`--forcerun` of its point), measures it again.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from .attempts import attempts_dir
from .measure import Target, under_custody

PLACEHOLDER = "@ATTEMPT@"


def _point_ok(folder: Path) -> bool:
    """A PFI cap's curve point says `ok` (a recorded failure is measured again, not adopted)."""
    from ..contracts import read_curves

    try:
        df = read_curves(folder / "curve-point.csv")
    except (OSError, ValueError):
        return False
    return "status" not in df.columns or bool((df["status"].fillna("ok") == "ok").all())


#: what an attempt of each kind must show to be adopted (None: any sealed one of its slice)
KINDS: dict[str, Callable[[Path], bool] | None] = {"pfi-cap": _point_ok, "transfer": None}


def attempt_command(argv: Sequence[str], attempt: Path) -> str:
    """The command line (bash) with `@ATTEMPT@` replaced by the attempt folder."""
    if not argv:
        raise InputError("wattlife attempt: no command after --")
    return shlex.join(w.replace(PLACEHOLDER, str(attempt)) for w in argv)


def attempt_job(results: str | Path, into: str | Path, kind: str, slice_doc: dict[str, Any],
                argv: Sequence[str], poll_s: float | None = None) -> int:
    """The `wattlife attempt` command (see the module docstring); its exit status."""
    results, into = Path(results), Path(into)
    if kind not in KINDS:
        raise InputError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
    try:
        rel = into.resolve().relative_to(results.resolve()).as_posix()
    except ValueError:
        raise InputError(f"--into {into}: not inside --results {results}") from None
    if rel in ("", ".") or rel.split("/")[0] in ("runs", "attempts"):
        raise InputError(f"--into {into}: a job's own folder under the results folder (not "
                         f"runs/ or attempts/: those are the cells' and the attempts')")
    attempt_command(argv, into)  # refuses an empty command before anything is locked
    t = Target(rel, attempts_dir(results, rel), into, adopt_if=KINDS[kind])
    return under_custody(results, t, slice_doc, lambda a: attempt_command(argv, a), poll_s)
