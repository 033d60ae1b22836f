import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import T0, averaging_sensor, events_frame, response_sensor, trace_frame
from wattlife.attribution import (
    RESIDUAL,
    SensorResponse,
    attribute_energy,
    clamp_events,
    phase_tree,
    resolve_overlaps,
)
from wattlife.contracts import UNATTRIBUTED, ContractError

MS = 1_000_000


def test_integrate_exact_with_nesting_and_unattributed():
    # readings every 10 ms, each the exact average of the preceding 10 ms
    t = T0 + np.arange(0, 1001) * 10 * MS
    edges = T0 + np.array([0, 200, 500, 800, 1000, 10_000]) * MS
    levels = np.array([100.0, 300.0, 500.0, 200.0, 100.0])
    p = averaging_sensor(edges, levels, t, 10 * MS)
    ev = events_frame([("step", T0 + 200 * MS, T0 + 800 * MS),
                       ("forward", T0 + 200 * MS, T0 + 500 * MS),
                       ("backward", T0 + 500 * MS, T0 + 800 * MS)])
    out = attribute_energy(trace_frame(t, p), ev, method="integrate")
    e = out.set_index("phase")["energy_j"]
    assert e["forward"] == pytest.approx(300 * 0.3, rel=1e-9)
    assert e["backward"] == pytest.approx(500 * 0.3, rel=1e-9)
    assert e["step"] == pytest.approx(0.0, abs=1e-9)  # fully covered by its children
    total = 100 * 0.2 + 300 * 0.3 + 500 * 0.3 + 200 * 0.2 + 100 * 9.0
    assert e.sum() == pytest.approx(total, rel=1e-12)
    assert e[UNATTRIBUTED] == pytest.approx(total - 240, rel=1e-9)
    row = out.set_index("phase").loc["forward"]
    assert row["mean_power_w"] == pytest.approx(300.0)
    assert row["energy_lo_j"] <= row["energy_j"] <= row["energy_hi_j"]
    assert set(out["method"]) == {"integrate"} and set(out["source"]) == {"nvml-samples"}


def test_energy_counter_only_device_is_integrated():
    t = T0 + np.arange(0, 101) * 100 * MS
    e = np.arange(0, 101) * 10.0  # 100 W
    ev = events_frame([("forward", T0 + 1000 * MS, T0 + 3000 * MS)])
    out = attribute_energy(trace_frame(t, e, "cpu0", "energy_j", "rapl"), ev)
    row = out.set_index("phase").loc["forward"]
    assert row["energy_j"] == pytest.approx(200.0)
    assert row["device_kind"] == "cpu" and row["source"] == "rapl"


def _short_phase_run(seed: int, window_ms: float = 20.0, lags_ms: list[float] | None = None,
                     weights: list[float] | None = None):
    """Three phase kinds of 5-20 ms interleaved, read every 20 ms by a 20 ms averaging sensor
    (or one with the given lag weights)."""
    rng = np.random.default_rng(seed)
    power = {"matmul": 650.0, "copy": 420.0, "wait": 130.0}
    names, edges = [], [T0]
    while edges[-1] < T0 + 30_000 * MS:
        names.append(rng.choice(list(power)))
        edges.append(edges[-1] + int(rng.uniform(5, 20) * MS))
    edges = np.array(edges)
    levels = np.array([power[n] for n in names])
    t = np.arange(T0 + 40 * MS, edges[-1], 20 * MS)
    if lags_ms:
        p = response_sensor(edges, levels, t, lags_ms, weights)
    else:
        p = averaging_sensor(edges, levels, t, window_ms * MS)
    p = p * (1 + rng.normal(0, 0.02, len(p)))  # sensor noise
    ev = events_frame([(n, a, b) for n, a, b in zip(names, edges[:-1], edges[1:], strict=True)])
    return trace_frame(t, p), ev, power


