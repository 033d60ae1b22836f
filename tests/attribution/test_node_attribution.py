"""node and node_rest rows per phase (issue 45): a trace with GPU, CPU and a whole-node series
whose rest of the node draws a known power, attributed by the real machinery; known answers within
the stated interval, short phases flagged, and nothing changes without a node device."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import node_emulators as emu
from wattlife.attribution import attribute_energy
from wattlife.attribution.node_rest import BELOW_PERIOD, NODE_REST, node_periods

T0 = 1_700_000_000_000_000_000
REST_W = 120.0  # the rest of the node: fans, NIC, disks, PSU losses
# (phase, seconds, GPU W, CPU W)
SCHEDULE = [("load", 4.0, 80.0, 60.0), ("train", 6.0, 300.0, 90.0), ("ckpt", 0.3, 100.0, 70.0),
            ("upload", 3.0, 70.0, 50.0)]


def _power(t_s: np.ndarray, col: int) -> np.ndarray:
    """The schedule's power of column `col` (2: GPU, 3: CPU) at each time (s from T0)."""
    edges = np.cumsum([0.0] + [p[1] for p in SCHEDULE])
    k = np.clip(np.searchsorted(edges, t_s, side="right") - 1, 0, len(SCHEDULE) - 1)
    return np.array([SCHEDULE[i][col] for i in k])


def _trace(node_period_s: float | None) -> pd.DataFrame:
    """Window-average power readings: GPU, CPU every 0.05 s; the node every `node_period_s`
    (each reading the mean over the interval since the previous, as the samplers record)."""
    end = sum(p[1] for p in SCHEDULE) + 1.0  # the sampler outlives the last phase
    fine = np.arange(0.0, end + 1e-9, 0.001)
    rows = []
    specs = [("gpu0", 0.05, "sim", lambda t: _power(t, 2)),
             ("cpu0", 0.05, "estimate", lambda t: _power(t, 3))]
    if node_period_s:
        specs.append(("node", node_period_s, "pm_counters",
                      lambda t: _power(t, 2) + _power(t, 3) + REST_W))
    for dev, dt, src, f in specs:
        ts = np.arange(0.0, end + 1e-9, dt)
        for a, b in zip(ts[:-1], ts[1:], strict=True):
            w = fine[(fine >= a) & (fine < b)]
            rows.append((T0 + int(round(b * 1e9)), "h", dev, "power_w", float(f(w).mean()), src))
        rows.insert(0, (T0, "h", dev, "power_w", float(f(np.array([0.0]))[0]), src))
    df = pd.DataFrame(rows, columns=["t_ns", "host", "device", "metric", "value", "source"])
    return df.sort_values(["t_ns", "device"], kind="stable").reset_index(drop=True)


def _events() -> pd.DataFrame:
    rows, t = [], 0.0
    for name, dur, _, _ in SCHEDULE:
        rows.append({"run_id": "r", "host": "h", "rank": 0, "phase": name,
                     "start_ns": T0 + int(round(t * 1e9)),
                     "end_ns": T0 + int(round((t + dur) * 1e9)), "step": np.nan,
                     "items": np.nan})
        t += dur
    return pd.DataFrame(rows)


def _attribute(node_period_s: float | None, **kw) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return attribute_energy(_trace(node_period_s), _events(), method="integrate", **kw)


def _row(df: pd.DataFrame, phase: str, kind: str) -> pd.Series:
    (i,) = np.flatnonzero((df["phase"] == phase) & (df["device_kind"] == kind))
    return df.iloc[i]


