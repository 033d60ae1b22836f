"""Integer cells of the contract tables parsed exactly (never through float64), with Arrow's
casts as the fast path where pandas holds the strings in Arrow."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: an integer cell as the contracts write it: an optional sign and ASCII digits, nothing else (a
#: decimal point or an exponent means the writer went through floating point, which keeps only
#: 53 bits: an epoch-ns timestamp loses its last ~3 digits). 19 digits at most: int64.
INT_CELL = r"\s*[+-]?[0-9]{1,19}\s*"
_INT64_MAX = str(2**63 - 1)


def _arrow_ints(raw: pd.Series) -> pd.Series | None:
    """Every cell of an Arrow-backed string column digits only (an optional '-', 1-19 digits),
    parsed by Arrow's exact int64 cast; None where any is not (then `exact_ints` decides).
    About twice as fast on the strings pandas reads a CSV into (pandas 3 with pyarrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = getattr(raw.array, "_pa_array", None)
    if arr is None or not pa.types.is_large_string(arr.type) and not pa.types.is_string(arr.type):
        return None
    if arr.null_count or not pc.all(pc.match_substring_regex(arr, r"^-?[0-9]{1,19}$")).as_py():
        return None
    try:
        vals = pc.cast(arr, pa.int64()).to_numpy()
    except pa.ArrowInvalid:  # 19 digits beyond int64
        return None
    import pandas as pd

    return pd.Series(vals, index=raw.index, name=raw.name)


def arrow_small_ints(raw: pd.Series) -> np.ndarray | None:
    """A number column whose cells are all empty or 1-15 digits (`step`, `depth`, `items` of an
    events file) as float64 (empty: NaN) by Arrow's cast: such integers are exact in float64,
    the value `pd.to_numeric` gives; None otherwise (then `to_numeric` decides)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = getattr(raw.array, "_pa_array", None)
    if arr is None or not pa.types.is_large_string(arr.type) and not pa.types.is_string(arr.type):
        return None
    if arr.null_count or not pc.all(pc.match_substring_regex(arr, r"^[0-9]{0,15}$")).as_py():
        return None
    empty = pc.equal(arr, "")
    result: np.ndarray = pc.cast(pc.if_else(empty, pa.scalar(None, arr.type), arr),
                                 pa.float64()).to_numpy(zero_copy_only=False)
    return result


def exact_ints(raw: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """Integer cells (strings) parsed exactly to int64, never through float64: (values, bad),
    `bad` marking the cells that are not `INT_CELL` within int64 (a float or exponent form, an
    empty cell, text), whose values are 0. Vectorised: a regex pass, then one conversion."""
    import numpy as np

    fast = _arrow_ints(raw) if len(raw) else None
    if fast is not None:
        return fast, np.zeros(len(raw), dtype=bool)
    text = raw.astype(str)
    ok = text.str.fullmatch(INT_CELL.replace(r"\s*", "")).fillna(False).to_numpy(bool, copy=True)
    if not ok.all():  # spaces around the digits: a slower pattern, on the other cells only
        ok[~ok] = text[~ok].str.fullmatch(INT_CELL).fillna(False).to_numpy(bool)
    try:
        vals = text.where(ok, "0").astype(np.int64)
    except OverflowError:  # 19 digits above int64's range: rare, so looked for only then
        cell = text.str.strip()
        digits = cell.str.lstrip("+-")
        over = (digits.str.len() == 19) & (digits > _INT64_MAX)
        over &= ~(cell.str.startswith("-") & (digits == _INT64_MAX[:-1] + "8"))  # -2**63 fits
        ok = ok & ~over.to_numpy(bool)
        vals = text.where(ok, "0").astype(np.int64)
    return vals, ~ok
