"""Attribution faults: short phases that the sensor barely sees, events outside the trace, a
trace covering part of the run, timestamps in the wrong unit, readings outside the physical
range, and a GPU that no rank uses."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth import T0, events_frame, trace_frame
from wattlife.attribution import IDLE, RESIDUAL, attribute_energy
from wattlife.cli import main
from wattlife.contracts import UNATTRIBUTED, ContractError, read_trace

MS = 1_000_000


def _transfer_run(seed: int):
    """A download cell as the demo's: CPU power estimated every 50 ms near a 117 W idle, a
    300 ms download and a 25 ms transfer phase the readings barely see."""
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(0, 60) * 50 * MS
    p = 117 + rng.normal(0, 3, len(t))
    p[20:26] += 40
    ev = events_frame([("idle_baseline", T0, T0 + 900 * MS),
                       ("download_model", T0 + 1000 * MS, T0 + 1300 * MS),
                       ("h2d", T0 + 1300 * MS, T0 + 1325 * MS),
                       ("process_exit", T0 + 1325 * MS, T0 + 2900 * MS)])
    return trace_frame(t, p, "cpu0", source="estimate"), ev, float(p[1:].min())


@pytest.mark.parametrize("seed", range(6))
def test_a_short_phase_never_gets_zero_joules_nor_a_zero_width_interval(seed):
    """Before: a 25 ms transfer got 0.0 J [0, 0] with the CPU drawing 117 W (CI, loaded machine)."""
    tr, ev, floor = _transfer_run(seed)
    out = attribute_energy(tr, ev, method="deconvolve", n_boot=50).set_index("phase")
    ph = out.drop([RESIDUAL])
    assert (ph.loc[ph["time_s"] > 0, "energy_j"] >= floor * ph["time_s"] - 1e-9).all()
    assert (ph["energy_hi_j"] > ph["energy_lo_j"]).all()
    h2d = out.loc["h2d"]
    assert not h2d["identified"]  # the readings barely see it, and the table says so
    assert h2d["energy_lo_j"] == pytest.approx(floor * 0.025)
    assert h2d["energy_hi_j"] == pytest.approx(tr["value"].max() * 0.025)
    assert out.loc["download_model", "identified"]


def test_a_phase_pinned_at_the_power_limit_spans_floor_to_bound():
    """Before: h2d on the H200 at the 700 W bound with a zero-width interval."""
    t = T0 + np.arange(0, 400) * 20 * MS
    rng = np.random.default_rng(1)
    p = np.where((np.arange(400) // 10) % 2 == 0, 650.0, 130.0) + rng.normal(0, 5, 400)
    rows = []
    for k in range(0, 400, 10):  # 2 ms copies glued to the start of every busy block
        a = T0 + k * 20 * MS
        if (k // 10) % 2 == 0:
            rows += [("h2d", a, a + 2 * MS), ("forward", a + 2 * MS, a + 200 * MS)]
        else:
            rows += [("wait", a, a + 200 * MS)]
    lim = trace_frame(t[::25], np.full(len(t[::25]), 700.0), metric="power_limit_w")
    tr = pd.concat([trace_frame(t, p), lim], ignore_index=True)
    out = attribute_energy(tr, events_frame(rows), method="deconvolve", n_boot=50)
    out = out.set_index("phase")
    assert not out.loc["h2d", "identified"]
    ph = out.drop(RESIDUAL)
    for name, r in ph[ph["time_s"] > 1e-6].iterrows():
        assert r["energy_hi_j"] - r["energy_lo_j"] > 1e-6 * max(r["energy_hi_j"], 1), name
        if not r["identified"]:
            assert r["energy_lo_j"] == pytest.approx(p[1:].min() * r["time_s"])
            assert r["energy_hi_j"] == pytest.approx(max(700.0, p.max()) * r["time_s"])


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 120), min_size=3, max_size=30),
       base=st.floats(50, 400), seed=st.integers(0, 100))
def test_deconvolution_conserves_energy_and_respects_the_floor(lengths, base, seed):
    """Property: phases + unattributed + residual = device total; every phase of non-zero length
    gets at least floor x time; every interval contains its estimate."""
    rng = np.random.default_rng(seed)
    edges = T0 + np.concatenate([[0], np.cumsum(lengths)]) * MS
    names = rng.choice(["forward", "backward", "h2d"], len(lengths))
    ev = events_frame([(n, int(a), int(b)) for n, a, b in zip(names, edges[:-1], edges[1:],
                                                                  strict=True)])
    t = np.arange(T0 - 40 * MS, edges[-1] + 60 * MS, 20 * MS)
    p = base + rng.uniform(0, 300, len(t))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = attribute_energy(trace_frame(t, p), ev, method="deconvolve", n_boot=20)
    total = float(np.sum(p[1:] * np.diff(t) / 1e9))
    assert out["energy_j"].sum() == pytest.approx(total, rel=1e-9)
    ph = out[(out["phase"] != RESIDUAL) & (out["time_s"] > 0)]
    assert (ph["energy_j"] >= p[1:].min() * ph["time_s"] * (1 - 1e-9)).all()
    assert (ph["energy_lo_j"] <= ph["energy_j"] + 1e-9).all()
    assert (ph["energy_j"] <= ph["energy_hi_j"] + 1e-9).all()


def _write(tmp_path, tr, ev):
    tr.to_csv(tmp_path / "trace.csv", index=False)
    ev.to_csv(tmp_path / "events.csv", index=False)
    return ["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
            str(tmp_path / "events.csv"), "-o", str(tmp_path / "phases.csv"),
            "--method", "integrate"]


def _flat(n=101, step_ms=10, watts=100.0, device="gpu0"):
    t = T0 + np.arange(n) * step_ms * MS
    return trace_frame(t, np.full(n, watts), device)


def test_events_outside_the_trace_warn_and_strict_refuses(tmp_path, capsys):
    """Before: exit 0, every phase 0 J, no warning."""
    ev = events_frame([("forward", T0 + 5_000 * MS, T0 + 6_000 * MS)])
    args = _write(tmp_path, _flat(), ev)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "outside the trace" in err and "h/gpu0 100.0%" in err and "Traceback" not in err
    ph = pd.read_csv(tmp_path / "phases.csv").set_index("phase")
    assert ph.loc["forward", "covered_fraction"] == 0.0
    (tmp_path / "phases.csv").unlink()
    assert main(args + ["--strict"]) != 0
    assert "outside the trace" in capsys.readouterr().err
    assert not (tmp_path / "phases.csv").exists()


def test_a_trace_covering_half_the_run_names_the_share(tmp_path, capsys):
    """Before: phases got half their time with full counts, silently."""
    ev = events_frame([("forward", T0, T0 + 2_000 * MS)])
    assert main(_write(tmp_path, _flat(), ev)) == 0  # trace: 1 s of the 2 s phase
    assert "h/gpu0 50.0% (1.000 s)" in capsys.readouterr().err
    ph = pd.read_csv(tmp_path / "phases.csv").set_index("phase")
    assert ph.loc["forward", "covered_fraction"] == pytest.approx(0.5)
    assert ph.loc["forward", "energy_j"] == pytest.approx(100.0)


def test_strict_refuses_a_trace_covering_half_the_run_naming_the_share(tmp_path, capsys):
    """--strict on a trace that covers 1 s of a 2 s phase: non-zero exit, one line naming the
    uncovered share, and no phases table."""
    ev = events_frame([("forward", T0, T0 + 2_000 * MS)])
    assert main(_write(tmp_path, _flat(), ev) + ["--strict"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "wattlife attribute: error:" in err and "uncovered share: h/gpu0 50.0% (1.000 s)" in err
    assert not (tmp_path / "phases.csv").exists()


@pytest.mark.parametrize("unit,div", [("ms", 1_000_000), ("us", 1_000), ("seconds", 1_000_000_000)])
def test_timestamps_in_the_wrong_unit_are_named(tmp_path, capsys, unit, div):
    """Before: events in ms instead of ns gave a silent ~0 J."""
    ev = events_frame([("forward", T0 + 100 * MS, T0 + 500 * MS)])
    ev[["start_ns", "end_ns"]] //= div
    assert main(_write(tmp_path, _flat(), ev)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "events.csv column start_ns" in err and f"epoch {unit}" in err and "nanoseconds" in err
    assert f"median {np.median(ev['start_ns']):.4g}" in err


@pytest.mark.parametrize("value,line", [("1e300", 7), ("-500", 7), ("nan", 7), ("inf", 7)])
def test_readings_outside_the_physical_range_name_file_line_and_device(tmp_path, value, line,
                                                                       capsys):
    """Before: 1e300 W gave 1e298 J; -500 W was used; NaN/inf gave a message without file."""
    tr = _flat(device="gpu3")
    tr["value"] = tr["value"].astype(object)
    tr.iloc[line - 2, tr.columns.get_loc("value")] = value
    args = _write(tmp_path, tr, events_frame([("forward", T0, T0 + 500 * MS)]))
    with pytest.raises(ContractError, match=rf"trace.csv:{line}: .*gpu3"):
        read_trace(tmp_path / "trace.csv")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"trace.csv:{line}: " in err and "gpu3" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "phases.csv").exists()


def test_a_gpu_no_rank_uses_is_idle_not_rank0s(tmp_path):
    """Before: an idle gpu1 got 90 J of rank 0's forward."""
    tr = pd.concat([_flat(device="gpu0", watts=300.0), _flat(device="gpu1", watts=90.0)])
    ev = events_frame([("forward", T0, T0 + 1000 * MS)])
    out = attribute_energy(tr, ev, method="integrate")
    g1 = out[out["device"] == "gpu1"].set_index("phase")
    assert "forward" not in g1.index
    assert g1.loc[IDLE, "energy_j"] == pytest.approx(90.0)
    gpu0 = out[out["device"] == "gpu0"].set_index("phase")
    assert gpu0.loc["forward", "energy_j"] == pytest.approx(300.0)


