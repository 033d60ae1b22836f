"""Publishing a sealed attempt as its cell's result, and verifying a cell before it is used.

The cell folder `<results>/runs/<cell>/` holds hard links to the published attempt's files (read
only) and its pointer `sealed-<slice hash>.json` (the seal, plus where the attempt lies), the one
output the measuring rule declares. Publishing removes the old pointer first, links the files
(each by one rename), removes what an earlier publication left that this one lacks (an old run's
`events.rank1.csv`), and writes the new pointer last: whenever a pointer is there, the files match
it. Derived files (phases.csv) get a seal of their own, `<file>.seal.json`, naming the pointer
they were derived from.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..contracts import write_text
from ..errors import SetupError
from .attempts import RUNS, attempts_dir, mark
from .seal import SEAL_FILE, file_entry, read_seal, verify_files

POINTER_GLOB = "sealed-*.json"
#: what a launch may write in a cell folder: left over from an earlier attempt, removed at publish
LAUNCH_LEFTOVERS = ("events.rank*.csv", "clock_offsets.csv", "nodes")
DERIVED_SUFFIX = ".seal.json"


def pointer_name(slice_hash: str) -> str:
    return f"sealed-{slice_hash}.json"


def wanted(results: str | Path, pointer: str | Path, slice_doc: Any, write: bool = True,
           scratch: str | Path | None = None) -> list[str]:
    """What makes any target below a measurement remake it when its pointer for the current slice
    is missing (a changed slice, a new or retired cell), whatever Snakemake's metadata says:
    where the pointer exists, nothing to remake (never measured again): the request of an
    earlier DAG if there is one (so the input set Snakemake recorded for the jobs that ran then
    is the same now: a changed set would rerun them), else []; else the request
    `<its attempts folder>/wanted-<slice hash>.json` (the slice), written now when `write` and
    the results folder exists (the main Snakemake process, at each DAG it builds; none in a
    fresh folder, where every output is missing anyway). As an input of the rule below the
    measuring one, an existing file newer than every output below it: that job reruns, then the
    measuring job, whose missing output it names (Snakemake 9 remakes a missing file only for a
    job that runs: a missing input alone reruns nothing, so no rule can make the request).
    `scratch`: a folder outside the results (a dry run's, a DAG listing's: Snakemake's own
    temporary folder) where the request is written instead, at the same relative path, so that
    they list the stale measurement and leave the results folder untouched."""
    results, pointer = Path(results), Path(pointer)
    folder = pointer.parent.relative_to(results)
    ident = folder.relative_to(RUNS) if folder.parts[:1] == (RUNS,) else folder
    digest = pointer.name.removeprefix("sealed-").removesuffix(".json")
    request = attempts_dir(results, ident.as_posix()) / f"wanted-{digest}.json"
    if pointer.exists():  # a request made earlier stays an input (older than what it remade):
        return [str(request)] if request.exists() else []  # the jobs' input sets never change
    if write and results.is_dir():
        if scratch is not None:
            request = Path(scratch) / request.relative_to(results)
        request.parent.mkdir(parents=True, exist_ok=True)
        write_text(request, json.dumps({"slice": slice_doc, "pointer": pointer.name,
                                        "wanted_at": time.time()}, sort_keys=True) + "\n")
    return [str(request)] if request.exists() else []  # a fresh results folder: all is made


def published(cell: Path) -> tuple[Path, dict[str, Any]] | None:
    """The cell's pointer and its document (the newest, if an interrupted publish left two)."""
    found = []
    for p in cell.glob(POINTER_GLOB):
        doc = read_seal(p)
        if doc is not None:
            found.append((doc.get("published_at", 0), p, doc))
    if not found:
        return None
    _, path, doc = max(found, key=lambda t: t[0])
    return path, doc


