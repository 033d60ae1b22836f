"""`exact_sum`: correctly rounded sums per group, the same bits however the values are ordered
or cut into pieces (what lets a rank's tree be summed a window at a time; issue 43)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.attribution import exact_sum as xs
from wattlife.attribution.exact_sum import ExactSums, exact_group_sums, exact_sum

FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(FLOATS, min_size=0, max_size=60))
def test_the_sum_is_the_exact_sum_rounded_once(values) -> None:
    """Any finite floats (subnormals, the largest, signed zeros): the exact rational sum rounded
    once (`math.fsum`'s value where fsum does not overflow in between), inf beyond the floats."""
    got = exact_sum(np.array(values, dtype=np.float64))
    exact = sum((Fraction(v) for v in values), Fraction(0))
    try:
        want = float(exact)
    except OverflowError:
        want = math.inf if exact > 0 else -math.inf
    assert got == want


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000), g=st.integers(1, 9),
       cuts=st.lists(st.integers(0, 3000), max_size=6), direct=st.booleans())
def test_groups_in_any_order_and_pieces_give_the_same_bits(seed, n, g, cuts, direct) -> None:
    """Shuffled rows, the stream cut anywhere, the (group, exponent) bins counted directly or
    through np.unique, the block size 7: each group's `math.fsum`, bit for bit."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, g, n)
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 31, n)
    perm = rng.permutation(n)
    acc = ExactSums(2)
    edges = [0, *sorted(c for c in cuts if c < n), n]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(xs, "BLOCK", 7)
        mp.setattr(xs, "_DIRECT_BINS", 1 << 22 if direct else 1)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            acc.add(codes[perm[a:b]], x[perm[a:b]], -x[perm[a:b]])
    got, neg = acc.totals(g)
    for k in range(g):
        assert got[k] == math.fsum(x[codes == k])
        assert neg[k] == -got[k] or got[k] == 0.0


def test_nan_is_skipped_and_infinities_kept() -> None:
    """As pandas' sums: NaN skipped (an all-NaN group is 0.0), +inf with finite values is inf,
    +inf and -inf in one group NaN."""
    codes = np.array([0, 0, 1, 1, 2, 2, 3])
    x = np.array([np.nan, 2.0, np.inf, 1.0, np.inf, -np.inf, np.nan])
    got = exact_group_sums(codes, 4, x)[0]
    assert got[0] == 2.0 and got[1] == np.inf and np.isnan(got[2]) and got[3] == 0.0


def test_a_count_of_columns_that_differs_is_refused() -> None:
    with pytest.raises(ValueError, match="2 columns given, 1 summed"):
        ExactSums(1).add(np.zeros(1, np.int64), np.zeros(1), np.zeros(1))