def test_every_phase_has_node_and_node_rest_with_the_known_rest_inside_its_interval():
    df = _attribute(0.5)
    for name, dur, gpu_w, cpu_w in SCHEDULE:
        node, rest = _row(df, name, "node"), _row(df, name, NODE_REST)
        true_node = (gpu_w + cpu_w + REST_W) * dur
        assert node["energy_lo_j"] <= true_node <= node["energy_hi_j"], (name, node)
        assert rest["energy_lo_j"] <= REST_W * dur <= rest["energy_hi_j"], (name, rest)
        parts = df[(df["phase"] == name) & df["device_kind"].isin(["gpu", "cpu"])]
        # the difference and its worst-case interval (intervals that are not independent)
        assert rest["energy_j"] == pytest.approx(node["energy_j"] - parts["energy_j"].sum())
        assert rest["energy_lo_j"] == pytest.approx(node["energy_lo_j"]
                                                    - parts["energy_hi_j"].sum())
        assert rest["energy_hi_j"] == pytest.approx(node["energy_hi_j"]
                                                    - parts["energy_lo_j"].sum())
        assert rest["source"] == "pm_counters-minus-estimate,sim"
        assert rest["device"] == NODE_REST and rest["time_s"] == node["time_s"]
    long_ = _row(df, "train", NODE_REST)
    assert long_["energy_j"] == pytest.approx(REST_W * 6.0, rel=0.1)


def test_a_phase_shorter_than_the_node_period_is_flagged_with_its_interval():
    df = _attribute(0.5)
    ckpt, train = _row(df, "ckpt", "node"), _row(df, "train", "node")
    assert bool(ckpt[BELOW_PERIOD]) and not bool(ckpt["identified"])
    assert not bool(train[BELOW_PERIOD]) and bool(train["identified"])
    assert bool(_row(df, "ckpt", NODE_REST)[BELOW_PERIOD])
    assert ckpt["energy_hi_j"] - ckpt["energy_lo_j"] > 0  # an interval, never an exact number
    # meta.json's observed period wins over the trace's spacing: 0.2 s resolves a 0.3 s phase
    df2 = _attribute(0.5, node_periods={"h": 0.2})
    assert not bool(_row(df2, "ckpt", "node")[BELOW_PERIOD])


def test_without_a_node_device_nothing_changes():
    df = _attribute(None)
    assert not df["device_kind"].isin(["node", NODE_REST]).any()
    assert BELOW_PERIOD not in df.columns
    with_node = _attribute(0.5)
    same = with_node[with_node["device_kind"].isin(["gpu", "cpu"])].drop(columns=BELOW_PERIOD)
    pd.testing.assert_frame_equal(same.reset_index(drop=True), df.reset_index(drop=True))


def test_node_periods_read_from_meta_sampler_backends():
    sampler = {"backends": [{"devices": ["gpu0"], "reading_period_s": 0.1},
                            {"devices": ["node"], "source": "redfish", "reading_period_s": 1.02}]}
    assert node_periods(sampler, "h") == {"h": 1.02}
    assert node_periods({"backends": [{"devices": ["node"], "reading_period_s": None}]}, "h") == {}
    assert node_periods(None, "h") == {}


def _cell(df: pd.DataFrame, repeat: int = 1) -> pd.DataFrame:
    return df.assign(workload="w", storage="local", checkpoint="off", repeat=repeat)


def test_run_tables_carry_node_rows_their_share_and_the_node_source():
    from wattlife.analysis.aggregate import device_share, phase_summary

    runs = pd.concat([_cell(_attribute(0.5), 1), _cell(_attribute(0.5), 2)], ignore_index=True)
    summ = phase_summary(runs)
    assert set(summ["node_source"]) == {"pm_counters"}
    ckpt = summ[(summ["phase"] == "ckpt") & (summ["device_kind"] == NODE_REST)].iloc[0]
    assert bool(ckpt["below_node_period"])
    train = summ[(summ["phase"] == "train") & (summ["device_kind"] == NODE_REST)].iloc[0]
    assert train["energy_lo_j"] <= REST_W * 6.0 <= train["energy_hi_j"]
    share = device_share(runs).set_index("device_kind")
    assert np.isnan(share.loc["node", "share"]) and np.isnan(share.loc[NODE_REST, "share"])
    assert share.loc["node", "node_share"] == pytest.approx(1.0)
    parts = share.loc[["gpu", "cpu", NODE_REST], "node_share"].sum()
    assert parts == pytest.approx(1.0)  # the parts and the rest make up the node
    assert share.loc["gpu", "share"] + share.loc["cpu", "share"] == pytest.approx(1.0)
    none = device_share(_cell(_attribute(None)))
    assert set(none["node_source"]) == {"none"} and "node_share" not in none.columns
    assert set(phase_summary(_cell(_attribute(None)))["node_source"]) == {"none"}


