"""The seal of a measurement: a manifest of every file of an attempt (size, rows, sha256), the
cell's config slice and its hash, the measuring code's version, host, start/end and the Slurm ids;
and the verification of files against a manifest (cut, edited, replaced, a truncated last line).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from .. import __version__
from ..contracts import write_text

SEAL_FILE = "seal.json"
SEAL_VERSION = 1
#: files of an attempt folder that are not part of its measurement (never sealed)
UNSEALED = {SEAL_FILE, "published.json", "failed.json", "retired.json", ".wattlife-run.lock"}


def canonical(obj: Any) -> str:
    """Sorted-keys JSON: the same slice always serialises to the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def slice_hash(slice_doc: Any) -> str:
    """The short hash a cell's config slice is known by (16 hex digits of its sha256)."""
    return hashlib.sha256(canonical(slice_doc).encode()).hexdigest()[:16]


#: the package's parts whose code runs inside a measurement and shapes its files: the sampler
#: and its device backends, the phase markers, `wattlife run` and its guardian, the node side of
#: a multi-node or capped run (`run/node.py`: launch-node, merge-meta), the workloads, the
#: simulated GPU, the trace/events writers and safe writes, the merge of a multi-node run and its
#: clock alignment, node names, the workload's cgroup, a PFI cap's sweep and a transfer's client and
#: loopback server. `tests/custody/test_measuring_code.py` follows every module the measured
#: command lines run: each is here or in OUTSIDE_MEASURING.
MEASURING_CODE = ("sampler.py", "devices", "markers.py", "instrument.py", "guardian.py", "run",
                  "workloads", "simgpu_model.py", "contracts", "safewrite.py", "merge_nodes.py",
                  "merge_events.py", "nodename.py", "workload_cgroup.py", "sweeps/real.py",
                  "sweeps/pfi_matrix.py", "sweeps/failures.py", "prepare/fetch.py",
                  "prepare/transfer.py", "prepare/upload.py", "prepare/serve.py")
#: what runs inside a measurement but is not hashed, and why (a change there never makes a
#: measurement "other code")
OUTSIDE_MEASURING = {
    "launch.py": "how the command line is built (a change there re-measures nothing)",
    "jobs.py": "the job's config slice and sizes (the slice itself is sealed)",
    "config": "the config's typing (the slice itself is sealed)",
    "custody": "the custody around the measurement: attempt, seal, publish",
    "attribution": "derives numbers from a trace (a PFI cap's point at its end): re-derivable "
                   "from the sealed trace, never part of what was measured",
    "analysis/curves.py": "a PFI cap's curve point from the sealed trace (as attribution)",
    "diagnostics.py": "log lines",
    "errors.py": "error types",
    "runlock.py": "one job per run folder (a lock)",
    "pathlock.py": "file locks",
    "slurm_site.py": "checks a Slurm step holds its node (refuses, never measures)",
    "slurm_job.py": "the Slurm job's ids and state",
}


def code_version(pkg: Path | None = None) -> dict[str, str]:
    """The measuring code: wattlife's version and a sha256 over the source files of
    `MEASURING_CODE` (of the package `pkg`, default this one), the part a cell's numbers hang on."""
    pkg = pkg or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for part in MEASURING_CODE:
        root = pkg / part
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root] if root.is_file() else []
        for p in files:
            h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return {"wattlife": __version__, "measuring_sha256": h.hexdigest()[:16]}


def file_entry(path: Path) -> dict[str, Any]:
    """size, rows (lines) and sha256 of one file, and whether its last line is complete."""
    h = hashlib.sha256()
    size = rows = 0
    last = b"\n"
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            size += len(block)
            rows += block.count(b"\n")
            last = block[-1:]
    return {"size": size, "rows": rows, "sha256": h.hexdigest(), "complete": last == b"\n"}


DIGEST_KEYS = ("size", "rows", "sha256", "complete")


