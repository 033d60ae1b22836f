"""A node reading's age in the node rows' intervals (issue 45, `attribution.node_age`): a node
power signal of random steps, read by a sampler with random jitter, each reading the node's
energy up to an instant a random lag in [0, age] before it (an energy counter, or the mean power
since the previous reading, as a source averaging over its own window gives it); random phases,
repeated names and nested children. The true energy of every phase lies in its node interval,
always, and the interval is no wider than the old one plus the age's share."""

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wattlife.attribution import attribute_energy
from wattlife.contracts import UNATTRIBUTED

T0 = 1_700_000_000_000_000_000
NAMES = ("load", "train", "ckpt", "upload")


def _true_cumulative(edges_s: np.ndarray, levels_w: np.ndarray):
    """C(t): joules since 0 of a step power (levels_w[k] on [edges_s[k], edges_s[k+1]))."""
    cum = np.concatenate([[0.0], np.cumsum(levels_w * np.diff(edges_s))])
    return lambda t: np.interp(t, edges_s, cum)


@st.composite
def node_runs(draw):
    """(trace, events, true energy per phase name, age_s) of one random run."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    age = draw(st.floats(0.02, 1.0))
    spacing = draw(st.floats(0.01, 0.4))
    counter = draw(st.booleans())
    total = 12.0
    durations = rng.uniform(0.01, 2.0, 40)
    edges = np.concatenate([[-2.0], np.cumsum(durations) - 1.0])
    edges = np.append(edges[edges < total + 2.0], total + 3.0)
    levels = rng.choice([0.0, 80.0, 150.0, 350.0, 800.0], len(edges) - 1)
    energy = _true_cumulative(edges, levels)
    # sampler times with jitter; each reading's instant lags by up to `age`, never going back
    t = np.cumsum(spacing * rng.uniform(0.5, 1.5, int(total / spacing * 2) + 4))
    t = t[t <= total]
    tau = np.maximum.accumulate(t - rng.uniform(0.0, age, len(t)))
    e = energy(tau)
    if counter:
        metric, value = "energy_j", e + 5e6
    else:
        p = np.diff(e) / np.diff(t)
        metric, value = "power_w", np.concatenate([[p[0]], p])
    trace = pd.DataFrame({"t_ns": T0 + np.round(t * 1e9).astype(np.int64), "host": "h",
                          "device": "node", "metric": metric, "value": value,
                          "source": "pm_counters"})
    # phases between random boundaries inside the readings, some left out, some with a child
    bounds = np.sort(rng.uniform(t[0], t[-1] - age, draw(st.integers(2, 14))))
    rows, truth = [], {}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if rng.random() < 0.2:
            continue
        name = NAMES[rng.integers(len(NAMES))]
        rows.append((name, a, b))
        truth[name] = truth.get(name, 0.0) + energy(b) - energy(a)
        if rng.random() < 0.3:
            c, d = np.sort(rng.uniform(a, b, 2))
            rows.append(("inner", c, d))
            truth["inner"] = truth.get("inner", 0.0) + energy(d) - energy(c)
            truth[name] -= energy(d) - energy(c)
    events = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0,
                           "phase": [r[0] for r in rows],
                           "start_ns": [T0 + int(round(r[1] * 1e9)) for r in rows],
                           "end_ns": [T0 + int(round(r[2] * 1e9)) for r in rows],
                           "step": np.nan, "items": np.nan})
    return trace, events, truth, age


def _attribute(trace: pd.DataFrame, events: pd.DataFrame, age: float) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = attribute_energy(trace, events, method="integrate", node_periods={"h": age})
    return df[df["device_kind"] == "node"].set_index("phase")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_runs())
def test_every_phase_true_node_energy_lies_in_its_node_interval(run):
    """Always, whatever the lags, the jitter and the boundaries (`unattributed` aside: its last
    piece ends at the trace's last reading, past which the readings cannot bound the age)."""
    trace, events, truth, age = run
    node = _attribute(trace, events, age)
    for name, true_j in truth.items():
        lo, hi = node.loc[name, "energy_lo_j"], node.loc[name, "energy_hi_j"]
        tol = 1e-6 * max(1.0, abs(true_j))
        assert lo - tol <= true_j <= hi + tol, (name, true_j, lo, hi, age)
    assert UNATTRIBUTED in node.index


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_runs())
def test_the_age_widens_a_node_interval_by_at_most_its_share(run):
    """Width <= the old interval's (integration's, and the short-phase rule's) + per piece of
    exclusive time 2 x P_max x (age + 2 x the longest reading spacing): each boundary's bound
    reaches from the last reading at or before it to the first at or after it + age."""
    from wattlife.attribution.integrate import integrate
    from wattlife.attribution.node_age import exclusive_pieces
    from wattlife.attribution.node_rest import BELOW_PERIOD, NodeSensor
    from wattlife.attribution.series import device_series
    from wattlife.attribution.tree import phase_tree, timeline

    trace, events, _, age = run
    node = _attribute(trace, events, age)
    (s,) = device_series(trace)
    tree = phase_tree(timeline(events))
    sensor = NodeSensor.of(s, age)
    old = integrate(s, tree).set_index("phase")
    _, _, names = exclusive_pieces(tree, int(s.t_ns[0]), int(s.t_ns[-1]))
    pieces = pd.Series(names).value_counts()
    gap = float(np.max(np.diff(s.t_ns))) / 1e9
    for name in old.index:
        lo, hi = old.loc[name, "energy_lo_j"], old.loc[name, "energy_hi_j"]
        if bool(node.loc[name, BELOW_PERIOD]):
            t = max(float(old.loc[name, "time_s"]), 0.0)
            lo, hi = min(lo, sensor.min_w * t), max(hi, sensor.max_w * t)
        share = 2 * sensor.max_w * (age + 2 * gap) * pieces.get(name, 0)
        width = node.loc[name, "energy_hi_j"] - node.loc[name, "energy_lo_j"]
        assert width <= hi - lo + share + 1e-6 * max(1.0, hi), (name, width, hi - lo, share)
        assert node.loc[name, "energy_lo_j"] <= lo + 1e-9 and node.loc[name, "energy_hi_j"] >= hi