def test_preparation_tables_show_the_node_share_and_never_count_the_node_twice():
    from wattlife.analysis.downloads import download_fit, download_rows, facility_estimate

    phases, recs = [], []
    for k, size in enumerate((1e9, 2e9, 3e9)):
        ph = _attribute(0.5)
        phases.append(ph.assign(phase=ph["phase"].replace({"train": "download_dataset"})))
        recs.append({"name": f"d{k}", "kind": "dataset", "bytes": size, "size_bytes": size,
                     "seconds": 6.0 * (k + 1)})
    rows = download_rows(recs, phases)
    assert set(rows["node_source"]) == {"pm_counters"}
    one = rows[rows["artefact"] == "d0"].set_index("device_kind")
    assert one.loc[["gpu", "cpu", NODE_REST], "node_share"].sum() == pytest.approx(1.0)
    rest_j = REST_W * (6.0 + 3.0)  # its transfer phases: download_dataset and upload
    assert one.loc[NODE_REST, "energy_lo_j"] <= rest_j <= one.loc[NODE_REST, "energy_hi_j"]
    cat = pd.DataFrame({"name": ["big"], "kind": ["dataset"], "size_bytes": [10e9]})
    fac = facility_estimate(cat, download_fit(rows), 10.0, 1.0).iloc[0]
    parts = fac["energy_per_download_j_gpu"] + fac["energy_per_download_j_cpu"]
    assert fac["energy_per_download_j"] == pytest.approx(parts)  # node, node_rest apart
    assert fac["node_share"] == pytest.approx(parts / fac["energy_per_download_j_node"])
    assert fac["node_source"] == "pm_counters"
    plain = [p[p["device_kind"].isin(["gpu", "cpu"])] for p in phases]
    assert set(download_rows(recs, plain)["node_source"]) == {"none"}


def test_figures_draw_the_node_and_name_its_source(tmp_path):
    from wattlife.analysis.aggregate import device_share, phase_summary
    from wattlife.figures.lifecycle import fig_device_share, fig_phase_energy, node_source_words

    runs = _cell(_attribute(0.5))
    summ = phase_summary(runs)
    assert "pm_counters" in node_source_words(summ)
    assert fig_phase_energy(summ, tmp_path / "fig1") and fig_device_share(
        device_share(runs), tmp_path / "fig2")
    assert "none" in node_source_words(phase_summary(_cell(_attribute(None))))


TRAIN = '''
import sys, time
from wattlife.markers import phase, step
from wattlife.contracts.clock import now_ns
t0 = int(sys.argv[1])
while now_ns() < t0 + 0.3e9:  # phases start inside the emulator's schedule
    time.sleep(0.01)
def busy(s):
    end = time.monotonic() + s
    while time.monotonic() < end:
        sum(i * i for i in range(2000))
with phase("download_dataset"):
    time.sleep(1.4)
with phase("data_load"):
    busy(0.9)
for _ in range(6):
    with step(items=8):
        with phase("forward"):
            busy(0.25)
        with phase("backward"):
            busy(0.35)
with phase("checkpoint"):
    time.sleep(0.04)
with phase("upload"):
    time.sleep(1.1)
'''


def _late_beyond(readings: pd.DataFrame, x_ns: int, t0: int, period_s: float) -> float:
    """Seconds by which the node readings saw the schedule edge nearest `x_ns` later than the age
    bound allows: the last reading still at the old level, taken more than one period after the
    edge, breaks the bound (a writer or a sampler the loaded machine delayed); 0 when none."""
    edge = t0 + int(round((x_ns - t0) / 1e9 / emu.SEGMENT_S) * emu.SEGMENT_S * 1e9)
    new = emu.power_at(edge + 1, t0)
    after = readings[readings["t_ns"] >= edge]
    seen = after[after["value"] == new]["t_ns"]
    if edge < t0 or not len(seen):
        return 0.0
    old = after[after["t_ns"] < seen.iloc[0]]["t_ns"]
    return max(0.0, (old.iloc[-1] - edge) / 1e9 - period_s) if len(old) else 0.0