def test_meta_gpu_mapping_sends_each_rank_to_its_nvml_gpu(tmp_path):
    """CUDA_VISIBLE_DEVICES=2,3: local rank 0 runs on NVML gpu2; gpu0 and gpu1 are idle."""
    tr = pd.concat([_flat(device=f"gpu{k}", watts=100.0 * (k + 1)) for k in range(4)])
    ev = pd.concat([events_frame([("forward", T0, T0 + 1000 * MS)], rank=0),
                    events_frame([("backward", T0, T0 + 1000 * MS)], rank=1)])
    tr.to_csv(tmp_path / "trace.csv", index=False)
    ev.to_csv(tmp_path / "events.csv", index=False)
    (tmp_path / "meta.json").write_text(json.dumps({"cuda_to_nvml": [2, 3]}))
    assert main(["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
                 str(tmp_path / "events.csv"), "-o", str(tmp_path / "ph.csv"),
                 "--method", "integrate"]) == 0
    ph = pd.read_csv(tmp_path / "ph.csv")
    got = {d: set(g["phase"]) - {UNATTRIBUTED} for d, g in ph.groupby("device")}
    assert got == {"gpu0": {IDLE}, "gpu1": {IDLE}, "gpu2": {"forward"}, "gpu3": {"backward"}}