def test_exclusive_pieces_of_nested_phases_and_the_uncovered_time():
    """A parent [1, 10] s with a child [2, 4] and a sibling [12, 14] inside a trace [0, 20]: the
    parent's own time is two pieces, the time no phase covers three."""
    from wattlife.attribution.node_age import exclusive_pieces
    from wattlife.attribution.tree import phase_tree, timeline

    s = 1_000_000_000
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0,
                       "phase": ["train", "ckpt", "upload"],
                       "start_ns": [1 * s, 2 * s, 12 * s], "end_ns": [10 * s, 4 * s, 14 * s],
                       "step": np.nan, "items": np.nan})
    x0, x1, names = exclusive_pieces(phase_tree(timeline(ev)), 0, 20 * s)
    got = sorted(zip(names, x0 // s, x1 // s, strict=True))
    assert got == [("ckpt", 2, 4), ("train", 1, 2), ("train", 4, 10),
                   (UNATTRIBUTED, 0, 1), (UNATTRIBUTED, 10, 12), (UNATTRIBUTED, 14, 20),
                   ("upload", 12, 14)]


def test_age_bounds_known_answer_of_a_step_read_one_period_late():
    """100 W, then 300 W from 2 s; an energy counter read every 0.1 s, each reading 0.1 s old;
    the phase [1.05, 3.05] s (true 0.95 x 100 + 1.05 x 300 = 410 J) gets [E(3.0) - E(1.2),
    E(3.2) - E(1.0)] = [C(2.9) - C(1.1), C(3.1) - C(0.9)] = [360, 440] J."""
    from wattlife.attribution.node_age import age_bounds
    from wattlife.attribution.series import device_series
    from wattlife.attribution.tree import phase_tree, timeline

    ms = 1_000_000
    t = np.arange(0, 5001, 100) * ms
    energy = _true_cumulative(np.array([-1.0, 2.0, 9.0]), np.array([100.0, 300.0]))
    trace = pd.DataFrame({"t_ns": t, "host": "h", "device": "node", "metric": "energy_j",
                          "value": energy(t / 1e9 - 0.1), "source": "pm_counters"})
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "phase": ["upload"],
                       "start_ns": [1050 * ms], "end_ns": [3050 * ms], "step": np.nan,
                       "items": np.nan})
    (s,) = device_series(trace)
    b = age_bounds(s, phase_tree(timeline(ev)), 0.1, 300.0)
    assert b.loc["upload", "age_lo_j"] == pytest.approx(360.0)
    assert b.loc["upload", "age_hi_j"] == pytest.approx(440.0)
    assert b.loc["upload", "age_lo_j"] <= energy(3.05) - energy(1.05) <= b.loc["upload",
                                                                               "age_hi_j"]


def test_a_phase_of_many_short_pieces_is_bounded_by_its_span():
    """100 W read every 0.1 s, each reading 0.1 s old; `step` is 40 pieces of 1 ms, one every
    25 ms from 1.0 s (true 40 x 0.1 = 4 J). Summed per piece, hi would be about 40 x 20 J = 800 J;
    its pieces lie inside [1.0, 1.976] s, so hi is at most E(first >= 2.076 s) - E(last <= 1.0 s)
    = C(2.0) - C(0.9) = 110 J, and the truth stays inside."""
    from wattlife.attribution.node_age import age_bounds
    from wattlife.attribution.series import device_series
    from wattlife.attribution.tree import phase_tree, timeline

    ms = 1_000_000
    t = np.arange(0, 4001, 100) * ms
    energy = _true_cumulative(np.array([-1.0, 9.0]), np.array([100.0]))
    trace = pd.DataFrame({"t_ns": t, "host": "h", "device": "node", "metric": "energy_j",
                          "value": energy(t / 1e9 - 0.1), "source": "pm_counters"})
    starts = (1000 + 25 * np.arange(40)) * ms
    ev = pd.DataFrame({"run_id": "r", "host": "h", "rank": 0, "phase": "step",
                       "start_ns": starts, "end_ns": starts + ms, "step": np.nan, "items": np.nan})
    (s,) = device_series(trace)
    b = age_bounds(s, phase_tree(timeline(ev)), 0.1, 100.0)
    assert b.loc["step", "age_hi_j"] == pytest.approx(110.0)
    assert b.loc["step", "age_lo_j"] <= 4.0 <= b.loc["step", "age_hi_j"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(run=node_runs(), window=st.integers(1, 40))
def test_a_node_series_on_disk_gives_the_same_intervals(tmp_path_factory, run, window):
    """The node's series kept on disk and read `window` readings at a time (issue 43: a
    `WindowedSeries`, the age bounds' readings found and read a window at a time): every node
    row, its age-widened interval included, is the in-memory one bit for bit."""
    from wattlife.attribution.chunked import SpilledTrace
    from wattlife.attribution.windowed import WindowedSeries

    trace, events, _, age = run
    tmp = tmp_path_factory.mktemp("node")
    trace.to_csv(tmp / "trace.csv", index=False)
    whole = _attribute(trace, events, age)
    with SpilledTrace(tmp / "trace.csv", spill_dir=tmp, window=window) as spill:
        assert all(isinstance(s, WindowedSeries) for s in spill)
        got = _attribute(spill, events, age)
    pd.testing.assert_frame_equal(got, whole, check_exact=True)
