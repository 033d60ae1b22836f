"""`tree.sums_by_name`: a tree's per-name sums grouped on integer codes: float columns
correctly rounded (`math.fsum` per name), integer columns exact, the frame pandas' group sums
would give in shape (index, order of names, dtypes)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.attribution.tree import PhaseTree, name_codes, sums_by_name

NAMES = ["step", "forward", "backward", "unattributed", "data_load", "b", "a"]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), k=st.integers(1, len(NAMES)), seed=st.integers(0, 2**32 - 1),
       sort=st.booleans())
def test_sums_by_name_are_the_correctly_rounded_sums_of_each_name(n, k, seed, sort) -> None:
    """Values over 30 orders of magnitude, names in any order, sorted or in order of first
    appearance: pandas' frame in shape, each float sum `math.fsum` of the name's values."""
    rng = np.random.default_rng(seed)
    names = np.array(NAMES[:k], dtype=object)[rng.integers(0, k, n)]
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-15, 16, n)
    y = rng.integers(0, 5, n).astype(np.int64)
    got = sums_by_name(names, sort=sort, x=x, y=y)
    want = pd.DataFrame({"phase": names, "x": x, "y": y}).groupby("phase", sort=sort).sum()
    want["x"] = [math.fsum(x[names == nm]) for nm in want.index]
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_a_sum_is_correctly_rounded() -> None:
    """1e16 and four 1.0 of one name: 1e16 + 4 (a plain running sum gives 1e16); and the order
    of the rows does not change a bit."""
    x = np.array([1e16, 1.0, 1.0, 1.0, 1.0, 0.1, -1e16, 0.2])
    got = sums_by_name(np.array(["a"] * len(x), dtype=object), x=x)
    assert got.loc["a", "x"] == math.fsum(x)
    back = sums_by_name(np.array(["a"] * len(x), dtype=object), x=x[::-1].copy())
    assert back.loc["a", "x"] == got.loc["a", "x"]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 300), k=st.integers(1, len(NAMES)), seed=st.integers(0, 2**32 - 1),
       sort=st.booleans())
def test_a_trees_cached_codes_give_the_names_sums(n, k, seed, sort) -> None:
    """Given the tree, its names' codes are computed once (`name_codes`, kept on the tree) and
    give the frame the names themselves give, sorted or in order of first appearance."""
    rng = np.random.default_rng(seed)
    names = np.array(NAMES[:k], dtype=object)[rng.integers(0, k, n)]
    zeros = np.zeros(n, np.int64)
    tree = PhaseTree(names, zeros, zeros, zeros, zeros - 1)
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-15, 16, n)
    y = rng.integers(0, 5, n).astype(np.int64)
    got = sums_by_name(tree, sort=sort, x=x, y=y)
    pd.testing.assert_frame_equal(got, sums_by_name(names, sort=sort, x=x, y=y),
                                  check_exact=True)
    assert name_codes(tree) is tree.codes and tree.codes is not None
    assert tree.codes[0].dtype == np.int8