def writer_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """relative path -> file_entry of the trace as its writer hashed it while writing (meta.json's
    `recording.trace.digest`: safewrite.SafeAppender.digest), where the file in `folder` is still
    the one it wrote: same device, inode, size and status-change time (st_ctime_ns, which no
    user can set: a file replaced, appended to, linked or touched since is read again). The
    seal then need not read a long trace back; left unseen: a file removed and written again
    with the same size, inode and ctime (within one clock tick of the writer's close)."""
    try:
        rec = json.loads((folder / "meta.json").read_text())["recording"]["trace"]
        d, path = rec["digest"], Path(rec["path"])
        entry = {k: d[k] for k in DIGEST_KEYS}
        ident = (d["dev"], d["ino"], d["ctime_ns"], d["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    for cand in (path if path.is_absolute() else Path.cwd() / path, folder / path.name):
        try:
            st = cand.stat()
            rel = cand.resolve().relative_to(folder.resolve()).as_posix()
        except (OSError, ValueError):
            continue
        if (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_size) == ident:
            return {rel: entry}
    return {}


def manifest(folder: Path, known: dict[str, dict[str, Any]] | None = None
             ) -> dict[str, dict[str, Any]]:
    """Every file under `folder` (relative path -> file_entry), its own bookkeeping excepted;
    `known`: entries already computed (writer_digests), not read again."""
    known = known or {}
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and not p.is_symlink() and rel not in UNSEALED \
                and not p.name.endswith((".lock", ".tmp")):
            out[rel] = known.get(rel) or file_entry(p)
    return out


def slurm_ids() -> dict[str, str | None]:
    return {"job_id": os.environ.get("SLURM_JOB_ID"), "step_id": os.environ.get("SLURM_STEP_ID")}


def seal_attempt(folder: Path, cell: str, slice_doc: Any, started: float, ended: float,
                 exit_code: int) -> dict[str, Any]:
    """Write `folder`/seal.json (atomically, last): the attempt is complete and immutable. The
    trace's entry is its writer's running sha256 where it is still the file written
    (`writer_digests`, listed in `hashed_while_written`); every other file is read here."""
    known = writer_digests(folder)
    doc = {"seal_version": SEAL_VERSION, "cell": cell, "attempt": folder.name,
           "slice": slice_doc, "slice_hash": slice_hash(slice_doc), "code": code_version(),
           "host": socket.gethostname(), "slurm": slurm_ids(), "started": started,
           "ended": ended, "exit_code": exit_code, "files": manifest(folder, known),
           "hashed_while_written": sorted(known),
           "dirs": sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                          if p.is_dir() and not p.is_symlink())}
    write_text(folder / SEAL_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def read_seal(path: Path) -> dict[str, Any] | None:
    """A seal (or published pointer) document; None if absent or unreadable."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "files" in doc else None


def check_file(path: Path, want: dict[str, Any], quick: bool = False) -> str | None:
    """What is wrong with `path` against its manifest entry `want` (None: intact); `quick`: its
    size only, not its sha256 (for a step whose readers verify the file in full)."""
    if not path.is_file():
        return "missing"
    if quick:
        size = path.stat().st_size
        return None if size == want["size"] else (
            f"cut ({size} of {want['size']} bytes)" if size < want["size"] else
            "edited or replaced (its size differs from the seal's)")
    have = file_entry(path)
    if have["size"] < want["size"]:
        return f"cut ({have['size']} of {want['size']} bytes)"
    if have["size"] != want["size"] or have["sha256"] != want["sha256"]:
        return "edited or replaced (its sha256 differs from the seal's)"
    return None


def verify_files(folder: Path, files: dict[str, dict[str, Any]], quick: bool = False
                 ) -> list[tuple[str, str]]:
    """(file, problem) for every file of `files` under `folder` that is not as sealed."""
    out = []
    for rel, want in sorted(files.items()):
        why = check_file(folder / rel, want, quick)
        if why:
            out.append((str(folder / rel), why))
    return out