def test_deconvolution_recovers_short_phases_within_3_percent():
    tr, ev, truth = _short_phase_run(0)
    out = attribute_energy(tr, ev, method="auto", n_boot=50)
    assert set(out["method"]) == {"deconvolve"}
    got = out.set_index("phase")["mean_power_w"]
    for name, watts in truth.items():
        assert got[name] == pytest.approx(watts, rel=0.03), name
    ci = out.set_index("phase")
    for name in truth:
        lo, e, hi = ci.loc[name, ["energy_lo_j", "energy_j", "energy_hi_j"]]
        assert lo <= e <= hi
    # energy still adds up: phases + unattributed + residual = measured total
    integ = attribute_energy(tr, ev, method="integrate")
    assert out["energy_j"].sum() == pytest.approx(integ["energy_j"].sum(), rel=1e-9)


def test_integration_of_short_phases_is_biased_where_deconvolution_is_not():
    tr, ev, truth = _short_phase_run(1)
    integ = attribute_energy(tr, ev, method="integrate").set_index("phase")["mean_power_w"]
    # the 20 ms window smears the 650 W phase toward its neighbours
    assert integ["matmul"] < 0.95 * truth["matmul"]


def test_window_given_explicitly():
    tr, ev, truth = _short_phase_run(2, window_ms=20.0)
    out = attribute_energy(tr, ev, method="deconvolve", window_s=0.020, n_boot=20)
    assert out["window_ms"].dropna().unique().tolist() == [20.0]
    assert out.set_index("phase").loc["copy", "mean_power_w"] == pytest.approx(420, rel=0.03)


def test_overlapping_phases_that_do_not_nest_are_rejected():
    ev = events_frame([("a", T0, T0 + 10 * MS), ("b", T0 + 5 * MS, T0 + 20 * MS)])
    with pytest.raises(ContractError, match="without nesting"):
        phase_tree(ev)


def test_gpus_take_their_own_ranks_phases():
    t = T0 + np.arange(0, 201) * 10 * MS
    tr = pd.concat([trace_frame(t, np.full(len(t), 100.0), "gpu0"),
                    trace_frame(t, np.full(len(t), 300.0), "gpu1")])
    ev = pd.concat([events_frame([("forward", T0, T0 + 1000 * MS)], rank=0),
                    events_frame([("backward", T0 + 500 * MS, T0 + 1500 * MS)], rank=1)])
    out = attribute_energy(tr, ev, method="integrate")
    g1 = out[out["device"] == "gpu1"].set_index("phase")["energy_j"]
    assert "forward" not in g1.index
    assert g1["backward"] == pytest.approx(300.0)


def test_idle_split():
    t = T0 + np.arange(0, 301) * 10 * MS
    p = np.where(t < T0 + 1000 * MS, 100.0, 400.0)
    ev = events_frame([("forward", T0 + 1500 * MS, T0 + 2500 * MS)])
    out = attribute_energy(trace_frame(t, p), ev, method="integrate",
                           idle_window=(T0, T0 + 900 * MS))
    row = out.set_index("phase").loc["forward"]
    assert row["idle_power_w"] == pytest.approx(100.0)
    assert row["static_j"] == pytest.approx(100.0)
    assert row["dynamic_j"] == pytest.approx(300.0)


intervals = st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 800),
                               st.sampled_from(["forward", "backward", "data_load"])),
                     min_size=0, max_size=25)


@settings(max_examples=60, deadline=None)
@given(intervals=intervals, powers=st.lists(st.floats(0, 1000), min_size=60, max_size=60),
       nest=st.booleans())
