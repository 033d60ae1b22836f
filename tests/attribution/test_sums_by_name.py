"""`tree.sums_by_name`: a tree's per-name sums grouped on integer codes, the values of pandas'
group sums on the names as strings, bit for bit (they are compensated sums: the order of the
rows within a name is what both keep)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.attribution.tree import sums_by_name

NAMES = ["step", "forward", "backward", "unattributed", "data_load", "b", "a"]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), k=st.integers(1, len(NAMES)), seed=st.integers(0, 2**32 - 1),
       sort=st.booleans())
def test_sums_by_name_are_the_group_sums_of_the_names(n, k, seed, sort) -> None:
    """Values over 30 orders of magnitude (where a compensated sum differs from a plain one),
    names in any order, sorted or in order of first appearance: the same frame, exactly."""
    rng = np.random.default_rng(seed)
    names = np.array(NAMES[:k], dtype=object)[rng.integers(0, k, n)]
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-15, 16, n)
    y = rng.integers(0, 5, n).astype(np.int64)
    got = sums_by_name(names, sort=sort, x=x, y=y)
    want = pd.DataFrame({"phase": names, "x": x, "y": y}).groupby("phase", sort=sort).sum()
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_a_compensated_sum_is_kept() -> None:
    """1e16 and four 1.0 of one name: 1e16 + 4 (a plain running sum gives 1e16)."""
    got = sums_by_name(np.array(["a"] * 5, dtype=object), x=np.array([1e16, 1.0, 1.0, 1.0, 1.0]))
    assert got.loc["a", "x"] - 1e16 == 4.0
