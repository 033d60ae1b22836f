"""`wattlife cells`: for a results folder and the current config, which measurements (training
cells, PFI caps, transfers) are current, stale (their sealed slice differs from the config's),
measured by other code, damaged, missing or unsealed (an attempt in flight, killed or failed,
none published); and the user's remedies: `retire` (measure it again) and `relink` (its
published files again from the attempt)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .attempts import attempts_of, folders_of, mark
from .publish import POINTER_GLOB, published
from .seal import code_version, slice_hash
from .verify import cell_problems

STATES = ("current", "stale", "other-code", "damaged", "missing", "unsealed")
KINDS = ("cell", "pfi-cap", "transfer")


def matrix(config: Mapping[str, Any], transfers: int | None = 1
           ) -> dict[str, tuple[str, dict[str, Any]]]:
    """ident -> (kind, its current config slice) of every measuring job the workflow runs for
    `config` (wattlife.jobs.measurement_slices: the rules' slices)."""
    from .. import jobs as J

    return J.measurement_slices(config, transfers)


def cell_state(results: Path, cell: str, slice_doc: Any, code: str) -> dict[str, Any]:
    """One measurement's row (a cell, a PFI cap or a transfer, by its ident): its state,
    published attempt, and how many other attempts it keeps."""
    root, cdir = folders_of(results, cell)
    attempts = attempts_of(root)
    pub = published(cdir)
    doc = pub[1] if pub else {}
    counts = {s: sum(a.state == s for a in attempts) for s in ("sealed", "failed", "unsealed")}
    if pub is None:
        state = "unsealed" if attempts else "missing"
    elif doc.get("slice_hash") != slice_hash(slice_doc):
        state = "stale"
    elif cell_problems(cdir, ("phases.csv",)):
        state = "damaged"
    elif doc.get("code", {}).get("measuring_sha256") != code:
        state = "other-code"
    else:
        state = "current"
    return {"cell": cell, "state": state, "attempt": doc.get("attempt"),
            "spares": counts["sealed"] - (1 if pub and doc.get("attempt") in
                                          {a.folder.name for a in attempts} else 0),
            "failed": counts["failed"], "unsealed": counts["unsealed"]}


def cell_states(results: str | Path, config: Mapping[str, Any], transfers: int | None = 1
                ) -> list[dict[str, Any]]:
    """Every measuring job's row (`matrix`), its kind included."""
    code = code_version()["measuring_sha256"]
    return [{**cell_state(Path(results), ident, sl, code), "kind": kind}
            for ident, (kind, sl) in matrix(config, transfers).items()]


def format_states(rows: list[dict[str, Any]], as_json: bool = False) -> str:
    if as_json:
        return json.dumps(rows, indent=1)
    lines = [f"{r['cell']}\t{r['state']}\t{r['attempt'] or '-'}\tspares {r['spares']}\t"
             f"failed {r['failed']}\tunsealed {r['unsealed']}" for r in rows]
    totals = {s: sum(r["state"] == s for r in rows) for s in STATES}
    return "\n".join(lines + [", ".join(f"{n} {s}" for s, n in totals.items() if n)])


def retire(results: str | Path, cell: str) -> int:
    """Measure `cell` again at the next run: its sealed attempts are retired (kept, never
    adopted again); its pointer, published links and what was derived from them (check.txt,
    phases.csv) are removed, logs kept. Then `snakemake --forcerun <cell>/trace.csv` measures it
    and re-derives what follows. The number of attempts retired."""
    results = Path(results)
    root, cdir = folders_of(results, cell)
    n = 0
    for a in attempts_of(root):
        if a.state == "sealed" and not a.retired:
            mark(a.folder, "retired.json", why="wattlife retire")
            n += 1
    for p in cdir.glob(POINTER_GLOB):  # first: from here the cell is unpublished
        p.unlink()
    if cdir.is_dir():  # the links (the attempts keep their files) and what was derived from them
        for p in sorted(cdir.rglob("*"), reverse=True):
            if p.is_file() and p.suffix != ".log":
                p.unlink()
    return n