def test_energy_is_conserved(intervals, powers, nest):
    """phases + unattributed = device total, for any set of properly nested intervals."""
    t = T0 + np.arange(60) * 100 * MS
    rows, cursor = [], T0 - 200 * MS
    for start, dur, name in sorted(intervals):
        a = max(T0 + start * MS - 300 * MS, cursor)  # sequential top-level intervals
        b = a + dur * MS
        rows.append(("step", a, b))
        if nest:
            rows.append((name, a, a + (b - a) // 2))
        cursor = b
    ev = events_frame(rows) if rows else events_frame([])
    ev = ev.astype({"start_ns": "int64", "end_ns": "int64"})
    out = attribute_energy(trace_frame(t, np.array(powers)), ev, method="integrate")
    total = sum(p * 0.1 for p in powers[1:])
    assert out["energy_j"].sum() == pytest.approx(total, rel=1e-9, abs=1e-6)
    assert (out.loc[out["phase"] != UNATTRIBUTED, "time_s"] >= -1e-9).all()
    assert RESIDUAL not in set(out["phase"])


def test_a_phase_the_sensor_barely_sees_is_shrunk_not_wild():
    """A 0.3 ms phase inside 20 ms windows is barely identifiable: its power stays within the
    readings' range and the table says how little the readings saw of it."""
    tr, ev, truth = _short_phase_run(3)
    starts = ev["start_ns"].to_numpy()[::3]
    tiny = events_frame([("h2d", s, s + 300_000) for s in starts])
    ev2 = ev.copy()
    ev2.loc[ev2.index[::3], "start_ns"] += 300_000  # make room: h2d precedes every 3rd phase
    out = attribute_energy(tr, pd.concat([ev2, tiny], ignore_index=True), method="deconvolve",
                           window_s=0.02, n_boot=20).set_index("phase")
    lo, hi = tr["value"].min(), tr["value"].max()
    assert lo * 0.9 <= out.loc["h2d", "mean_power_w"] <= hi * 1.1
    assert out.loc["h2d", "identifiability"] < 0.05 < out.loc["matmul", "identifiability"]
    assert out.loc["copy", "mean_power_w"] == pytest.approx(truth["copy"], rel=0.03)


def test_zero_length_phases_nest_where_they_belong():
    """On the GPU timeline a phase can take no time (its two events run back to back)."""
    ev = events_frame([("step", T0, T0 + 100), ("data_load", T0 + 2, T0 + 2),
                       ("h2d", T0 + 4, T0 + 50),
                       ("forward", T0 + 50, T0 + 100), ("step", T0 + 100, T0 + 200),
                       ("data_load", T0 + 100, T0 + 100), ("h2d", T0 + 100, T0 + 150)])
    tree = phase_tree(ev)
    got = {(n, int(s - T0)): int(d) for n, s, d in zip(tree.name, tree.start, tree.depth,
                                                                    strict=True)}
    assert got[("data_load", 2)] == 1 and got[("h2d", 4)] == 1
    assert got[("step", 100)] == 0 and got[("h2d", 100)] == 1
    assert got[("data_load", 100)] >= 1  # inside step 2 (which sibling holds it is immaterial)


def test_deconvolution_is_bounded_by_the_power_limit_or_the_highest_reading():
    """Two phases that always run together (a 1 ms copy glued to a forward pass) are nearly
    collinear: noise can push one far above anything the device can draw. The bound is the
    larger of the trace's power limit and its highest reading; without a limit there is none."""
    from wattlife.attribution import device_series
    from wattlife.attribution.deconvolve import _nnls_normal

    rng = np.random.default_rng(3)
    c = rng.uniform(0.02, 0.08, 200)  # the copy's share of each window; the forward's is ~19x it
    a = np.column_stack([c, 19 * c + rng.normal(0, 2e-3, 200)])
    y = a @ np.array([300.0, 500.0]) + rng.normal(0, 25.0, 200)
    free = _nnls_normal(a.T @ a, a.T @ y)
    assert free.max() > 900  # the unbounded answer is unphysical
    bounded = _nnls_normal(a.T @ a, a.T @ y, max_w=700.0)
    assert bounded.max() <= 700.0 + 1e-9 and bounded.min() >= 0
    tr, _, _ = _short_phase_run(5)
    assert device_series(tr)[0].max_power_w == np.inf
    lim = trace_frame(tr["t_ns"].to_numpy()[::50], np.full(len(tr[::50]), 600.0),
                      metric="power_limit_w")
    s = device_series(pd.concat([tr, lim], ignore_index=True))[0]
    assert s.max_power_w == pytest.approx(tr["value"].max())  # readings above the limit: bursts
    lim["value"] = 900.0
    assert device_series(pd.concat([tr, lim], ignore_index=True))[0].max_power_w == 900.0


DELAYED = ([0, 10, 20, 30], [0.0, 0.5, 0.5])  # a 20 ms window that reports 10 ms late


def test_a_delayed_sensor_biases_the_boxcar_and_its_estimated_response_does_not():
    tr, ev, truth = _short_phase_run(0, lags_ms=DELAYED[0], weights=DELAYED[1])
    box = attribute_energy(tr, ev, method="deconvolve", n_boot=20).set_index("phase")
    assert box.loc["wait", "mean_power_w"] < 0.95 * truth["wait"]  # no boxcar [0, w] fits a delay
    out = attribute_energy(tr, ev, method="deconvolve", n_boot=20, response="estimate")
    got = out.set_index("phase")["mean_power_w"]
    for name, watts in truth.items():
        assert got[name] == pytest.approx(watts, rel=0.02), name
    r = out.attrs["sensor_responses"][("h", "gpu0")]
    assert r.estimated and r.centroid_s == pytest.approx(0.020, abs=0.001)
    w = dict(zip(np.round(np.asarray(r.edges_s[:-1]) * 1e3), r.weights, strict=True))
    assert w[0.0] + w[5.0] < 0.02 and sum(w[k] for k in (10.0, 15.0, 20.0, 25.0)) > 0.97
    assert out["sensor_response"].iloc[0].startswith("estimated response: 6 lag bins to 30 ms")
    # the energy still adds up
    integ = attribute_energy(tr, ev, method="integrate")
    assert out["energy_j"].sum() == pytest.approx(integ["energy_j"].sum(), rel=1e-9)


def test_a_given_sensor_response_applies_to_gpus(tmp_path):
    tr, ev, truth = _short_phase_run(3, lags_ms=DELAYED[0], weights=DELAYED[1])
    given = SensorResponse((0.0, 0.010, 0.030), (0.0, 1.0))
    given.to_csv(tmp_path / "r.csv")
    again = SensorResponse.from_csv(tmp_path / "r.csv")
    assert again == given and not again.is_boxcar and again.describe().startswith("given")
    got = attribute_energy(tr, ev, method="deconvolve", n_boot=20, response=again)
    for name, watts in truth.items():
        assert got.set_index("phase").loc[name, "mean_power_w"] == pytest.approx(watts, rel=0.02)
    assert SensorResponse.boxcar(0.02).describe() == "boxcar 20.0 ms"


@pytest.mark.parametrize("text, message", [
    ("lag_lo_ms,lag_hi_ms,weight\n0,10,0.5\n12,20,0.5\n",
     "line 3: lag_lo_ms 12.0 does not continue"),
    ("lag_lo_ms,lag_hi_ms,weight\n0,10,0.7\n10,20,0.7\n", "weights must be >= 0 and sum to 1"),
    ("lo,hi,w\n0,10,1\n", "expected columns"),
])
def test_a_bad_sensor_response_file_is_named(tmp_path, text, message):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(ValueError, match=message) as e:
        SensorResponse.from_csv(f)
    assert "bad.csv" in str(e.value)


def test_cli_estimates_a_sensor_response_and_reuses_it(tmp_path, capsys):
    from wattlife.cli import main

    tr, ev, truth = _short_phase_run(4, lags_ms=DELAYED[0], weights=DELAYED[1])
    tr.to_csv(tmp_path / "trace.csv", index=False)
    ev.to_csv(tmp_path / "events.csv", index=False)
    args = ["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
            str(tmp_path / "events.csv"), "--method", "deconvolve", "--bootstrap", "10"]
    assert main(args + ["-o", str(tmp_path / "a.csv"), "--sensor-response", "estimate"]) == 0
    saved = tmp_path / "a.h.gpu0.sensor_response.csv"
    assert saved.exists()
    assert main(args + ["-o", str(tmp_path / "b.csv"), "--sensor-response", str(saved)]) == 0
    a = pd.read_csv(tmp_path / "a.csv").set_index("phase")
    b = pd.read_csv(tmp_path / "b.csv").set_index("phase")
    assert b.loc["wait", "mean_power_w"] == pytest.approx(a.loc["wait", "mean_power_w"], rel=1e-6)
    assert b.loc["wait", "sensor_response"].startswith("given response")
    assert main(args + ["-o", str(tmp_path / "c.csv"), "--sensor-response", "nope.csv"]) == 2
    assert "nope.csv" in capsys.readouterr().err


def _checkpoint_then_step(overlap_ns: int) -> pd.DataFrame:
    """checkpoint [0, 500 ms]; the next step (with data_load, forward) starts `overlap_ns` before
    the checkpoint's end, as when the two were mapped through different GPU-clock anchors."""
    s0 = T0 + 500 * MS - overlap_ns
    ev = events_frame([("checkpoint", T0, T0 + 500 * MS), ("data_load", s0 + 20_000, s0 + 40_000),
                       ("forward", s0 + 50_000, T0 + 890 * MS), ("step", s0, T0 + 900 * MS)])
    return ev.assign(file_name="events.csv", line_no=[2, 3, 4, 5])


def test_a_116_us_cross_clock_overlap_is_clamped_reported_and_attributed():
    t = T0 + np.arange(0, 101) * 10 * MS
    edges = T0 + np.array([0, 500, 1000, 10_000]) * MS
    p = averaging_sensor(edges, np.array([100.0, 400.0, 100.0]), t, 10 * MS)
    ev = _checkpoint_then_step(116_000)
    with pytest.raises(ContractError):
        phase_tree(ev)  # as written, they do not nest
    with pytest.warns(UserWarning, match=r"2 phase boundaries .*largest 116.0 us, total 182.0 us"):
        out = attribute_energy(trace_frame(t, p), ev, method="integrate")
    e = out.set_index("phase")["energy_j"]
    # the checkpoint keeps its interval but the 20 µs data_load nested in its tail; forward and
    # step start at its end: forward takes [500, 890] ms at 400 W, the step the last 10 ms
    assert e["checkpoint"] == pytest.approx(100 * (0.5 - 20e-6), rel=1e-9)
    assert e["data_load"] == pytest.approx(100 * 20e-6, rel=1e-9)
    assert e["forward"] == pytest.approx(400 * 0.39, rel=1e-9)
    assert e["step"] == pytest.approx(400 * 0.01, rel=1e-9)
    fixed = clamp_events(ev)
    # data_load lies wholly inside the checkpoint's last 116 µs: it nests there, unmoved
    assert fixed["clamp_ns"].tolist() == [0, 0, 66_000, 116_000]
    phase_tree(fixed)  # nests now


def test_a_50_ms_overlap_is_still_an_error_naming_file_and_line():
    t = T0 + np.arange(0, 101) * 10 * MS
    with pytest.raises(ContractError, match=r"'step' \(events.csv:5\).*'checkpoint' "
                                            r"\(events.csv:2\).* by 50.000 ms"):
        attribute_energy(trace_frame(t, np.full(len(t), 100.0)), _checkpoint_then_step(50 * MS),
                         method="integrate")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 200)), min_size=1, max_size=25))
