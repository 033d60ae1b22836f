"""The readers of the contract tables (trace, events, phases, curves, pfi): unknown extra columns
accepted, a malformed row named by file and line, a truncated last line (a killed writer) dropped
with a warning; readings no device can give rejected. numpy and pandas are imported inside the
functions that need them."""

from __future__ import annotations

import gzip
import io
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ContractError
from .int_cells import arrow_small_ints, exact_ints
from .kinds import kind_word, max_plausible_w
from .names import (
    CURVES_COLUMNS,
    EVENTS_COLUMNS,
    EVENTS_TYPES,
    TRACE_COLUMNS,
    TRACE_TYPES,
)
from .zstd_frames import ZSTD_SUFFIX, FrameReader

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def warn_cut_line(path: Path, line: int, stacklevel: int) -> None:
    """The warning for a truncated last line (a killed writer's, or its cut zstd frame), naming
    the file and the line; `stacklevel` as `warnings.warn` counts it from the caller."""
    warnings.warn(f"{path}:{line}: truncated last line ignored (writer was killed?)",
                  stacklevel=stacklevel + 1)


def read_contract_bytes(path: Path) -> bytes:
    """A contract CSV's bytes, decompressed when it is gzip (`trace.csv.gz`) or zstd frames
    (`trace.csv.zst`, whose cut last frame, a killed writer's, is dropped with a warning)."""
    if path.suffix == ZSTD_SUFFIX:
        with FrameReader(path) as frames:
            data = frames.read()
        if frames.cut_bytes:
            line = data.count(b"\n") + 1
            warn_cut_line(path, line, stacklevel=4)
        return data
    data = path.read_bytes()
    if path.suffix != ".gz":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError) as exc:  # not gzip, or cut short
        raise ContractError(f"{path}: not a readable gzip file ({exc})") from None


def _read_text_tolerant(path: Path) -> tuple[bytes, int | None]:
    """Return the bytes of a CSV without a truncated final line, and that line's number if cut
    (bytes, not text: pandas decodes them, `encoding_errors="replace"`, without a copy of the
    file as a str and another in a StringIO, ~3x the file's size held at once)."""
    data = read_contract_bytes(path)
    if not data:
        raise ContractError(f"{path}: empty file (no header)")
    if data.endswith(b"\n"):
        return data, None
    cut = data.rfind(b"\n")
    line_no = data.count(b"\n") + 1
    if cut < 0:
        raise ContractError(f"{path}:1: header line is truncated")
    return data[: cut + 1], line_no


def int_form(col: str) -> str:
    """What an integer column of the contracts holds, for messages."""
    if col.endswith("_ns"):
        return ("integer nanoseconds (digits only, e.g. 1796434645354875338; a decimal point or "
                "an exponent is a float, which has lost the last nanoseconds)")
    return "an integer"


def file_line(file: Any, line: Any) -> str:
    """'file:line' of an events row read with `read_events(lines=True)`, the line an integer (the
    column turns float where rows without a line, added by attribution, sit beside it); '' when
    either is unknown."""
    import pandas as pd

    if file is None or line is None or pd.isna(file) or pd.isna(line):
        return ""
    return f"{file}:{int(line)}"


def record_lines(text: str) -> np.ndarray:
    """The CSV line (header = 1, lines ended by '\\n') on which each data row of `text` begins:
    a quoted cell may hold line breaks (a phase name), so rows and lines can differ. Blank lines
    hold no row (as pandas reads them)."""
    import csv

    import numpy as np

    reader = csv.reader(ln + "\n" for ln in text.split("\n")[:-1])
    next(reader, None)
    starts, prev = [], reader.line_num
    for row in reader:
        if row:
            starts.append(prev + 1)
        prev = reader.line_num
    return np.asarray(starts, dtype=np.int64)


def _where(path: Path, i: int, first_data_line: int | np.ndarray | None) -> str:
    """'file:line' of data row i (`first_data_line`: the first row's line, or each row's)."""
    if first_data_line is None:
        return f"{path} row {i}"
    if isinstance(first_data_line, int):
        return f"{path}:{i + first_data_line}"
    return f"{path}:{int(first_data_line[i])}"


def _device_of(df: pd.DataFrame, i: int) -> str:
    return f" (device {df['device'].iloc[i]})" if "device" in df.columns else ""


def _int_column(df: pd.DataFrame, col: str, path: Path,
                first_data_line: int | np.ndarray | None) -> pd.Series:
    """An int column as int64, parsed exactly (`exact_ints`); the first bad cell is an error
    naming file, line, column and the form expected. A Parquet column must be an integer one."""
    import numpy as np
    import pandas as pd

    raw = df[col]
    if pd.api.types.is_integer_dtype(raw.dtype):
        return raw.astype(np.int64)
    if pd.api.types.is_float_dtype(raw.dtype) or pd.api.types.is_bool_dtype(raw.dtype):
        raise ContractError(f"{path}: column '{col}' is stored as {raw.dtype}; it holds "
                            f"{int_form(col)}: store it as int64")
    vals, bad = exact_ints(raw)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        more = f" ({int(bad.sum()):,} such cells in the column)" if bad.sum() > 1 else ""
        raise ContractError(f"{_where(path, i, first_data_line)}: column '{col}' expects "
                            f"{int_form(col)}, got {raw.iloc[i]!r}{_device_of(df, i)}{more}")
    return vals


