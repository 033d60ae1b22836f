"""Whether a cell's published result may be used: its files against the pointer's manifest, its
derived files (phases.csv) against their own seals, each problem with what re-derives it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from .publish import DERIVED_SUFFIX, published
from .seal import check_file, verify_files


def results_of(cell: Path, doc: dict[str, Any]) -> Path:
    """The results folder of a published folder: `folder` in its pointer (relative to the
    results folder), else a cell folder `<results>/runs/<cell id>`."""
    rel = doc.get("folder") or Path("runs", doc["cell"]).as_posix()
    return cell.parents[len(Path(rel).parts) - 1]


def _measured(cell: Path, doc: dict[str, Any]) -> list[tuple[str, str]]:
    bad = verify_files(cell, doc["files"])
    if not bad:
        return []
    results = results_of(cell, doc)
    attempt = results / doc.get("attempt_path", "")
    intact = attempt.is_dir() and not verify_files(attempt, doc["files"])
    ident = doc["cell"]
    how = (f"its sealed attempt {attempt} is intact: link it again (wattlife relink {results} "
           f"{ident}), then re-attribute") if intact else (
        f"re-measure it (wattlife retire {results} {ident}, then rerun)")
    return [(f, f"{why}; {how}") for f, why in bad]


def _derived(cell: Path, name: str, pointer: Path, doc: dict[str, Any], measured_ok: bool
             ) -> list[tuple[str, str]]:
    path = cell / name
    how = (f"re-attribute it (snakemake --forcerun {path}; the trace and events are intact)"
           if measured_ok else "re-measure the cell first")
    if not path.exists():
        return []
    try:
        seal = json.loads(path.with_name(name + DERIVED_SUFFIX).read_text())
    except (OSError, ValueError):
        return [(str(path), f"has no seal ({name}{DERIVED_SUFFIX}); {how}")]
    if seal.get("from") != pointer.name or seal.get("attempt") != doc.get("attempt"):
        return [(str(path), f"derived from another publication ({seal.get('attempt')}, not "
                            f"{doc.get('attempt')}): stale; {how}")]
    why = check_file(path, seal)
    return [(str(path), f"{why}; {how}")] if why else []


def cell_problems(cell: Path, derived: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(file, problem and remedy) for every reason not to use the cell's result; [] if sound."""
    pub = published(cell)
    if pub is None:
        return [(str(cell), "no published seal (sealed-*.json): the cell is unmeasured or its "
                            "attempt unsealed; rerun the workflow")]
    pointer, doc = pub
    measured = _measured(cell, doc)
    out = list(measured)
    for name in derived:
        out += _derived(cell, name, pointer, doc, not measured)
    return out


def is_sealed_cell(cell: Path) -> bool:
    """Whether a folder is a workflow cell under custody (a pointer, or a derived file's seal)."""
    return published(cell) is not None or any(cell.glob("*" + DERIVED_SUFFIX))


def require_sound(files: list[str | Path], derived: bool = True) -> list[str]:
    """Refuse (ValueError, one line: the first file, its problem and remedy) files of cells under
    custody that are not as sealed; `derived`: the files themselves (phases.csv) are checked
    against their own seals too. The files outside any sealed cell, used unverified."""
    bad: list[tuple[str, str]] = []
    loose = []
    cells: dict[Path, list[str]] = {}  # each cell verified once, whatever number of its files
    for f in map(Path, files):
        if is_sealed_cell(f.parent):
            cells.setdefault(f.parent, []).append(f.name)
        else:
            loose.append(str(f))
    for cell, names in cells.items():
        bad += cell_problems(cell, tuple(names) if derived else ())
    if bad:
        more = f" (and {len(bad) - 1} more problem(s))" if len(bad) > 1 else ""
        raise InputError(f"{bad[0][0]}: {bad[0][1]}{more}; refusing to use it")
    return loose
