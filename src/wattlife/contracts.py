"""File contracts shared by every part of the suite (docs/ARCHITECTURE.md, "File contracts").

The one place for every file contract: file names, column lists and their types, the metric,
phase and source names, the events extras, the telemetry columns, the typed and versioned run
metadata (`RunMeta`, `read_meta`, `write_meta`), and the readers and writers of the trace /
events / phases / curves / pfi tables. Writers (the sampler, the markers, `wattlife run`,
attribution, aggregation) take their headers and keys from here.

Readers accept unknown extra columns, name the file and line of a malformed row, and tolerate a
truncated last line (what a killed writer leaves behind) with a warning. numpy and pandas are
imported inside the functions that need them, so the markers (imported by training code) and the
sampler stay light.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# ----------------------------------------------------------------------------- file names
TRACE_FILE = "trace.csv"  # also trace.csv.gz or trace.parquet
TRACE_FILES = (TRACE_FILE, "trace.csv.gz", "trace.parquet")
EVENTS_FILE = "events.csv"  # rank N > 0: events.rank<N>.csv beside it
META_FILE = "meta.json"
PHASES_FILE = "phases.csv"
SUMMARY_FILE = "work/summary.json"  # the workload's summary, relative to the run directory
#: run-level tables under results/tables/ (name -> what it holds)
TABLE_FILES = {
    "phases": "phases.csv", "phase_summary": "phase_summary.csv",
    "device_share": "device_share.csv", "storage_checkpoint": "storage_checkpoint.csv",
    "throughput": "throughput.csv", "curves": "curves.csv", "pfi": "pfi.csv",
}

# ----------------------------------------------------------------------------- columns
TRACE_COLUMNS = ["t_ns", "host", "device", "metric", "value", "source"]
TRACE_TYPES = {"t_ns": "int", "value": "float"}
EVENTS_COLUMNS = ["run_id", "host", "rank", "phase", "start_ns", "end_ns", "step", "items"]
#: extras the markers write after the contract columns (see "One clock" for clamp_ns)
EVENTS_EXTRA_COLUMNS = ["local_rank", "depth", "clock", "clamp_ns"]
EVENTS_TYPES = {"start_ns": "int", "end_ns": "int", "rank": "int", "items": "float",
                "step": "float", "local_rank": "float", "depth": "float", "clamp_ns": "float"}
PHASES_COLUMNS = [
    "run_id", "phase", "device_kind", "device", "energy_j", "energy_lo_j", "energy_hi_j",
    "time_s", "count", "mean_power_w", "method", "source",
]
PHASES_METHODS = ("integrate", "deconvolve")
# extras throughput_sd, power_sd: standard error of the steady-state value (steady_state_se)
CURVES_COLUMNS = ["job", "gpu_model", "n_gpus", "cap_w", "throughput", "throughput_unit", "power_w"]
#: telemetry extras of the uncapped curves row (the PFI predictor's features)
CURVES_TELEMETRY_COLUMNS = ("dram_active", "util_mem", "tensor_active", "sm_active")
PFI_COLUMNS = ["job", "gpu_model", "pfi", "n_caps", "pfi_lo", "pfi_hi", "grid"]


def csv_header(columns: list[str]) -> str:
    """The header line a CSV writer puts first."""
    return ",".join(columns) + "\n"


#: what the sampler writes first in a trace, and the markers in an events file
TRACE_HEADER = csv_header(TRACE_COLUMNS)
EVENTS_HEADER = csv_header(EVENTS_COLUMNS + EVENTS_EXTRA_COLUMNS)

# ----------------------------------------------------------------------------- metric names
POWER_W = "power_w"  # W, a window average
ENERGY_J = "energy_j"  # J, cumulative since the sampler started
POWER_LIMIT_W = "power_limit_w"
#: telemetry metrics a trace may carry besides power and energy
TELEMETRY_METRICS = ("util_gpu", "util_mem", "dram_active", "sm_active", "tensor_active",
                     "sm_clock_mhz", "mem_clock_mhz", POWER_LIMIT_W, "mem_used_b", "temp_c",
                     "util_cpu")

# ----------------------------------------------------------------------------- phase names
LIFECYCLE_PHASES = [
    "download_dataset", "download_model", "stage_copy", "model_load", "data_load", "h2d",
    "forward", "backward", "optimizer", "grad_sync", "validation", "checkpoint",
    "checkpoint_stage", "checkpoint_wait", "upload",
]
#: phases that run beside a rank's timeline (a background thread) and overlap its phases: kept
#: out of the nesting rule, the phase tree and its energy (workloads.checkpointing)
CONCURRENT_PHASES = ("checkpoint_write",)
STEP = "step"  # a training step; carries `items`
UNATTRIBUTED = "unattributed"  # device time covered by no phase
RESIDUAL = "deconvolution_residual"  # deconvolved sum minus the measured total
IDLE = "idle"  # the phase of a GPU that no rank uses
#: intervals `wattlife run` itself knows (added by attribution from meta.json)
WRAPPER_PHASES = ("idle_baseline", "process_startup", "process_exit")
COMPILE = "compile"  # first-call compilation (torch.compile) inside a step's forward / backward
WARMUP = "warmup"  # what the warm-up steps did (attribution's name for their rows)
#: the first steps of each rank that the `step` throughput and the steady window leave out
WARMUP_STEPS = 3


def warmup_count(n_steps: int) -> int:
    """How many of a rank's `n_steps` steps are warm-up: `WARMUP_STEPS` when at least 3 steady
    steps remain, else none (a run that short has no steady part to single out)."""
    return WARMUP_STEPS if n_steps > WARMUP_STEPS + 2 else 0

# ----------------------------------------------------------------------------- source names
SOURCES_MEASURED = {"nvml-samples", "nvml-counter", "nvml-poll", "rapl"}
SOURCES_NOT_MEASURED = {"estimate", "sim"}


class ContractError(ValueError):
    """A table does not follow its contract; the message names the file, line and column."""


def device_kind(device: str) -> str:
    """`gpu3` -> `gpu`, `cpu0` -> `cpu`, `dram1` -> `dram`, `node` -> `node`."""
    return device.rstrip("0123456789") or device


def read_contract_bytes(path: Path) -> bytes:
    """A contract CSV's bytes, decompressed when it is gzip (`trace.csv.gz`, TRACE_FILES)."""
    data = path.read_bytes()
    if path.suffix != ".gz":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError) as exc:  # not gzip, or cut short
        raise ContractError(f"{path}: not a readable gzip file ({exc})") from None