def test_meta_gpus_written_by_wattlife_run_map_each_rank_to_its_device(tmp_path):
    """The `gpus` list `wattlife run` writes (devices named by CUDA ordinal): rank 0 -> gpu0,
    rank 1 -> gpu1; a third GPU in the trace that no rank uses is idle."""
    tr = pd.concat([_flat(device=f"gpu{k}", watts=100.0 * (k + 1)) for k in range(3)])
    ev = pd.concat([events_frame([("forward", T0, T0 + 1000 * MS)], rank=0),
                    events_frame([("backward", T0, T0 + 1000 * MS)], rank=1)])
    tr.to_csv(tmp_path / "trace.csv", index=False)
    ev.to_csv(tmp_path / "events.csv", index=False)
    gpus = [{"device": f"gpu{k}", "local_rank": k, "cuda_ordinal": k, "nvml_index": 5 + k}
            for k in range(2)]
    (tmp_path / "meta.json").write_text(json.dumps({"gpus": gpus}))
    assert main(["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
                 str(tmp_path / "events.csv"), "-o", str(tmp_path / "ph.csv"),
                 "--method", "integrate"]) == 0
    ph = pd.read_csv(tmp_path / "ph.csv")
    got = {d: set(g["phase"]) - {UNATTRIBUTED} for d, g in ph.groupby("device")}
    assert got == {"gpu0": {"forward"}, "gpu1": {"backward"}, "gpu2": {IDLE}}


def test_output_equal_to_an_input_is_refused(tmp_path, capsys):
    """Before: -o equal to the trace silently overwrote the raw data."""
    args = _write(tmp_path, _flat(), events_frame([("forward", T0, T0 + 500 * MS)]))
    before = (tmp_path / "trace.csv").read_bytes()
    args[args.index("-o") + 1] = str(tmp_path / "trace.csv")
    assert main(args) == 2
    assert "also an input" in capsys.readouterr().err
    assert (tmp_path / "trace.csv").read_bytes() == before