def _table_row(ph: pd.DataFrame, name: str, true_j: float) -> dict[str, str]:
    """One phase's GPU, CPU, node (with interval), true node energy and node_rest (J)."""
    def cell(kind: str) -> str:
        r = _row(ph, name, kind)
        return f"{r['energy_j']:.1f} [{r['energy_lo_j']:.1f}, {r['energy_hi_j']:.1f}]"
    return {"phase": name, "gpu": cell("gpu"), "cpu": cell("cpu"), "node": cell("node"),
            "true node": f"{true_j:.1f}", "node_rest": cell(NODE_REST)}


@pytest.mark.slow
def test_wattlife_run_with_a_pm_counters_node_gives_node_and_node_rest_rows(
        tmp_path, env_path, children):
    """`wattlife run` over a pm_counters tree a real process rewrites at 10 Hz (the emulator's
    known power schedule), a training-like script, the simulated GPU and the CPU estimate:
    every phase has GPU, CPU, node and node_rest rows; the node's energy per phase is the
    schedule's within the stated interval (widened by the writer's lag); the 40 ms checkpoint is
    flagged below the node period."""
    from wattlife.contracts.clock import now_ns

    root, run = tmp_path / "pm_counters", tmp_path / "run"
    t0 = now_ns() + int(1.5e9)
    children.spawn([sys.executable, str(Path(emu.__file__)), "pm_counters", str(root), str(t0)])
    (tmp_path / "train.py").write_text(TRAIN)
    cfg = tmp_path / "node.yaml"
    cfg.write_text("sampler:\n  interval_ms: 50\n  gpu: sim\n  cpu: estimate\n"
                   "  idle_baseline_s: 0.3\n  cpu_estimate: {idle_w: 40, max_w: 150}\n"
                   "  sim_gpu: {n_gpus: 1, mem_share: 0.3, interval_ms: 20}\n  node: pm_counters\n"
                   f"  node_sources: {{pm_counters: {{root: '{root}', period_ms: 100}}}}\n")
    for args in (["run", "-o", str(run), "--config", str(cfg), "--", sys.executable,
                  str(tmp_path / "train.py"), str(t0)], ["attribute", str(run)]):
        out = subprocess.run([sys.executable, "-m", "wattlife.cli", *args], cwd=tmp_path,
                             env=env_path, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ph = pd.read_csv(run / "phases.csv")
    ev = pd.read_csv(run / "events.csv")
    meta = json.loads((run / "meta.json").read_text())
    period = node_periods(meta.get("sampler"), "h")["h"]  # meta.json's observed node period
    tr = pd.read_csv(run / "trace.csv")
    readings = tr[(tr["device"] == "node") & (tr["metric"] == "power_w")]
    table, late = [], []
    for name in ("download_dataset", "data_load", "forward", "backward", "checkpoint", "upload"):
        kinds = set(ph.loc[ph["phase"] == name, "device_kind"])
        assert {"gpu", "cpu", "node", NODE_REST} <= kinds, (name, kinds)
        assert _row(ph, name, NODE_REST)["source"].startswith("pm_counters-minus-")
        if name in ("forward", "backward"):  # their first steps are relabelled `warmup`
            continue
        node = _row(ph, name, "node")
        spans = ev[ev["phase"] == name]
        true = sum(emu.energy_between(a, b, t0) for a, b in zip(spans["start_ns"],
                                                                  spans["end_ns"], strict=True))
        table.append(_table_row(ph, name, true))
        over = [_late_beyond(readings, x, t0, period)
                for x in np.r_[spans["start_ns"], spans["end_ns"]]]
        late += over
        slack = (emu.HIGH_W - emu.LOW_W) * sum(over)
        assert node["energy_lo_j"] - slack <= true <= node["energy_hi_j"] + slack, (
            name, true, node, over)
    print(f"\nnode period {period:.3f} s, edges seen later than it allows: {max(late):.3f} s\n"
          + pd.DataFrame(table).to_string(index=False))
    assert bool(_row(ph, "checkpoint", "node")[BELOW_PERIOD])
    assert not bool(_row(ph, "data_load", "node")[BELOW_PERIOD])
    share = pd.read_csv(run / "tables" / "device_share.csv")
    assert set(share["node_source"]) == {"pm_counters"}