def _read_text_tolerant(path: Path) -> tuple[str, int | None]:
    """Return the text of a CSV without a truncated final line, and that line's number if cut."""
    data = read_contract_bytes(path)
    if not data:
        raise ContractError(f"{path}: empty file (no header)")
    text = data.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        return text, None
    cut = text.rfind("\n")
    line_no = text.count("\n") + 1
    if cut < 0:
        raise ContractError(f"{path}:1: header line is truncated")
    return text[: cut + 1], line_no


def _read_csv(path: str | Path, required: list[str], numeric: dict[str, str]) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
        first_data_line = None
    else:
        text, cut_line = _read_text_tolerant(path)
        if cut_line is not None:
            warnings.warn(f"{path}:{cut_line}: truncated last line ignored (writer was killed?)",
                          stacklevel=3)
        try:
            df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        except pd.errors.ParserError as exc:
            raise ContractError(f"{path}: {exc}") from exc
        first_data_line = 2
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ContractError(f"{path}: missing column(s) {missing}; expected at least {required}")
    for col, kind in numeric.items():
        if col not in df.columns:
            continue
        raw = df[col]
        if kind == "int":
            vals = pd.to_numeric(raw, errors="coerce")
            bad = vals.isna() | (vals != np.floor(vals))
        else:
            vals = pd.to_numeric(raw.replace("", np.nan) if raw.dtype == object else raw,
                                 errors="coerce")
            bad = vals.isna() & (raw.astype(str) != "")
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            where = f"{path}:{i + first_data_line}" if first_data_line else f"{path} row {i}"
            dev = f" (device {df['device'].iloc[i]})" if "device" in df.columns else ""
            want = "an integer" if kind == "int" else "a number"
            raise ContractError(f"{where}: column '{col}' expects {want},"
                                f" got {raw.iloc[i]!r}{dev}")
        df[col] = vals.astype("int64") if kind == "int" else vals.astype("float64")
    return df


