"""A device's series kept on disk and read a window of readings at a time (`WindowedSeries`,
issue 43): what one device holds while it is attributed grows with the window, not the run.

Built from the spill's files (`chunked.SpilledTrace`, its `window`) in two passes of a window
each: the order checked, then the readings of equal timestamps dropped (the last kept), the
cumulative energy summed with the running sum carried from the window before (a cumulative sum
is sequential: the same additions in the same order, so E is the in-memory series' E bit for
bit) and written beside the readings, with the scalars every estimator needs (floor, bound,
highest and lowest reading, source). Every pass over all readings is windowed to the same
numbers: the median spacing by an exact radix selection (counts of 21-bit digits, three
passes), means and standard deviations by numpy's own pairwise summation replayed over the
windows (`pairwise_sum`: the same partial sums in the same order, bit for bit), E at any times by
`np.interp` over the window holding each time with the reading after it, the sensor gaps and the
settling's rolling ranges over windows overlapping by the readings they reach back to. Indexing
and slicing `t_ns`, `energy_j`, `power_w` read the file (`DiskArray`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import numpy as np

from .series import DeviceSeries, mode_of_counts, reading_power, spans_at

#: readings a window (~1.5 h of one device at 20 ms; 2 MiB a column)
WINDOW = 1 << 18
_LEAF = 1 << 16  # pairwise_sum's leaves (any size: the same sums)
_DIGIT = 21  # bits of one radix digit of the spacing selection (3 digits: 63 bits)


class DiskArray:
    """A 1-d array in a file, read on demand: `len`, an item, a slice of step 1 (a fresh
    array); whole-array operations go through `WindowedSeries`' methods."""

    def __init__(self, path: Path, dtype: type, n: int) -> None:
        self.path, self.dtype, self.n = path, np.dtype(dtype), n

    def __len__(self) -> int:
        return self.n

    def read(self, a: int, b: int) -> np.ndarray:
        """Items a..b-1 (clipped to the array)."""
        a, b = max(a, 0), min(b, self.n)
        if b <= a:
            return np.zeros(0, self.dtype)
        return np.fromfile(self.path, self.dtype, count=b - a, offset=a * self.dtype.itemsize)

    def __getitem__(self, i: int | slice) -> np.ndarray:
        if isinstance(i, slice):
            a, b, step = i.indices(self.n)
            if step != 1:
                raise IndexError("DiskArray: slices of step 1 only")
            return self.read(a, b)
        k = i + self.n if i < 0 else i
        if not 0 <= k < self.n:
            raise IndexError(f"index {i} out of range of {self.n}")
        result: np.ndarray = self.read(k, k + 1)[0]
        return result


def pairwise_sum(read: Callable[[int, int], np.ndarray], a: int, b: int) -> float:
    """`np.add.reduce` of items a..b-1 of an array that `read(lo, hi)` gives a piece of: numpy's
    pairwise summation (halves cut at a multiple of 8 above 128 items) replayed down to leaves
    summed by numpy itself, so the same partial sums are added in the same order: bit for bit
    (tests/attribution/test_windowed_series.py)."""
    n = b - a
    if n <= _LEAF:
        return float(np.add.reduce(read(a, b)))
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(read, a, a + n2) + pairwise_sum(read, a + n2, b)


