"""File contracts shared by every part of the suite (see DESIGN.md, "File contracts").

Column names, and the readers and writers of trace / events / phases / curves / pfi tables.
Readers accept unknown extra columns, name the file and line of a malformed row, and tolerate a
truncated last line (what a killed writer leaves behind) with a warning.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

TRACE_COLUMNS = ["t_ns", "host", "device", "metric", "value", "source"]
EVENTS_COLUMNS = ["run_id", "host", "rank", "phase", "start_ns", "end_ns", "step", "items"]
PHASES_COLUMNS = [
    "run_id", "phase", "device_kind", "device", "energy_j", "energy_lo_j", "energy_hi_j",
    "time_s", "count", "mean_power_w", "method", "source",
]
CURVES_COLUMNS = ["job", "gpu_model", "n_gpus", "cap_w", "throughput", "throughput_unit", "power_w"]
PFI_COLUMNS = ["job", "gpu_model", "pfi", "n_caps", "pfi_lo", "pfi_hi", "grid"]

LIFECYCLE_PHASES = [
    "download_dataset", "download_model", "stage_copy", "model_load", "data_load", "h2d",
    "forward", "backward", "optimizer", "grad_sync", "validation", "checkpoint", "upload",
]
UNATTRIBUTED = "unattributed"
SOURCES_MEASURED = {"nvml-samples", "nvml-counter", "nvml-poll", "rapl"}
SOURCES_NOT_MEASURED = {"estimate", "sim"}


class ContractError(ValueError):
    """A table does not follow its contract; the message names the file, line and column."""


def device_kind(device: str) -> str:
    """`gpu3` -> `gpu`, `cpu0` -> `cpu`, `dram1` -> `dram`, `node` -> `node`."""
    return device.rstrip("0123456789") or device


def _read_text_tolerant(path: Path) -> tuple[str, int | None]:
    """Return the text of a CSV without a truncated final line, and that line's number if cut."""
    data = path.read_bytes()
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
            raise ContractError(f"{where}: column '{col}' expects {'an integer' if kind == 'int' else 'a number'},"
                                f" got {raw.iloc[i]!r}")
        df[col] = vals.astype("int64") if kind == "int" else vals.astype("float64")
    return df


def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace (CSV or Parquet); `t_ns` int64, `value` float64."""
    df = _read_csv(path, TRACE_COLUMNS, {"t_ns": "int", "value": "float"})
    for col in ("host", "device", "metric", "source"):
        df[col] = df[col].astype(str)
    return df


def read_events(path: str | Path) -> pd.DataFrame:
    """Read an events file, plus its per-rank siblings `<stem>.rank<N><suffix>` if present."""
    path = Path(path)
    paths = [path] + sorted(path.parent.glob(f"{path.stem}.rank*{path.suffix}"))
    frames = []
    for p in paths:
        if not p.exists():
            continue
        df = _read_csv(p, EVENTS_COLUMNS,
                       {"start_ns": "int", "end_ns": "int", "rank": "int", "items": "float",
                        "step": "float", "local_rank": "float", "depth": "float"})
        bad = df["end_ns"] < df["start_ns"]
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ContractError(f"{p}:{i + 2}: end_ns before start_ns in phase '{df['phase'].iloc[i]}'")
        frames.append(df)
    if not frames:
        raise FileNotFoundError(f"{path}: no such file")
    df = pd.concat(frames, ignore_index=True)
    df["host"] = df["host"].astype(str)
    df["phase"] = df["phase"].astype(str)
    return df


def read_table(path: str | Path, required: list[str]) -> pd.DataFrame:
    """Read any contract table (phases, curves, pfi) checking its required columns."""
    path = Path(path)
    df = pd.read_csv(path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ContractError(f"{path}: missing column(s) {missing}; expected at least {required}")
    return df


def read_curves(path: str | Path) -> pd.DataFrame:
    df = read_table(path, CURVES_COLUMNS)
    if "source" not in df.columns:
        df["source"] = "measured"
    return df


def write_table(df: pd.DataFrame, path: str | Path, columns: list[str]) -> Path:
    """Write a contract table with its columns first (extras after), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = [c for c in df.columns if c not in columns]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ContractError(f"writing {path}: missing column(s) {missing}")
    tmp = path.with_name(path.name + ".tmp")
    df[columns + extra].to_csv(tmp, index=False)
    tmp.replace(path)
    return path