# What a device of each kind can physically draw (W): far above any real part (a GB200 module
# is ~2.7 kW; bursts reach ~1.3x the limit), far below a corrupted value like 1e300.
MAX_PLAUSIBLE_W = {"gpu": 5_000.0, "cpu": 5_000.0, "dram": 2_000.0, "node": 200_000.0}


def check_readings(df: pd.DataFrame, path: str | Path, first_data_line: int | None = 2) -> None:
    """Reject power/energy readings no device can give: NaN, inf, negative power, power above
    `MAX_PLAUSIBLE_W` for the device's kind, negative energy. Names file, line and device."""
    import numpy as np
    import pandas as pd

    mcodes, metrics = pd.factorize(df["metric"])
    metrics = list(metrics)
    v = df["value"].to_numpy(np.float64)
    codes, devices = pd.factorize(df["device"])  # few devices, many rows
    kinds = np.array([device_kind(str(d)) for d in devices] + ["node"], dtype=object)
    caps = np.array([MAX_PLAUSIBLE_W.get(k, MAX_PLAUSIBLE_W["node"]) for k in kinds])
    cap = caps[codes]
    is_p = mcodes == (metrics.index("power_w") if "power_w" in metrics else -2)
    is_e = mcodes == (metrics.index("energy_j") if "energy_j" in metrics else -2)
    with np.errstate(invalid="ignore"):
        bad = ((is_p | is_e) & ~np.isfinite(v)) | (is_p & ((v < 0) | (v > cap))) | (is_e & (v < 0))
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    where = f"{path}:{i + first_data_line}" if first_data_line else f"{path} row {i}"
    dev, m = df["device"].iat[i], metrics[mcodes[i]]
    rng = (f"[0, {cap[i]:g}] W for a {kinds[codes[i]]}" if m == "power_w"
           else "a finite value >= 0 J")
    raise ContractError(f"{where}: device {dev} {m} reading {float(v[i])!r} is outside the "
                        "physical "
                        f"range (expected {rng}); {int(bad.sum())} such reading(s) in the file")


def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace (CSV or Parquet); `t_ns` int64, `value` float64; readings outside the
    physical range are rejected (`check_readings`)."""
    df = _read_csv(path, TRACE_COLUMNS, TRACE_TYPES)
    for col in ("host", "device", "metric", "source"):
        df[col] = df[col].astype(str)
    check_readings(df, path, None if Path(path).suffix == ".parquet" else 2)
    return df


def read_events(path: str | Path, lines: bool = False) -> pd.DataFrame:
    """Read an events file, plus its per-rank siblings `<stem>.rank<N><suffix>` if present.
    `lines`: add each row's `file_name` and CSV `line_no` (header = 1), for messages."""
    import numpy as np
    import pandas as pd

    path = Path(path)
    paths = [path] + sorted(path.parent.glob(f"{path.stem}.rank*{path.suffix}"))
    frames = []
    for p in paths:
        if not p.exists():
            continue
        df = _read_csv(p, EVENTS_COLUMNS, EVENTS_TYPES)
        bad = df["end_ns"] < df["start_ns"]
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ContractError(f"{p}:{i + 2}: end_ns before start_ns in phase "
                                f"'{df['phase'].iloc[i]}'")
        if lines:
            df = df.assign(file_name=str(p), line_no=np.arange(2, len(df) + 2))
        frames.append(df)
    if not frames:
        raise FileNotFoundError(f"{path}: no such file")
    df = pd.concat(frames, ignore_index=True)
    df["host"] = df["host"].astype(str)
    df["phase"] = df["phase"].astype(str)
    return df