@dataclass
class WindowedSeries(DeviceSeries):
    """A `DeviceSeries` whose readings stay on disk (module docstring): `t_ns`, `energy_j`,
    `power_w` are `DiskArray`s; the scalars of a whole pass are computed once."""

    window: int = WINDOW
    n: int = 0
    t0: int = 0
    p_lo: float = np.nan  # the lowest and highest power reading (power series)
    p_hi: float = np.nan
    rate_hi: float = np.inf  # the highest mean power between readings (energy counters)
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _median_dt: float | None = None

    def _disk(self, name: str) -> DiskArray:
        return cast(DiskArray, getattr(self, name))

    def read(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Readings a..b-1: t, E, P (None for an energy counter)."""
        p = None if self.power_w is None else self._disk("power_w").read(a, b)
        return self._disk("t_ns").read(a, b), self._disk("energy_j").read(a, b), p

    def diff_windows(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        """(a, t, E, P) of readings a..a+window, windows overlapping by one reading: every
        difference of neighbouring readings lies in exactly one window."""
        for a in range(0, max(self.n - 1, 0), self.window):
            yield (a, *self.read(a, min(a + self.window, self.n - 1) + 1))

    def rel(self, t_ns: np.ndarray) -> np.ndarray:
        result: np.ndarray = (np.asarray(t_ns, dtype=np.int64) - self.t0).astype(np.float64)
        return result

    def _window_of(self, x: np.ndarray) -> np.ndarray:
        """The window a time belongs to: the last whose first reading is at or before it
        (its readings reach the next window's first: both neighbours of x are in it)."""
        w = np.searchsorted(self.starts, x, side="right") - 1
        return np.clip(w, 0, len(self.starts) - 1)

    def searchsorted(self, x: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
        """`np.searchsorted(t_ns, x, side)`, a window of readings at a time: every reading
        before the last window whose first is at or before x (left: before x) counts, and
        none after that window's (its next window's first reading is read too)."""
        x = np.asarray(x, np.int64)
        w = np.searchsorted(self.starts, x, side=side) - 1
        out = np.zeros(len(x), np.int64)
        for k in np.unique(w[w >= 0]):
            sel = np.flatnonzero(w == k)
            a = int(k) * self.window
            t = self._disk("t_ns").read(a, a + self.window + 1)
            out[sel] = a + np.searchsorted(t, x[sel], side=side)
        return out

    def energy_of(self, k: np.ndarray) -> np.ndarray:
        """E at the readings of indices `k`, a window at a time."""
        k = np.asarray(k, np.int64)
        win = np.minimum(k // self.window, len(self.starts) - 1)
        out = np.empty(len(k))
        for w in np.unique(win):
            sel = np.flatnonzero(win == w)
            a = int(w) * self.window
            out[sel] = self._disk("energy_j").read(a, a + self.window + 1)[k[sel] - a]
        return out

    def energy_at(self, t_ns: np.ndarray) -> np.ndarray:
        x = np.asarray(t_ns, dtype=np.int64)
        out = np.empty(len(x))
        win = self._window_of(x)
        for w in np.unique(win):
            sel = np.flatnonzero(win == w)
            a = int(w) * self.window
            t, e, _ = self.read(a, min(a + self.window, self.n - 1) + 1)
            out[sel] = np.interp(self.rel(x[sel]), self.rel(t), e)
        return out

    @property
    def upper_w(self) -> float:
        if np.isfinite(self.max_power_w):
            return float(self.max_power_w)
        return self.p_hi if self.power_w is not None else self.rate_hi

    def p_min(self) -> float:
        return self.p_lo

    def p_max(self) -> float:
        return self.p_hi

    def p_mean(self, start: int = 0) -> float:
        return pairwise_sum(self._disk("power_w").read, start, self.n) / (self.n - start)

    def power_std(self) -> float:
        """`np.std` of the power readings (of the rates between readings for an energy
        counter), by `pairwise_sum`: mean, then the squared deviations."""
        if self.power_w is not None:
            m, read = self.n, self._disk("power_w").read
        else:
            m, read = self.n - 1, self._rates
        mean = pairwise_sum(read, 0, m) / m

        def squares(a: int, b: int) -> np.ndarray:
            x = read(a, b) - mean
            np.multiply(x, x, out=x)
            return x
        return float(np.sqrt(pairwise_sum(squares, 0, m) / m))

    def _rates(self, a: int, b: int) -> np.ndarray:
        """Mean power between readings i and i+1, for i in a..b-1."""
        t, e, _ = self.read(a, b + 1)
        result: np.ndarray = np.diff(e) / (np.diff(t) / 1e9)
        return result

    @property
    def median_dt(self) -> float:
        """`float(np.median(np.diff(t_ns)))`, exactly, by selection (module docstring)."""
        if self._median_dt is None:
            m = self.n - 1
            mid = kth_smallest(lambda: (np.diff(t) for _, t, _, _ in self.diff_windows()),
                               [m // 2] if m % 2 else [m // 2 - 1, m // 2])
            # np.median: the mean of the middle one or two, summed as float64
            self._median_dt = sum(float(x) for x in mid) / len(mid)
        return self._median_dt

    def gap_points(self, threshold_ns: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(i, t_i, t_i+1, E_i, E_i+1) of every spacing above `threshold_ns`, window by
        window."""
        parts: list[tuple[np.ndarray, ...]] = [(np.zeros(0, np.int64),) * 3 + (np.zeros(0),) * 2]
        for a, t, e, _ in self.diff_windows():
            i = np.flatnonzero(np.diff(t) > threshold_ns)
            parts.append((i + a, t[i], t[i + 1], e[i], e[i + 1]))
        idx, ta, tb, ea, eb = (np.concatenate([p[k] for p in parts]) for k in range(5))
        return idx, ta, tb, ea, eb

    def power_spans(self, at_ns: np.ndarray, reach_ns: int) -> np.ndarray:
        """`DeviceSeries.power_spans` window by window: each window's instants from its readings
        and those its first one reaches back to (2 x `reach_ns`, and one more for an energy
        counter's rate)."""
        at = np.asarray(at_ns, np.int64)
        out = np.zeros(len(at))
        win = self._window_of(at + reach_ns)
        for w in np.unique(win):
            sel = np.flatnonzero(win == w)
            a = int(w) * self.window
            m = a
            while m > 0:  # back to a reading 2 x reach before the window's first (or the start)
                m = max(a - 2 * (a - m) - 64, 0)
                if int(self._disk("t_ns")[m]) <= int(self.starts[w]) - 2 * reach_ns:
                    break
            m0 = max(m - 1, 0)  # an energy counter's rate needs the reading before
            t, e, p = self.read(m0, min(a + self.window, self.n))
            power = reading_power(t, e, p)[m - m0:]
            out[sel] = spans_at(t[m - m0:], power, at[sel], reach_ns)
        return out


def kth_smallest(values: Callable[[], Iterator[np.ndarray]], ks: list[int]) -> list[int]:
    """The k-th smallest (from 0) of non-negative int64 values for each k, exactly, over
    `values()`' pieces (called once a pass, three passes): one 21-bit digit a pass, counted
    among the values whose higher digits are k's so far (one count shared by the ks that share
    them). Memory: one piece and the counts, whatever the number of values."""
    state, mask = [[0, k] for k in ks], (1 << _DIGIT) - 1
    for shift in (2 * _DIGIT, _DIGIT, 0):
        counts = {p: np.zeros(1 << _DIGIT, np.int64) for p, _ in state}
        for d in values():
            for p, c in counts.items():
                x = d if shift == 2 * _DIGIT else d[(d >> (shift + _DIGIT)) == p]
                got = np.bincount((x >> shift) & mask)  # as long as its largest digit
                c[:len(got)] += got
        for st in state:
            cum = np.cumsum(counts[st[0]])
            j = int(np.searchsorted(cum, st[1], side="right"))
            st[1] -= int(cum[j - 1]) if j else 0
            st[0] = (st[0] << _DIGIT) | j
    return [p for p, _ in state]


def _in_order(t: DiskArray, window: int) -> tuple[bool, bool]:
    """(the readings' times never decrease, no two are equal), one window at a time."""
    last, strict = None, True
    for a in range(0, len(t), window):
        x = t.read(a, a + window + 1)  # one reading of the next window: its step is checked
        d = np.diff(x)
        if (d < 0).any():
            return False, False
        strict = strict and bool((d > 0).all())
        last = x[-1]
    return last is not None, strict


def windowed_series(host: str, dev: str, files: tuple[Path, Path, Path], n: int,
                    names: list[str], limit: float | None, out: Path,
                    window: int = WINDOW) -> WindowedSeries | None:
    """A device's series from its spilled readings (t int64, value float64, source int32
    files of `n` rows, in file order): power readings (`limit`: the device's power limit, inf
    when none) as `series.power_series` makes them, else (`limit` None) an energy counter as
    `series.energy_series`, the same values; E (and, where timestamps repeat, the readings
    kept) written to files beginning with `out`. None when the readings are not in time order
    (the caller sorts them in memory, as `power_series` does)."""
    t_in, v_in = DiskArray(files[0], np.int64, n), DiskArray(files[1], np.float64, n)
    ordered, strict = _in_order(t_in, window)
    if not ordered:
        return None
    src = DiskArray(files[2], np.int32, n)
    if limit is None:
        return _energy_series(host, dev, t_in, v_in, src, names, out, window)
    s = _power_series(host, dev, t_in, v_in, src, names, limit, out, window, strict)
    return s if s is None or s.n >= 2 else None


def _power_series(host: str, dev: str, t_in: DiskArray, p_in: DiskArray, src: DiskArray,
                  names: list[str], limit: float, out: Path, window: int,
                  strict: bool) -> WindowedSeries | None:
    """`windowed_series` of power readings: the last of equal timestamps kept (rewritten only
    where some repeat), E summed with the running sum carried (`series._cumulative`'s
    operations, in the same order)."""
    n = len(t_in)
    counts = np.zeros(len(names), np.int64)
    lo, hi, floor = np.inf, -np.inf, np.inf
    kept, t_prev, e_prev = 0, 0, 0.0
    paths = {k: Path(f"{out}.{k}") for k in ("t", "p", "e")}
    with open(paths["e"], "wb") as fe, open(paths["t"], "wb") as ft, open(paths["p"], "wb") as fp:
        for a in range(0, n, window):
            t = t_in.read(a, a + window + 1)
            p, c = p_in.read(a, a + window), src.read(a, a + window)
            keep = t[1:] != t[:-1] if len(t) > len(p) else np.append(t[1:] != t[:-1], True)
            t, p, c = t[:len(p)][keep], p[keep], c[keep]
            if not len(t):
                continue
            counts += np.bincount(c, minlength=len(names))
            lo, hi = min(lo, float(p.min())), max(hi, float(p.max()))
            if kept == 0:
                x = p[1:] * np.diff(t)
                np.divide(x, 1e9, out=x)
                e = np.empty(len(t))
                e[:1] = 0.0
                np.cumsum(x, out=e[1:])
                if len(p) > 1:
                    floor = min(floor, float(p[1:].min()))
            else:
                x = p * np.diff(np.concatenate([[t_prev], t]))
                np.divide(x, 1e9, out=x)
                e = np.cumsum(np.concatenate([[e_prev], x]))[1:]
                floor = min(floor, float(p.min()))
            e.tofile(fe)
            if not strict:
                t.tofile(ft)
                p.tofile(fp)
            kept += len(t)
            t_prev, e_prev = int(t[-1]), float(e[-1])
    if kept < 2:
        return None
    if strict:
        paths["t"], paths["p"] = t_in.path, p_in.path
    bound = max(limit, hi) if np.isfinite(limit) else np.inf
    return _made(WindowedSeries(
        host, dev, cast(np.ndarray, DiskArray(paths["t"], np.int64, kept)),
        cast(np.ndarray, DiskArray(paths["e"], np.float64, kept)),
        cast(np.ndarray, DiskArray(paths["p"], np.float64, kept)),
        mode_of_counts(counts, names), bound, max(floor, 0.0), window=window, n=kept, p_lo=lo,
        p_hi=hi))


def _energy_series(host: str, dev: str, t_in: DiskArray, e_in: DiskArray, src: DiskArray,
                   names: list[str], out: Path, window: int) -> WindowedSeries:
    """`windowed_series` of an energy counter: E less its first reading, the floor and the
    highest rate between readings (`series.energy_series`, `DeviceSeries.upper_w`)."""
    n = len(t_in)
    counts = np.zeros(len(names), np.int64)
    e0 = float(e_in[0])
    floor, top = np.inf, -np.inf
    path = Path(f"{out}.e")
    with open(path, "wb") as fe:
        for a in range(0, n, window):
            t, e = t_in.read(a, a + window + 1), e_in.read(a, a + window + 1)
            counts += np.bincount(src.read(a, a + window), minlength=len(names))
            dt = np.diff(t) / 1e9
            ok = dt > 0
            if ok.any():
                floor = min(floor, float(np.min(np.diff(e)[ok] / dt[ok])))
                top = max(top, float(np.max(np.diff(e - e0)[ok] / dt[ok])))
            (e[:window] - e0).tofile(fe)
    return _made(WindowedSeries(
        host, dev, cast(np.ndarray, t_in), cast(np.ndarray, DiskArray(path, np.float64, n)),
        None, mode_of_counts(counts, names), floor_w=max(floor, 0.0) if np.isfinite(floor) else 0.0,
        window=window, n=n, rate_hi=top if np.isfinite(top) else np.inf))


def _made(s: WindowedSeries) -> WindowedSeries:
    """The series with its first time and each window's first time read."""
    t = cast(DiskArray, s.t_ns)
    s.t0 = int(t[0])
    s.starts = np.array([t[a] for a in range(0, max(s.n - 1, 1), s.window)], np.int64)
    return s