def test_a_device_that_read_one_value_gives_every_phase_that_power():
    """A CPU estimate saturated at its maximum (two busy loops on 2 cores): every reading 150 W.
    Before: energy_lo 0 J for every phase; now each phase is 150 W x its time."""
    t = T0 + np.arange(0, 80) * 50 * MS
    ev = events_frame([("idle_baseline", T0, T0 + 300 * MS),
                       ("download_dataset", T0 + 1000 * MS, T0 + 1043 * MS)])
    out = attribute_energy(trace_frame(t, np.full(80, 150.0), "cpu0", source="estimate"), ev,
                           method="deconvolve", n_boot=20).set_index("phase").drop(RESIDUAL)
    assert out["energy_j"].to_numpy() == pytest.approx(150.0 * out["time_s"].to_numpy())
    assert out["energy_lo_j"].to_numpy() == pytest.approx(out["energy_j"].to_numpy())
    assert out["identified"].all()


def test_header_only_events_warn_and_a_header_only_trace_fails(tmp_path, capsys):
    (tmp_path / "ev.csv").write_text("run_id,host,rank,phase,start_ns,end_ns,step,items\n")
    _flat().to_csv(tmp_path / "trace.csv", index=False)
    args = ["attribute", "--trace", str(tmp_path / "trace.csv"),
            "--events", str(tmp_path / "ev.csv"), "-o", str(tmp_path / "ph.csv")]
    assert main(args) == 0
    assert "ev.csv: no phases (header only)" in capsys.readouterr().err
    (tmp_path / "trace.csv").write_text("t_ns,host,device,metric,value,source\n")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("no GPU, CPU or DRAM power/energy readings to attribute")
    assert len([ln for ln in err.splitlines() if ": error:" in ln]) == 1 and "Traceback" not in err


@pytest.mark.parametrize("overlap_ns, ok", [(116_000, True), (50 * MS, False)])
def test_a_cross_clock_overlap_is_clamped_and_a_real_one_names_file_and_line(tmp_path, capsys,
                                                                             overlap_ns, ok):
    """The H200 case through the CLI: a step starting 116 µs before the checkpoint's end is
    clamped and reported; 50 ms is an overlap, refused with both rows' file:line."""
    s0 = T0 + 500 * MS - overlap_ns
    ev = events_frame([("checkpoint", T0, T0 + 500 * MS), ("forward", s0 + 10, T0 + 900 * MS),
                       ("step", s0, T0 + 950 * MS)])
    args = _write(tmp_path, _flat(), ev)
    rc = main(args)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) >= 1 and "Traceback" not in err
    if ok:
        assert rc == 0 and "2 phase boundaries" in err and "largest 116.0 us" in err
        ph = pd.read_csv(tmp_path / "phases.csv").set_index("phase")
        assert ph.loc["checkpoint", "time_s"] == pytest.approx(0.5)
        assert ph.loc["forward", "time_s"] == pytest.approx(0.4)
    else:
        assert rc != 0 and not (tmp_path / "phases.csv").exists()
        ev_path = tmp_path / "events.csv"
        assert f"'step' ({ev_path}:4)" in err and f"'checkpoint' ({ev_path}:2)" in err
        assert "by 50.000 ms" in err


def test_a_gzipped_trace_reads_as_the_plain_one(tmp_path):
    """trace.csv.gz is a trace file of the contract (contracts.TRACE_FILES; benchmarks write
    it): read_trace gives the same table as from trace.csv. Before: its gzip bytes were decoded
    as text ("truncated last line ignored", then a tokenizing error)."""
    tr = _flat(device="gpu3")
    tr.to_csv(tmp_path / "trace.csv", index=False)
    tr.to_csv(tmp_path / "trace.csv.gz", index=False)
    pd.testing.assert_frame_equal(read_trace(tmp_path / "trace.csv.gz"),
                                  read_trace(tmp_path / "trace.csv"))
    gz = (tmp_path / "trace.csv.gz").read_bytes()
    (tmp_path / "trace.csv.gz").write_bytes(gz[: len(gz) // 2])  # a copy cut short
    with pytest.raises(ContractError, match=r"trace.csv.gz: not a readable gzip file"):
        read_trace(tmp_path / "trace.csv.gz")
