"""The faster paths of issue 43 give the old paths' numbers bit for bit. `tree.SegmentIndex`
(one gather a reading over a boundary x name table) against the per-name loop it replaced, kept
here as the reference: readings before the first and after the last boundary, empty segments,
several windows of the same readings (`overlaps`), a phase named like the `unattributed` column.
`Gaps.within` of a series without gaps against the interpolation it skips."""

import numpy as np
import pandas as pd
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from synth import events_frame
from wattlife.attribution.gaps import sensor_gaps
from wattlife.attribution.segment_lookup import SegmentIndex
from wattlife.attribution.series import DeviceSeries
from wattlife.attribution.tree import phase_tree, segment_index, segments
from wattlife.contracts import UNATTRIBUTED


def _reference_overlap(bounds: np.ndarray, seg_name: np.ndarray, names: list[str],
                       t_ns: np.ndarray, window_ns: float) -> np.ndarray:
    """The per-name loop of gathers that SegmentIndex.overlap was before issue 43."""
    bounds = bounds.astype(np.float64)
    seg_len = np.diff(bounds)
    in_name = [seg_name == nm for nm in names]
    cum = [np.concatenate([[0.0], np.cumsum(np.where(m, seg_len, 0.0))]) for m in in_name]
    nseg = len(seg_len)
    t_lo = t_ns - window_ns
    ks = [np.searchsorted(bounds, t, side="right") - 1 for t in (t_ns, t_lo)]
    kk = [np.clip(k, 0, max(nseg - 1, 0)) for k in ks]
    valid = [(k >= 0) & (k < nseg) for k in ks]
    kc = [np.clip(k, 0, nseg) for k in ks]
    off = [t - bounds[k] for t, k in zip((t_ns, t_lo), kk, strict=True)]
    a = np.empty((len(t_ns), len(names)))
    for j in range(len(names)):
        hi = cum[j][kc[0]] + np.where(valid[0] & in_name[j][kk[0]], off[0], 0.0)
        lo = cum[j][kc[1]] + np.where(valid[1] & in_name[j][kk[1]], off[1], 0.0)
        a[:, j] = (hi - lo) / window_ns
    if UNATTRIBUTED in names:
        j = names.index(UNATTRIBUTED)
        a[:, j] = np.clip(1.0 - (a.sum(axis=1) - a[:, j]), 0.0, 1.0)
    return a


def _reference_names(tree) -> tuple[np.ndarray, list[str]]:
    """Each segment's name and the names, as `segment_index` gave them before issue 43."""
    _, label = segments(tree)
    seg_name = np.where(label[:-1] >= 0, tree.name[np.maximum(label[:-1], 0)], UNATTRIBUTED)
    return seg_name, sorted(set(tree.name)) + [UNATTRIBUTED]


def _nested_events(steps: list[tuple[int, int, int, int]], extra: str) -> pd.DataFrame:
    """Steps (gap, data_load, forward, backward in us) each holding three children; every
    third step's middle child is named `extra`."""
    rows, t = [], 0
    for k, (gap, a, b, c) in enumerate(steps):
        t += gap * 1000
        s = t
        for name, d in (("data_load", a), (extra if k % 3 == 1 else "forward", b),
                        ("backward", c)):
            rows.append((name, t, t + d * 1000, 1))
            t += d * 1000
        rows.append(("step", s, t, 0))
    return pd.DataFrame(rows, columns=["phase", "start_ns", "end_ns", "depth"])


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 30_000),
                                st.integers(0, 30_000), st.integers(1, 30_000)),
                      min_size=1, max_size=40),
       extra=st.sampled_from(["optimizer", UNATTRIBUTED]),
       n=st.integers(1, 400), lead=st.integers(-50_000, 50_000),
       windows=st.lists(st.integers(1, 120_000), min_size=1, max_size=3))