def _link(src: Path, dst: Path) -> None:
    """dst becomes src's file in one rename (a hard link; a copy across file systems)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and os.path.samefile(src, dst):
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.publish.tmp")
    tmp.unlink(missing_ok=True)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def _remove_leftovers(cell: Path, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    stale = set((old or {}).get("files", {})) - set(new["files"])
    for pattern in LAUNCH_LEFTOVERS:
        stale |= {p.relative_to(cell).as_posix() for p in cell.glob(pattern)}
    for rel in sorted(stale - set(new["files"])):
        p = cell / rel
        if p.is_dir() and not p.is_symlink():
            if not any(k.startswith(rel + "/") for k in new["files"]):
                shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def _link_all(attempt: Path, cell: Path, seal: dict[str, Any]) -> None:
    """Every file of the seal linked into `cell`, and its folders made (an empty `work/` too: a
    rule may declare it)."""
    for rel in seal.get("dirs", ()):
        (cell / rel).mkdir(parents=True, exist_ok=True)
    for rel in seal["files"]:
        _link(attempt / rel, cell / rel)


def publish(results: Path, attempt: Path, cell: Path, fresh: dict[str, Any] | None = None
            ) -> Path:
    """Publish the sealed `attempt` as the result of the cell folder `cell`; its pointer path.
    RuntimeError if the attempt is not sealed or no longer matches its seal. `fresh`: the seal
    this process has just written from the files (read-only since): they are not read again."""
    seal = read_seal(attempt / SEAL_FILE)
    if seal is None:
        raise SetupError(f"{attempt}: not sealed; an unsealed attempt is never published")
    bad = [] if fresh is not None and fresh == seal else verify_files(attempt, seal["files"])
    if bad:
        raise SetupError(f"{bad[0][0]}: {bad[0][1]}; attempt {attempt} is damaged, not published")
    cell.mkdir(parents=True, exist_ok=True)
    old = published(cell)
    for p in cell.glob(POINTER_GLOB):  # from here until the new pointer: the cell is unpublished
        p.unlink()
    _remove_leftovers(cell, old[1] if old else None, seal)
    _link_all(attempt, cell, seal)
    doc = {**seal, "attempt_path": os.path.relpath(attempt, results),
           "folder": os.path.relpath(cell, results), "published_at": time.time()}
    pointer = cell / pointer_name(seal["slice_hash"])
    write_text(pointer, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    # dated as the attempt's oldest file: never newer than the links made from it (Snakemake's
    # mtime rule would otherwise remake them, and what follows, at every run)
    oldest = min(((attempt / rel).stat().st_mtime_ns for rel in seal["files"]),
                 default=time.time_ns())
    os.utime(pointer, ns=(time.time_ns(), oldest))
    mark(attempt, "published.json", cell=str(cell))
    return pointer


def relink(results: Path, cell: Path) -> Path:
    """Link the published attempt's files into `cell` again (after Snakemake or a user removed,
    cut or edited them); the pointer is left as it is. Its path; RuntimeError if the cell has
    no pointer or its attempt is missing or damaged (then re-measure)."""
    pub = published(cell)
    if pub is None:
        raise SetupError(f"{cell}: no published seal (sealed-*.json); measure the cell")
    pointer, doc = pub
    attempt = results / doc.get("attempt_path", "")
    # sizes only: every reader of the links verifies their sha256 (the attempt's own inodes)
    bad = verify_files(attempt, doc["files"], quick=True)
    if bad:
        raise SetupError(f"{bad[0][0]}: {bad[0][1]}; the published attempt is damaged: "
                           f"re-measure the cell (wattlife retire {results} {doc['cell']})")
    _remove_leftovers(cell, None, doc)
    _link_all(attempt, cell, doc)
    return pointer


def seal_derived(path: Path, pointer: Path) -> Path:
    """`<path>.seal.json`: size, rows and sha256 of a derived file, and the pointer (published
    attempt) it was derived from."""
    src = read_seal(pointer)
    if src is None:
        raise SetupError(f"{pointer}: no published seal to derive {path.name} from")
    doc = {"file": path.name, **file_entry(path), "from": pointer.name,
           "attempt": src.get("attempt"), "sealed_at": time.time()}
    out = path.with_name(path.name + DERIVED_SUFFIX)
    write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return out
