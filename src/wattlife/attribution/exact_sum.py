"""Correctly rounded sums: one rounding of the exact sum (`math.fsum`'s result), per group,
vectorised. A finite float64 is an integer mantissa times a power of two, so the exact sum of
many is a sum of integers per exponent, and integer sums do not depend on their order: the same
result whatever the rows' order or however a stream of them is cut into windows. `ExactSums`
carries a stream's partial sums from window to window (issue 43: a rank's per-name totals from
its tree a window at a time, the same bits as from the whole tree)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

_MANT_BITS = 53  # frexp's mantissa in [0.5, 1) times 2**53 is an integer below 2**53
_LOW_BITS = 27  # mantissa = high * 2**27 + low: |high| < 2**26, 0 <= low < 2**27
#: values per pass: float64 sums of integers below 2**53 are exact, and 2**20 values of
#: under 2**27 stay below it; also what bounds the temporaries (~60 bytes a value)
BLOCK = 1 << 20
#: (group, exponent) bins counted directly up to this many, else through np.unique
_DIRECT_BINS = 1 << 22


class ExactSums:
    """Exact per-group sums of `n_columns` float64 columns, fed in any number of pieces in any
    order; NaN is skipped (as pandas' sums skip it), +inf and -inf give inf, both give NaN."""

    def __init__(self, n_columns: int) -> None:
        self._parts: list[dict[tuple[int, int], int]] = [{} for _ in range(n_columns)]
        self._infs: list[dict[int, set[float]]] = [{} for _ in range(n_columns)]

    def add(self, groups: np.ndarray | None, *columns: np.ndarray) -> None:
        """Adds each column's values to the sums of their groups (`groups`: codes >= 0, of any
        integer type; None: all in group 0)."""
        if len(columns) != len(self._parts):
            raise ValueError(f"ExactSums: {len(columns)} columns given, {len(self._parts)} summed")
        for k, col in enumerate(columns):
            values = np.asarray(col, dtype=np.float64)
            for lo in range(0, len(values), BLOCK):  # codes made int64 a block at a time
                block = values[lo:lo + BLOCK]
                codes = (np.zeros(len(block), np.int64) if groups is None
                         else np.asarray(groups[lo:lo + BLOCK], dtype=np.int64))
                self._add_block(k, codes, block)

    def _add_block(self, k: int, codes: np.ndarray, values: np.ndarray) -> None:
        """One block's values into column k's integer sums per (group, exponent)."""
        finite = np.isfinite(values)
        if not finite.all():
            inf = np.isinf(values)
            for g, v in zip(codes[inf].tolist(), values[inf].tolist(), strict=True):
                self._infs[k].setdefault(g, set()).add(v)
        nonzero = finite & (values != 0.0)
        codes, values = codes[nonzero], values[nonzero]
        if not len(values):
            return
        mant, expo = np.frexp(values)
        m = np.ldexp(mant, _MANT_BITS).astype(np.int64)
        e0 = int(expo.min())
        span = int(expo.max()) - e0 + 1
        key = codes * span + (expo - e0)
        del mant, expo
        high = (m >> _LOW_BITS).astype(np.float64)
        low = (m & ((1 << _LOW_BITS) - 1)).astype(np.float64)
        del m
        if (int(codes.max()) + 1) * span <= _DIRECT_BINS:
            uniq = np.flatnonzero(np.bincount(key))
            hs, ls = np.bincount(key, high)[uniq], np.bincount(key, low)[uniq]
        else:
            uniq, inv = np.unique(key, return_inverse=True)
            hs, ls = np.bincount(inv, high), np.bincount(inv, low)
        parts = self._parts[k]
        for u, h_sum, low_sum in zip(uniq.tolist(), hs.tolist(), ls.tolist(), strict=True):
            g, e = divmod(u, span)
            at = (g, e + e0)
            parts[at] = parts.get(at, 0) + (int(h_sum) << _LOW_BITS) + int(low_sum)

    def totals(self, n_groups: int) -> list[np.ndarray]:
        """Each column's correctly rounded sum of groups 0..n_groups-1 (0.0 for none)."""
        out = []
        for parts, infs in zip(self._parts, self._infs, strict=True):
            terms: dict[int, list[tuple[int, int]]] = {}
            for (g, e), m in parts.items():
                terms.setdefault(g, []).append((e, m))
            col = np.zeros(n_groups)
            for g, ts in terms.items():
                col[g] = _rounded(ts)
            for g, signs in infs.items():
                col[g] = signs.pop() if len(signs) == 1 else np.nan
            out.append(col)
        return out


def _rounded(terms: list[tuple[int, int]]) -> float:
    """sum(m * 2**(e - 53)) rounded once to the nearest float64, ties to even (Fraction's
    float() is correctly rounded); beyond the largest float64, inf of its sign."""
    e_min = min(e for e, _ in terms)
    n = sum(m << (e - e_min) for e, m in terms)
    try:
        return float(Fraction(n) * Fraction(2) ** (e_min - _MANT_BITS))
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def exact_group_sums(groups: np.ndarray | None, n_groups: int, *columns: np.ndarray
                     ) -> list[np.ndarray]:
    """Each column's correctly rounded sum per group code 0..n_groups-1."""
    acc = ExactSums(len(columns))
    acc.add(groups, *columns)
    return acc.totals(n_groups)


def exact_sum(values: np.ndarray) -> float:
    """The correctly rounded sum of `values` (`math.fsum`'s, vectorised)."""
    return float(exact_group_sums(None, 1, values)[0][0])
