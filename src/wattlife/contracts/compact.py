"""Tables of many rows held compactly (issue 43): text columns as categories, joined without
turning them back into strings (`pd.concat` makes a column whose categories differ between
frames one of strings: ~11 M events rows of a day of 8 ranks took ~6 GB as strings)."""

from __future__ import annotations

import pandas as pd
from pandas.api.types import union_categoricals


def as_categories(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with its text columns as categories (sorted: as `astype("category")` sorts)."""
    text = [c for c in df.columns if pd.api.types.is_string_dtype(df[c].dtype)
            and not isinstance(df[c].dtype, pd.CategoricalDtype)]
    return df.astype({c: "category" for c in text}) if text else df


def concat_compact(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames joined (`pd.concat(ignore_index=True)`), a column that is a category in every
    frame kept as one, its categories sorted."""
    if len(frames) == 1:
        return frames[0]
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    cats = [c for c in columns
            if all(c in f and isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames)]
    out = pd.concat([f.drop(columns=cats) for f in frames], ignore_index=True)
    for c in cats:
        out[c] = union_categoricals([f[c] for f in frames], sort_categories=True)
    return out[columns]