def _strings_fast(text: bytes) -> pd.DataFrame | None:
    """The CSV's cells as strings, as `pd.read_csv(dtype=str, keep_default_na=False)` gives them,
    by pyarrow's multi-threaded reader (a third of the CPU on an events file); None where the
    two could differ (a header with quotes or repeated names, a byte-order mark, a row pyarrow
    refuses: the pandas reader then reads it, and gives its own error)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    head = text[:text.find(b"\n")].rstrip(b"\r")
    names = head.decode("utf-8", errors="replace").split(",")
    if not head or b'"' in head or text.startswith(b"\xef\xbb\xbf") or len(set(names)) < len(names):
        return None
    try:
        t = pacsv.read_csv(pa.py_buffer(text), convert_options=pacsv.ConvertOptions(
            column_types={n: pa.string() for n in names}, strings_can_be_null=False,
            quoted_strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None
    return t.to_pandas() if t.column_names == names else None


def _read_csv(path: str | Path, required: list[str], numeric: dict[str, str]) -> pd.DataFrame:
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".parquet":
        return typed_cells(pd.read_parquet(path), path, required, numeric, None)
    text, cut_line = _read_text_tolerant(path)
    if cut_line is not None:
        warn_cut_line(path, cut_line, stacklevel=3)
    return parse_csv_bytes(text, path, required, numeric)


def parse_csv_bytes(text: bytes, path: Path, required: list[str], numeric: dict[str, str],
                    lines_before: int = 0) -> pd.DataFrame:
    """A contract CSV's whole lines (its header line first) parsed as the contract readers parse
    a file (`typed_cells`), each row's line in `attrs["lines"]` (the first row's, or each
    row's where quoted fields or blank lines make rows and lines differ). `lines_before`: the
    file's lines between its header and these rows, when they are a chunk of it with the
    header put in front (`attribution.events_chunks`)."""
    import pandas as pd

    df = _strings_fast(text)
    if df is None:
        try:
            df = pd.read_csv(io.BytesIO(text), dtype=str, keep_default_na=False,
                             encoding="utf-8", encoding_errors="replace")
        except pd.errors.ParserError as exc:
            raise ContractError(f"{path}: {exc}") from exc
    blank = b"\n\n" in text or b"\n\r\n" in text
    first_data_line = (record_lines(text.decode("utf-8", errors="replace")) + lines_before
                       if b'"' in text or blank else 2 + lines_before)
    return typed_cells(df, path, required, numeric, first_data_line)


def typed_cells(df: pd.DataFrame, path: Path, required: list[str], numeric: dict[str, str],
                first_data_line: int | np.ndarray | None) -> pd.DataFrame:
    """A contract table's cells (strings, or a Parquet file's types) with its required columns
    checked and its `numeric` columns typed: int64 parsed exactly, float64; the first bad cell an
    error naming file, line (`first_data_line`: the first row's, each row's, or None), column."""
    import numpy as np
    import pandas as pd

    df.attrs["lines"] = first_data_line
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ContractError(f"{path}: missing column(s) {missing}; expected at least {required}")
    for col, kind in numeric.items():
        if col not in df.columns:
            continue
        if kind == "int":
            df[col] = _int_column(df, col, path, first_data_line)
            continue
        raw = df[col]
        small = arrow_small_ints(raw)
        if small is not None:
            df[col] = small
            continue
        vals = pd.to_numeric(raw.replace("", np.nan) if raw.dtype == object else raw,
                             errors="coerce")
        bad = vals.isna() & raw.notna() & (raw.astype(str) != "")  # a missing cell: NaN
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ContractError(f"{_where(path, i, first_data_line)}: column '{col}' expects a "
                                f"number, got {raw.iloc[i]!r}{_device_of(df, i)}")
        df[col] = vals.astype("float64")
    return df


def check_readings(df: pd.DataFrame, path: str | Path, first_data_line: int | None = 2,
                   offset: int | None = None) -> None:
    """Reject power/energy readings no device can give: NaN, inf, negative power, power above
    what the device's kind can draw (`kinds.max_plausible_w`), negative energy. Names file,
    line and device. `offset`: the rows of the file before `df`, when `df` is a chunk of it
    (`iter_trace`)."""
    import numpy as np
    import pandas as pd

    mcodes, metrics = pd.factorize(df["metric"])
    metrics = list(metrics)
    v = df["value"].to_numpy(np.float64)
    codes, devices = pd.factorize(df["device"])  # few devices, many rows
    # a row without a device (a Parquet null cell, code -1) is held to a whole node's limit
    kinds = np.array([kind_word(str(d)) for d in devices] + ["node"], dtype=object)
    caps = np.array([max_plausible_w(str(d)) for d in [*devices, "node"]])
    cap = caps[codes]
    is_p = mcodes == (metrics.index("power_w") if "power_w" in metrics else -2)
    is_e = mcodes == (metrics.index("energy_j") if "energy_j" in metrics else -2)
    with np.errstate(invalid="ignore"):
        bad = ((is_p | is_e) & ~np.isfinite(v)) | (is_p & ((v < 0) | (v > cap))) | (is_e & (v < 0))
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    at = i + (offset or 0)
    where = f"{path}:{at + first_data_line}" if first_data_line else f"{path} row {at}"
    dev, m = df["device"].iat[i], metrics[mcodes[i]]
    rng = (f"[0, {cap[i]:g}] W for a {kinds[codes[i]]}" if m == "power_w"
           else "a finite value >= 0 J")
    raise ContractError(f"{where}: device {dev} {m} reading {float(v[i])!r} is outside the "
                        "physical "
                        f"range (expected {rng}); {int(bad.sum())} such reading(s) in the file"
                        + ("" if offset is None else
                           f" (rows {offset:,}-{offset + len(df) - 1:,}, the chunk read)"))


def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace (CSV or Parquet); `t_ns` int64, `value` float64; readings outside the
    physical range are rejected (`check_readings`)."""
    df = _read_csv(path, TRACE_COLUMNS, TRACE_TYPES)
    for col in ("host", "device", "metric", "source"):
        df[col] = df[col].astype(str)
    check_readings(df, path, None if Path(path).suffix == ".parquet" else 2)
    return df