def test_overlaps_within_the_tolerance_always_resolve_to_nesting(spans):
    """Intervals (ns) overlapping by less than the tolerance: resolved, they nest; no bound moves
    more than the span of all intervals; empty intervals never appear from non-empty ones."""
    start = np.array([T0 + a for a, _ in spans], dtype=np.int64)
    end = start + np.array([d for _, d in spans], dtype=np.int64)
    s, e, c = resolve_overlaps(start, end, tol_ns=10_000)
    assert (e >= s).all() and (c >= 0).all()
    assert s.min() >= start.min() and e.max() <= end.max()
    phase_tree(events_frame([(f"p{i}", a, b) for i, (a, b) in enumerate(zip(s, e, strict=True))]))


def test_gpu_mapping_reads_every_form_meta_json_can_hold():
    from wattlife.attribution import gpu_mapping
    from wattlife.contracts import RunMeta

    assert gpu_mapping(RunMeta()) is None
    assert gpu_mapping(RunMeta.from_dict({"cuda_to_nvml": [2, 3]})) == [2, 3]
    assert gpu_mapping(RunMeta.from_dict({"gpu_mapping": {"cuda_to_nvml": [1]}})) == [1]
    gpus = [{"device": "gpu4", "local_rank": 1}, {"device": "gpu7", "local_rank": 0}]
    assert gpu_mapping(RunMeta.from_dict({"gpus": gpus})) == [7, 4]