def test_segment_index_is_the_per_name_loop_bit_for_bit(steps, extra, n, lead, windows):
    ev = _nested_events(steps, extra)
    tree = phase_tree(ev)
    span = int(ev["end_ns"].max())
    t0 = lead * 1000
    t_ns = np.linspace(t0, span + 60_000_000, n).astype(np.int64)
    series = DeviceSeries("h", "gpu0", t_ns, np.zeros(n), np.zeros(n), "test")
    segs = segment_index(tree, series)
    seg_name, names = _reference_names(tree)
    assert segs.index.names == names
    assert [names[c] for c in segs.code] == list(seg_name)
    t = series.rel(t_ns[1:]) if n > 1 else series.rel(t_ns)
    rel_bounds = series.rel(segments(tree)[0])
    w_ns = [w * 1000.0 for w in windows]
    for w, got in zip(w_ns, segs.index.overlaps(t, w_ns), strict=True):
        want = _reference_overlap(rel_bounds, seg_name, names, t, w)
        assert got.tobytes() == want.tobytes()
        assert segs.index.overlap(t, w).tobytes() == want.tobytes()
        back = t[::-1].copy()  # readings in any order
        assert segs.index.overlap(back, w).tobytes() == want[::-1].tobytes()


def test_a_segment_without_a_listed_name_counts_for_no_column():
    bounds = np.array([0.0, 10.0, 20.0, 30.0])
    index = SegmentIndex(bounds, np.array([0, -1, 1]), ["a", UNATTRIBUTED])
    a = index.overlap(np.array([30.0]), 30.0)
    ref = _reference_overlap(bounds, np.array(["a", "zz", UNATTRIBUTED], dtype=object),
                             ["a", UNATTRIBUTED], np.array([30.0]), 30.0)
    assert a.tobytes() == ref.tobytes()


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.integers(15_000_000, 25_000_000), min_size=3, max_size=60),
       cuts=st.lists(st.integers(-10**9, 3 * 10**9), min_size=2, max_size=40))
def test_within_a_series_without_gaps_is_the_interpolated_zeros(steps, cuts):
    t = np.cumsum(np.array(steps, dtype=np.int64))
    series = DeviceSeries("h", "gpu0", t, np.cumsum(np.ones(len(t))), np.ones(len(t)), "test")
    gaps = sensor_gaps(series)
    assert not len(gaps.start_ns)  # spacings within 15-25 ms: no gap
    a = np.array(sorted(cuts)[: len(cuts) // 2], dtype=np.int64)
    b = a + np.abs(np.array(cuts[: len(a)], dtype=np.int64))
    x, zeros = series.rel(t), np.zeros(len(t))
    want = (np.interp(series.rel(b), x, zeros) - np.interp(series.rel(a), x, zeros),
            np.interp(series.rel(b), x, zeros) - np.interp(series.rel(a), x, zeros))
    got = gaps.within(a, b)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))


def _reference_within(series: DeviceSeries, a: np.ndarray, b: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """`Gaps.within` and the totals as they were before issue 43's windows: cumulative gap
    seconds and joules at every reading, interpolated."""
    t = series.t_ns
    dt = np.diff(t)
    gap = dt > 3 * float(np.median(dt))
    secs = np.concatenate([[0.0], np.cumsum(np.where(gap, dt, 0) / 1e9)])
    joules = np.concatenate([[0.0], np.cumsum(np.where(gap, np.diff(series.energy_j), 0.0))])
    x = series.rel(t)
    return (np.interp(series.rel(b), x, secs) - np.interp(series.rel(a), x, secs),
            np.interp(series.rel(b), x, joules) - np.interp(series.rel(a), x, joules),
            float(secs[-1]), float(joules[-1]))


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.one_of(st.integers(15_000_000, 25_000_000),
                                st.integers(80_000_000, 900_000_000)), min_size=3, max_size=80),
       power=st.lists(st.floats(20.0, 700.0), min_size=80, max_size=80),
       cuts=st.lists(st.integers(-10**9, 20 * 10**9), min_size=2, max_size=40))
