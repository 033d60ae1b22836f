"""Deconvolution fed window by window (issue 43): each chunk of readings looks up the segment
index of its own time window (`tree.Segments.window`, its cumulative times started from the
run's at the window's first boundary), never the whole run's index; the numbers are the whole
index's bit for bit. Windows against the whole index on synthetic traces cut into many windows:
phases crossing window edges, short (deconvolved) phases, readings before the first and after
the last boundary, a sensor gap at a window edge, windows asked for out of order, two ranks
through `attribute_energy`, a delayed sensor response; energy conserved over window sizes."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import T0, averaging_sensor, events_frame, response_sensor, trace_frame
from wattlife.attribution import energy as energy_mod
from wattlife.attribution.deconvolve import deconvolve
from wattlife.attribution.energy import attribute_energy
from wattlife.attribution.response import SensorResponse
from wattlife.attribution.series import device_series
from wattlife.attribution.tree import phase_tree, segment_index
from wattlife.contracts import RESIDUAL, UNATTRIBUTED

MS = 1_000_000


def _steps(n: int, step_ms: int, lead_ms: int, rank: int = 0) -> tuple[pd.DataFrame, np.ndarray,
                                                                      np.ndarray]:
    """`n` steps of data_load / forward (8 ms: shorter than a 20 ms reading) / backward /
    optimizer (6 ms), a gap after each; the events and the true power's edges and levels."""
    rows, edges, power = [], [], []
    t = T0 + lead_ms * MS
    for i in range(n):
        s = t + i * step_ms * MS
        marks = [("data_load", 0, 30, 150.0), ("forward", 30, 38, 520.0),
                 ("backward", 38, 0.8 * step_ms, 640.0), ("optimizer", 0.8 * step_ms,
                                                         0.8 * step_ms + 6, 380.0)]
        for name, a, b, w in marks:
            rows.append((name, int(s + a * MS), int(s + b * MS)))
            edges.append(int(s + a * MS))
            power.append(w)
        rows.append(("step", int(s), int(s + (0.8 * step_ms + 6) * MS)))
        edges.append(int(s + (0.8 * step_ms + 6) * MS))
        power.append(100.0)
    edges.append(int(t + n * step_ms * MS))
    return events_frame(rows, rank=rank), np.array(edges, np.int64), np.array(power)


def _device(n_steps: int = 60, step_ms: int = 97, lead_ms: int = 300, tail_ms: int = 400,
            gap: tuple[int, int] | None = None, seed: int = 0, delayed: bool = False):
    """One GPU's series (20 ms readings with jitter, from before the first phase to after the
    last) and its rank's tree; `gap`: readings removed between these indices (a sensor gap)."""
    ev, edges, power = _steps(n_steps, step_ms, lead_ms)
    edges = np.concatenate([[T0], edges, [edges[-1] + tail_ms * MS]])
    power = np.concatenate([[100.0], power, [100.0]])
    rng = np.random.default_rng(seed)
    n = int((edges[-1] - T0) / (20 * MS))
    t = T0 + 25 * MS + np.arange(n, dtype=np.int64) * 20 * MS + rng.integers(0, MS, n)
    t = t[t < edges[-1]]
    if delayed:
        p = response_sensor(edges, power, t, [0, 5, 20, 40], [0.2, 0.5, 0.3])
    else:
        p = averaging_sensor(edges, power, t, 20 * MS)
    p = p + rng.normal(0, 3.0, len(t))
    if gap is not None:
        keep = np.r_[0:gap[0], gap[1]:len(t)]
        t, p = t[keep], p[keep]
    s = device_series(trace_frame(t, p))[0]
    return s, phase_tree(ev)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Two phases tables equal bit for bit (NaN where NaN)."""
    assert list(a.columns) == list(b.columns)
    pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("chunk", [1, 7, 33, 100_000])
@pytest.mark.parametrize("case", ["plain", "gap", "delayed"])
def test_windowed_deconvolution_is_the_whole_index_bit_for_bit(chunk, case):
    """Chunks of 1..33 readings (hundreds of windows, every phase crossing window edges), a
    gap of 30 readings, a delayed 3-bin response: the same table as the whole index."""
    s, tree = _device(gap=(70, 100) if case == "gap" else None, delayed=case == "delayed")
    r = (SensorResponse((0.0, 0.005, 0.02, 0.04), (0.2, 0.5, 0.3)) if case == "delayed"
         else SensorResponse.boxcar(0.02))
    kw = {"n_boot": 30, "chunk": chunk, "response": r}
    whole = deconvolve(s, tree, windowed=False, **kw)
    win = deconvolve(s, tree, windowed=True, **kw)
    _same(win, whole)
    assert (win.loc[win["phase"] == "forward", "identified"]).all()


def test_windows_in_any_order_are_the_whole_index():
    """Windows asked for in increasing time, then an earlier one, then one past the last
    boundary and one before the first: each the whole index's rows bit for bit."""
    s, tree = _device()
    segs = segment_index(tree, s)
    rel = s.rel(s.t_ns)
    cuts = [(rel[a], rel[min(a + 9, len(rel) - 1)]) for a in range(0, len(rel), 9)]
    order = cuts + [cuts[3], cuts[1], (rel[-1] + 1e9, rel[-1] + 2e9), (-5e9, -1e9)]
    whole = segs.index
    for lo, hi in order:
        t = np.linspace(lo, hi, 13)
        for w in (1e6, 20e6, 45e6):
            got = segs.window(lo - w - 1e3, hi + 1e3).overlap(t, w)
            assert got.tobytes() == whole.overlap(t, w).tobytes()


