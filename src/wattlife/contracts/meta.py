"""The run metadata contract: meta.json's keys and their types, its schema version, `RunMeta`,
and its validating reader and writer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..errors import ContractError
from .gpus import GpuIdentity, gpu_identities
from .names import META_FILE
from .writing import write_text

# ----------------------------------------------------------------------------- run metadata
#: version of the meta.json layout `write_meta` writes; a file without `schema_version` is
#: version 1 (the layout before the key was written, the same keys)
META_SCHEMA_VERSION = 1
META_SCHEMA_VERSIONS = (1,)


_INT, _STR, _LIST, _DICT = (int,), (str,), (list,), (dict,)
_OPT = (type(None),)
#: every key `wattlife run` writes, with the JSON types it may hold (see docs/CONTRACTS.md, "meta")
META_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "schema_version": _INT,
    "run_id": _STR, "host": _STR, "cmd": _LIST, "cell": _DICT,
    "start_ns": _INT, "end_ns": _INT, "workload_start_ns": _INT, "workload_end_ns": _INT,
    "idle_baseline": _DICT, "exit_code": _INT + _OPT, "exit_signal": _STR + _OPT,
    "start_error": _STR + _OPT, "signals": _DICT,
    "gpu_model": _STR + _OPT, "driver": _STR + _OPT, "gpus": _LIST,
    "cuda_visible_devices": _STR + _OPT,
    "sampler": _DICT, "recording": _DICT, "sensor_notes": _LIST,
    "platform": _STR, "python": _STR, "libraries": _DICT, "clock": _DICT,
    "slurm": _DICT + _OPT,
}
#: keys every complete run's meta.json has (`wattlife check` reports a missing one); written by
#: every version, so files of version 1 have them too
META_REQUIRED_KEYS = ("run_id", "host", "cmd", "cell", "start_ns", "end_ns", "workload_start_ns",
                      "workload_end_ns", "idle_baseline", "exit_code", "gpu_model", "driver",
                      "sampler", "sensor_notes", "platform", "python", "libraries")
META_SAMPLER_KEYS = ("settings", "backends", "sensors", "rows", "errors")
_TYPE_NAMES = {int: "an integer", str: "a string", list: "a list", dict: "an object",
               type(None): "null"}


def meta_problems(doc: Any) -> list[tuple[str, str]]:
    """(key, message) for every key of a meta.json document whose value breaks the contract
    (types, the idle-baseline window, the schema version); empty when it follows it. Missing
    keys are not problems here: `META_REQUIRED_KEYS` says which a complete run has."""
    if not isinstance(doc, dict):
        return [("", f"expected a JSON object, got {type(doc).__name__}")]
    out = []
    for key, types in META_KEY_TYPES.items():
        if key not in doc:
            continue
        v = doc[key]
        if isinstance(v, bool) and bool not in types or not isinstance(v, types):
            want = " or ".join(_TYPE_NAMES[t] for t in types)
            out.append((key, f"'{key}' expects {want}, got {v!r}"))
    v = doc.get("schema_version", 1)
    if isinstance(v, int) and v not in META_SCHEMA_VERSIONS:
        out.append(("schema_version", f"'schema_version' {v} is not one this version of wattlife "
                                      f"reads ({list(META_SCHEMA_VERSIONS)})"))
    ib = doc.get("idle_baseline")
    if isinstance(ib, dict):
        for k in ("start_ns", "end_ns"):
            if not isinstance(ib.get(k), int) or isinstance(ib.get(k), bool):
                out.append(("idle_baseline", f"'idle_baseline.{k}' expects integer epoch ns, "
                                             f"got {ib.get(k)!r}"))
    return out


@dataclasses.dataclass(frozen=True)
class RunMeta:
    """A run's meta.json (`wattlife run` writes it; attribution, aggregation, `wattlife check`
    and the CLI read it). Every field may be absent (None / empty) in a file written by hand or
    by an older version; `extra` keeps keys this version does not know, written back unchanged."""

    run_id: str | None = None
    host: str | None = None
    cmd: list[str] | None = None
    cell: dict[str, Any] = dataclasses.field(default_factory=dict)
    start_ns: int | None = None
    end_ns: int | None = None
    workload_start_ns: int | None = None
    workload_end_ns: int | None = None
    idle_baseline: dict[str, int] | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    start_error: str | None = None
    signals: dict[str, Any] | None = None
    gpu_model: str | None = None
    driver: str | None = None
    #: one `contracts.gpus.GpuIdentity.to_dict` entry per sampled GPU (`gpu_identities` reads
    #: them typed); kept as written, so a file reads and writes back unchanged
    gpus: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    cuda_visible_devices: str | None = None
    sampler: dict[str, Any] | None = None
    recording: dict[str, Any] | None = None
    sensor_notes: list[str] = dataclasses.field(default_factory=list)
    platform: str | None = None
    python: str | None = None
    libraries: dict[str, str | None] | None = None
    #: the one clock's mapping (contracts.clock: clock, offset_ns, uncertainty_ns, inherited) and
    #: the wall-clock steps seen during the run (`wall_steps`); absent before issue 41
    clock: dict[str, Any] | None = None
    #: the Slurm job the run measured in (`slurm_job.job_record`: job, step, nodes, CPUs allowed,
    #: memory per node and limit); null outside Slurm, absent before issue 40
    slurm: dict[str, Any] | None = None
    schema_version: int = META_SCHEMA_VERSION
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def idle_window(self) -> tuple[int, int] | None:
        """(start_ns, end_ns) of the idle baseline, None when there was none (0 s)."""
        ib = self.idle_baseline or {}
        s, e = ib.get("start_ns"), ib.get("end_ns")
        return (s, e) if isinstance(s, int) and isinstance(e, int) and e > s else None

    @property
    def gpu_identities(self) -> list[GpuIdentity]:
        """`gpus` as typed identities (`contracts.gpus`: any layout written so far); an entry
        of the wrong shape is a ContractError naming it and its key."""
        return gpu_identities(self.gpus)

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = META_FILE) -> RunMeta:
        """Validate a meta.json document (`meta_problems`); the first problem is a
        ContractError naming `where` and the key."""
        problems = meta_problems(doc)
        if problems:
            key, msg = problems[0]
            raise ContractError(f"{where}: key '{key}': {msg}" if key else f"{where}: {msg}")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in doc.items() if k in names}
        if known.get("cell") is None:
            known.pop("cell", None)
        known.setdefault("schema_version", 1)  # before the key was written
        return cls(**known, extra={k: v for k, v in doc.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: contract keys in their order (a field that is None where the
        contract has no null, i.e. absent from the file read, left out), then the extras."""
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"
               and (getattr(self, f.name) is not None or type(None) in META_KEY_TYPES[f.name])}
        doc = {"schema_version": doc.pop("schema_version"), **doc}
        return {**doc, **{k: v for k, v in self.extra.items() if k not in doc}}

    def get(self, key: str, default: Any = None) -> Any:
        """A contract field or an extra key by name (for keys other tools add, e.g. `nodes`)."""
        if key in self.extra:
            return self.extra[key]
        return getattr(self, key, default) if key != "extra" else default


def read_meta(path: str | Path) -> RunMeta:
    """Read and validate a meta.json; an unreadable or malformed file is a ContractError naming
    the file (and the JSON line or the key)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ContractError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON "
                            f"({exc.msg})") from None
    return RunMeta.from_dict(doc, str(path))


def meta_text(meta: RunMeta | dict[str, Any]) -> str:
    """The JSON text `write_meta` writes (validated)."""
    doc = meta.to_dict() if isinstance(meta, RunMeta) else RunMeta.from_dict(meta).to_dict()
    problems = meta_problems(doc)
    if problems:
        key, msg = problems[0]
        raise ContractError(f"writing {META_FILE}: key '{key}': {msg}")
    return json.dumps(doc, indent=2, default=str)


def write_meta(path: str | Path, meta: RunMeta | dict[str, Any]) -> Path:
    """Write a validated meta.json atomically (with `schema_version`)."""
    return write_text(path, meta_text(meta))
