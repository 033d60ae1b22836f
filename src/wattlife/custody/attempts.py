"""Attempt folders: `<results>/attempts/<cell>/<attempt id>/`, one per measuring job, outside
every output Snakemake declares (so neither `--rerun-incomplete` nor `--forcerun` deletes one).

An attempt is *sealed* (seal.json: complete, immutable), *failed* (failed.json: its reason; kept
aside, never published) or *unsealed* (neither: in flight, or killed before its end). A sealed
attempt may also be *published* (published.json: it was once the cell's result) and *retired*
(retired.json: the user asked for a new measurement; never adopted again).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contracts import write_text
from ..errors import SetupError
from .seal import SEAL_FILE, read_seal

ATTEMPTS = "attempts"
RUNS = "runs"


def cell_dir(results: Path, cell: str) -> Path:
    """The cell's published folder (what the rules and tables read)."""
    return results / RUNS / cell


def attempts_dir(results: Path, cell: str) -> Path:
    return results / ATTEMPTS / cell


def folders_of(results: Path, ident: str) -> tuple[Path, Path]:
    """(its attempts' folder, its published folder) of a training cell id
    (`<workload>/<storage>/ckpt-<mode>/r<N>`: published in `runs/<cell>`) or of another measuring
    job, known by its published folder relative to the results (`pfi/<cell>/cap-<W>`,
    `transfers/<artefact>`)."""
    parts = Path(ident).parts
    if len(parts) == 4 and parts[2].startswith("ckpt-") and parts[3][:1] == "r":
        return attempts_dir(results, ident), cell_dir(results, ident)
    return attempts_dir(results, ident), results / ident


def new_attempt(root: Path) -> Path:
    """A fresh, empty attempt folder under `root` (its name: UTC time, host, pid)."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    host = socket.gethostname().split(".")[0]
    for n in range(100):
        folder = root / (f"a{stamp}-{host}-{os.getpid()}" + (f"-{n}" if n else ""))
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise SetupError(f"{root}: cannot create a new attempt folder")


def mark(folder: Path, name: str, **doc: Any) -> None:
    """Write a bookkeeping file (failed/published/retired.json) of an attempt, atomically."""
    write_text(folder / name, json.dumps({"at": time.time(), **doc}, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Attempt:
    folder: Path
    state: str                  # sealed | failed | unsealed
    seal: dict[str, Any] | None
    published: bool
    retired: bool
    reason: str | None = None

    @property
    def slice_hash(self) -> str | None:
        return self.seal.get("slice_hash") if self.seal else None


def read_attempt(folder: Path) -> Attempt:
    seal = read_seal(folder / SEAL_FILE)
    reason = None
    if seal is not None:
        state = "sealed"
    elif (folder / "failed.json").exists():
        state = "failed"
        try:
            reason = json.loads((folder / "failed.json").read_text()).get("reason")
        except (OSError, ValueError):
            reason = "failed.json unreadable"
    else:
        state = "unsealed"
    return Attempt(folder, state, seal, (folder / "published.json").exists(),
                   (folder / "retired.json").exists(), reason)


def attempts_of(root: Path) -> list[Attempt]:
    """Every attempt of a cell, oldest first."""
    if not root.is_dir():
        return []
    return [read_attempt(p) for p in sorted(root.iterdir()) if p.is_dir()]