def events_files(path: str | Path) -> list[Path]:
    """An events file and its per-rank siblings `<stem>.rank<N><suffix>`, in reading order."""
    path = Path(path)
    return [path] + sorted(path.parent.glob(f"{path.stem}.rank*{path.suffix}"))


def events_rows(df: pd.DataFrame, path: Path, lines: bool) -> pd.DataFrame:
    """An events file's rows as parsed (`typed_cells`), or a chunk of them: no phase ending
    before it starts (an error naming file and line); with `lines`, each row's `file_name`,
    `line_no` and `recorded_phase` (`read_events`); text columns as str."""
    import numpy as np

    bad = df["end_ns"] < df["start_ns"]
    at = df.attrs["lines"]
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ContractError(f"{_where(path, i, at)}: end_ns before start_ns in phase "
                            f"'{df['phase'].iloc[i]}'")
    if lines:
        line_no = at if not isinstance(at, int) else np.arange(at, len(df) + at)
        df = df.assign(file_name=str(path), line_no=line_no,
                       recorded_phase=df["phase"].astype(str))
    df.attrs.pop("lines", None)  # an array where quoted: pd.concat cannot compare those
    return df


def read_events(path: str | Path, lines: bool = False, siblings: bool = True) -> pd.DataFrame:
    """Read an events file, plus its per-rank siblings `<stem>.rank<N><suffix>` if present
    (`siblings`). `lines`: add each row's `file_name`, CSV `line_no` (header = 1) and
    `recorded_phase` (the phase name as the file records it, kept when attribution relabels
    `phase`), for messages."""
    import pandas as pd

    path = Path(path)
    paths = events_files(path) if siblings else [path]
    frames = []
    for p in paths:
        if not p.exists():
            continue
        frames.append(events_rows(_read_csv(p, EVENTS_COLUMNS, EVENTS_TYPES), p, lines))
    if not frames:
        raise FileNotFoundError(f"{path}: no such file")
    df = pd.concat(frames, ignore_index=True)
    df["host"] = df["host"].astype(str)
    df["phase"] = df["phase"].astype(str)
    return df


#: the cells pandas reads as missing by default (its `na_values` list)
_NA_CELLS = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
             "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]
#: columns read as the text written, never as missing: a phase may be named "NA" or "null"
TEXT_COLUMNS = ("phase",)


def read_table(path: str | Path, required: list[str], allow_empty: bool = False) -> pd.DataFrame:
    """Read any contract table (phases, curves, pfi) checking its required columns; a file with a
    header and no rows is an error unless `allow_empty`. `TEXT_COLUMNS` keep their text."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        raise ContractError(f"{path}: is a directory, expected a CSV file")
    try:
        data, cut_line = _read_text_tolerant(path)  # a truncated last line is never read
    except ContractError as exc:
        if "empty file" not in str(exc):
            raise
        data, cut_line = b"", None
    if cut_line is not None:
        warn_cut_line(path, cut_line, stacklevel=2)
    try:
        head = pd.read_csv(io.BytesIO(data), nrows=0).columns
        df = pd.read_csv(io.BytesIO(data), keep_default_na=False,
                         dtype={c: str for c in TEXT_COLUMNS if c in head},
                         na_values={c: _NA_CELLS for c in head if c not in TEXT_COLUMNS})
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