def test_a_window_edge_on_a_phase_boundary_is_the_whole_index():
    """Readings exactly on segment boundaries, windows cut there: lookups at and just beside
    each edge agree with the whole index."""
    s, tree = _device(n_steps=10)
    segs = segment_index(tree, s)
    b = segs.rel
    for k in range(1, len(b) - 1, 3):
        t = np.array([b[k - 1], b[k] - 1.0, b[k], b[k] + 1.0, b[k + 1]])
        got = segs.window(b[k - 1] - 20e6 - 1e3, b[k + 1] + 1e3).overlap(t, 20e6)
        assert got.tobytes() == segs.index.overlap(t, 20e6).tobytes()


def test_a_window_without_its_readings_reach_is_wrong():
    """The checks have teeth: a window cut at its first reading, not at that reading's window
    start, misses the boundaries its first readings look back to, and its rows differ."""
    s, tree = _device()
    segs = segment_index(tree, s)
    t = s.rel(s.t_ns)[200:210]
    short = segs.window(t[0], t[-1]).overlap(t, 20e6)
    assert not np.array_equal(short, segs.index.overlap(t, 20e6))


def _two_ranks() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two GPUs driven by ranks 0 and 1 (offset steps), 20 ms readings."""
    frames, evs = [], []
    for rank in (0, 1):
        ev, edges, power = _steps(50, 89 + 11 * rank, 200 + 7 * rank, rank=rank)
        edges = np.concatenate([[T0], edges, [edges[-1] + 300 * MS]])
        power = np.concatenate([[90.0], power, [90.0]])
        t = T0 + 20 * MS + np.arange(int((edges[-1] - T0) / (20 * MS)), dtype=np.int64) * 20 * MS
        t = t[t < edges[-1]]
        p = averaging_sensor(edges, power, t, 20 * MS) + 2.0 * np.sin(np.arange(len(t)))
        frames.append(trace_frame(t, p, device=f"gpu{rank}"))
        evs.append(ev.assign(local_rank=rank))
    return pd.concat(frames, ignore_index=True), pd.concat(evs, ignore_index=True)


@pytest.mark.parametrize("chunk", [5, 61])
def test_attribute_energy_of_two_ranks_windowed_is_the_whole_index(monkeypatch, chunk):
    """The whole path (`attribute_energy`, two ranks on two GPUs, deconvolved) with chunks of
    5 and 61 readings: windowed and whole-index tables equal bit for bit."""
    tr, ev = _two_ranks()
    out = {}
    for windowed in (True, False):
        monkeypatch.setattr(energy_mod, "deconvolve", functools.partial(
            deconvolve, chunk=chunk, windowed=windowed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[windowed] = attribute_energy(tr, ev, method="deconvolve", n_boot=20)
    _same(out[True], out[False])
    assert set(out[True]["device"]) == {"gpu0", "gpu1"}


def test_default_chunks_against_small_windows_agree_to_rounding():
    """The default chunk (one window per bootstrap block here) against windows of 3 readings:
    the normal equations are summed in other groupings, so equal to 1e-9 relative, not bit for
    bit (the only difference a chunk size makes)."""
    s, tree = _device(n_steps=80)
    a = deconvolve(s, tree, n_boot=20, chunk=3)
    b = deconvolve(s, tree, n_boot=20)
    np.testing.assert_allclose(a["energy_j"], b["energy_j"], rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(chunk=st.integers(1, 400), n_steps=st.integers(2, 40), step_ms=st.integers(60, 200),
       lead_ms=st.integers(-500, 500), seed=st.integers(0, 5))
def test_energy_is_conserved_and_windows_change_nothing(chunk, n_steps, step_ms, lead_ms, seed):
    """Any window size: phases + residual + unattributed = the device's energy, and the table
    is the whole index's bit for bit (phases may begin before the first reading)."""
    s, tree = _device(n_steps=n_steps, step_ms=step_ms, lead_ms=max(lead_ms, 0), seed=seed)
    win = deconvolve(s, tree, n_boot=5, chunk=chunk)
    whole = deconvolve(s, tree, n_boot=5, chunk=chunk, windowed=False)
    _same(win, whole)
    total = float(s.energy_j[-1] - s.energy_j[0])
    assert np.isclose(win["energy_j"].sum(), total, rtol=1e-12, atol=1e-9)
    assert {RESIDUAL, UNATTRIBUTED} <= set(win["phase"])