def test_gaps_kept_at_their_readings_are_the_interpolation_at_every_reading(steps, power, cuts):
    """Gaps (issue 43) keep their cumulative seconds and joules at the readings that begin or
    end one, not at every reading: the same `within` and totals bit for bit, with gaps side
    by side (one reading ends one and begins the next), first, last, or none."""
    t = np.cumsum(np.array(steps, dtype=np.int64))
    e = np.cumsum(np.array(power[:len(t)]) * np.append(0.0, np.diff(t)) / 1e9)
    series = DeviceSeries("h", "gpu0", t, e, np.array(power[:len(t)]), "test")
    gaps = sensor_gaps(series)
    a = np.array(sorted(cuts)[: len(cuts) // 2], dtype=np.int64)
    b = a + np.abs(np.array(cuts[: len(a)], dtype=np.int64))
    s_ref, j_ref, total_s, total_j = _reference_within(series, a, b)
    got_s, got_j = gaps.within(a, b)
    assert got_s.tobytes() == s_ref.tobytes() and got_j.tobytes() == j_ref.tobytes()
    assert (gaps.total_s, gaps.total_j) == (total_s, total_j)
    assert len(gaps.at_ns) <= 2 * len(gaps.start_ns)


def _reference_power(t: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`series.power_series`'s sort, duplicates and cumulative energy before issue 43's
    windows: an argsort and four temporaries always."""
    order = np.argsort(t, kind="stable")
    t, p = t[order], p[order]
    keep = np.append(t[1:] != t[:-1], True)
    t, p = t[keep], p[keep]
    return t, p, np.concatenate([[0.0], np.cumsum(p[1:] * np.diff(t) / 1e9)])


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.integers(0, 40_000_000), min_size=2, max_size=200),
       power=st.lists(st.floats(0.0, 900.0), min_size=200, max_size=200),
       shuffle=st.booleans())
def test_a_series_in_time_order_is_built_without_a_sort_bit_for_bit(steps, power, shuffle):
    """Readings in time order (the sampler's), repeated timestamps (0 ns steps) or shuffled:
    the series' times, powers and energies as the sorting path gives them, bit for bit."""
    from wattlife.attribution.series import power_series

    t = 1_700_000_000_000_000_000 + np.cumsum(np.array(steps, dtype=np.int64))
    assume(len(set(t.tolist())) >= 2)  # a series needs two readings (both paths refuse less)
    p = np.array(power[:len(t)])
    if shuffle:
        perm = np.random.default_rng(len(t)).permutation(len(t))
        t, p = t[perm], p[perm]
    s = power_series("h", "gpu0", t, p, np.zeros(len(t), np.int64), ["x"], np.inf)
    want_t, want_p, want_e = _reference_power(t, p)
    assert s.t_ns.tobytes() == want_t.tobytes() and s.power_w.tobytes() == want_p.tobytes()
    assert s.energy_j.tobytes() == want_e.tobytes()


def test_a_series_in_time_order_keeps_its_arrays():
    """Readings in time order without repeats: the series holds the very arrays read (no
    sorted copy: a device's day is 4.3 M readings, 35 MB a column); the energy is computed."""
    from wattlife.attribution.series import power_series

    t = 1_700_000_000_000_000_000 + np.arange(1000, dtype=np.int64) * 20_000_000
    p = np.linspace(100.0, 300.0, 1000)
    s = power_series("h", "gpu0", t, p, np.zeros(1000, np.int64), ["x"], np.inf)
    assert s.t_ns is t and s.power_w is p
    assert s.energy_j.tobytes() == _reference_power(t, p)[2].tobytes()


def test_a_trees_names_share_one_string_a_name():
    """The tree's names (issue 43): the values `to_numpy(object)` gives, one Python string a
    distinct name, not one a row (3 days of one rank: 4.2 M rows, ~0.3 GB of strings)."""
    ev = pd.DataFrame({"phase": pd.array(["step", "forward", "step", "backward"] * 50,
                                         dtype="string"),
                       "start_ns": np.arange(200) * 10, "end_ns": np.arange(200) * 10 + 5})
    tree = phase_tree(ev)
    order = np.lexsort((np.zeros(200), -ev["end_ns"].to_numpy(), ev["start_ns"].to_numpy()))
    assert list(tree.name) == list(ev["phase"].to_numpy(object)[order])
    assert len({id(x) for x in tree.name}) == 3


def test_zero_length_phase_takes_no_time():
    """A zero-length phase (a `compile` marked at its forward's start) owns only empty
    segments: after it, the forward is the innermost phase (its end once sorted before its
    start, and the `compile` took the forward's whole time)."""
    ms = 1_000_000
    ev = events_frame([("step", 0, 20 * ms), ("forward", 5 * ms, 15 * ms),
                       ("compile", 5 * ms, 5 * ms), ("mark", 17 * ms, 17 * ms)])
    tree = phase_tree(ev)
    bounds, label = segments(tree)
    names = np.append(tree.name, "none")[label]
    owned = {str(nm): 0 for nm in names}
    for nm, d in zip(names[:-1], np.diff(bounds), strict=True):
        owned[str(nm)] += int(d)
    assert owned == {"step": 10 * ms, "forward": 10 * ms, "compile": 0, "mark": 0, "none": 0}