def read_table(path: str | Path, required: list[str], allow_empty: bool = False) -> pd.DataFrame:
    """Read any contract table (phases, curves, pfi) checking its required columns; a file with a
    header and no rows is an error unless `allow_empty`."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        raise ContractError(f"{path}: is a directory, expected a CSV file")
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ContractError(f"{path}: empty file (no header); expected columns "
                            f"{required}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ContractError(f"{path}: not a readable CSV ({str(exc).strip()})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ContractError(f"{path}: missing column(s) {missing}; expected at least {required}")
    if not len(df) and not allow_empty:
        raise ContractError(f"{path}: header only, no data rows")
    return df


def read_curves(path: str | Path) -> pd.DataFrame:
    """Read a curves table. `source` is required (measured, estimated and simulated points must
    never look alike): a file without it is an error naming the file, never "measured"."""
    df = read_table(path, CURVES_COLUMNS)
    if "source" not in df.columns:
        raise ContractError(f"{path}: missing column 'source' (measured, estimate, sim, ...); "
                            "every curves table says where its numbers come from")
    return df


def refuse_overwrite(output: str | Path, inputs: list[str | Path]) -> None:
    """An output path that is one of the inputs would destroy raw data: refuse it."""
    out = Path(output).resolve()
    for i in inputs:
        if i is not None and Path(i).resolve() == out:
            raise ContractError(f"{output}: the output path is also an input ({i}); refusing to "
                                "overwrite it, choose another -o")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename, on
    failure it is removed, so nothing partial is ever at the final path."""
    path = Path(path)
    if path.is_dir():
        raise ContractError(f"{path}: is a directory, expected a file path to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            yield tmp
            os.replace(tmp, path)
        except OSError as exc:  # name the path the user gave, not the temporary one
            if exc.filename in (str(tmp), tmp) and exc.errno is not None:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
            raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_csv(df: pd.DataFrame, path: str | Path, **kw) -> Path:
    """`df.to_csv(path, index=False)`, atomically."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, **kw)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write a text file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_table(df: pd.DataFrame, path: str | Path, columns: list[str]) -> Path:
    """Write a contract table with its columns first (extras after), atomically."""
    extra = [c for c in df.columns if c not in columns]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ContractError(f"writing {path}: missing column(s) {missing}")
    return write_csv(df[columns + extra], path)


# ----------------------------------------------------------------------------- run metadata
#: version of the meta.json layout `write_meta` writes; a file without `schema_version` is
#: version 1 (the layout before the key was written, the same keys)
META_SCHEMA_VERSION = 1
META_SCHEMA_VERSIONS = (1,)

#: the folders (under `wattlife figures --reference`'s output) of the tables that
#: `analysis.reference.write_reference_tables` makes from the committed raw reference files and
#: the reference figures are drawn from
H200_EXECUTION_TABLES = "h200_execution_tables"
A100_TABLES = "a100_tables"

_INT, _STR, _LIST, _DICT = (int,), (str,), (list,), (dict,)
_OPT = (type(None),)
#: every key `wattlife run` writes, with the JSON types it may hold (see docs/ARCHITECTURE.md)
META_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "schema_version": _INT,
    "run_id": _STR, "host": _STR, "cmd": _LIST, "cell": _DICT,
    "start_ns": _INT, "end_ns": _INT, "workload_start_ns": _INT, "workload_end_ns": _INT,
    "idle_baseline": _DICT, "exit_code": _INT + _OPT, "exit_signal": _STR + _OPT,
    "start_error": _STR + _OPT, "signals": _DICT,
    "gpu_model": _STR + _OPT, "driver": _STR + _OPT, "gpus": _LIST,
    "cuda_visible_devices": _STR + _OPT,
    "sampler": _DICT, "recording": _DICT, "sensor_notes": _LIST,
    "platform": _STR, "python": _STR, "libraries": _DICT,
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
    gpus: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    cuda_visible_devices: str | None = None
    sampler: dict[str, Any] | None = None
    recording: dict[str, Any] | None = None
    sensor_notes: list[str] = dataclasses.field(default_factory=list)
    platform: str | None = None
    python: str | None = None
    libraries: dict[str, str | None] | None = None
    schema_version: int = META_SCHEMA_VERSION
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def idle_window(self) -> tuple[int, int] | None:
        """(start_ns, end_ns) of the idle baseline, None when there was none (0 s)."""
        ib = self.idle_baseline or {}
        s, e = ib.get("start_ns"), ib.get("end_ns")
        return (s, e) if isinstance(s, int) and isinstance(e, int) and e > s else None

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
