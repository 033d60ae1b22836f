"""Waiting energy (analysis.waiting): hand-made phases tables with a
known answer, the context floor read from a trace, the simulated cap what-if's physics, and the
facility estimate."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.waiting import (
    WAITING_FILES,
    basis,
    capped_wait_power,
    cell_summary,
    context_floor,
    run_summary,
    waiting_facility,
    waiting_table,
    waiting_tables,
    waiting_whatif,
    write_waiting_tables,
)
from wattlife.simgpu_model import SimGpuModel

CELL = {"workload": "qwen", "storage": "shared", "checkpoint": "on", "repeat": 1}
# (phase, time_s, energy_j) on gpu0 (measured) and cpu0 (estimated)
GPU = [("idle_baseline", 1.0, 80.0), ("process_startup", 10.0, 800.0), ("setup", 5.0, 625.0),
       ("forward", 2.0, 1200.0), ("checkpoint", 4.0, 500.0), ("data_load", 1.0, 200.0),
       ("process_exit", 1.0, 100.0)]
CPU = [("idle_baseline", 1.0, 40.0), ("process_startup", 10.0, 500.0), ("forward", 2.0, 100.0),
       ("checkpoint", 4.0, 240.0)]


def phases(run_id: str = "r1", cell: dict | None = None, gpus: tuple = ("gpu0",)) -> pd.DataFrame:
    rows = []
    for dev in gpus:
        rows += [{"phase": p, "device_kind": "gpu", "device": dev, "time_s": t, "energy_j": e,
                  "source": "nvml-samples"} for p, t, e in GPU]
    rows += [{"phase": p, "device_kind": "cpu", "device": "cpu0", "time_s": t, "energy_j": e,
              "source": "estimate"} for p, t, e in CPU]
    df = pd.DataFrame(rows)
    df["run_id"] = run_id
    df["mean_power_w"] = df["energy_j"] / df["time_s"]
    df["energy_lo_j"], df["energy_hi_j"] = df["energy_j"], df["energy_j"]
    df["count"], df["method"] = 1, "integrate"  # the rest of the phases contract
    for k, v in (cell or CELL).items():
        df[k] = v
    return df


def floors(run_id: str = "r1", ctx: float = 120.0) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": run_id, "host": "h", "device": "gpu0",
                          "context_idle_w": ctx}])


def test_split_at_and_above_floor_known_answer():
    w = waiting_table(phases(), floors()).set_index(["device", "phase"])
    g = w.loc["gpu0"]
    # process_startup: before any CUDA context, the bare idle floor (80 W, idle baseline)
    assert g.loc["process_startup", "floor_w"] == 80.0
    assert g.loc["process_startup", "floor_kind"].startswith("idle without CUDA context")
    assert g.loc["process_startup", ["at_floor_j", "above_floor_j"]].tolist() == [800.0, 0.0]
    # after it: the context floor 120 W
    assert g.loc["setup", ["at_floor_j", "above_floor_j"]].tolist() == [600.0, 25.0]
    assert g.loc["checkpoint", ["at_floor_j", "above_floor_j"]].tolist() == [480.0, 20.0]
    assert g.loc["data_load", ["at_floor_j", "above_floor_j"]].tolist() == [120.0, 80.0]
    # a phase below the floor: all of it at the floor, never a negative "above"
    assert g.loc["process_exit", ["at_floor_j", "above_floor_j"]].tolist() == [100.0, 0.0]
    assert "forward" not in g.index and "idle_baseline" not in g.index
    # the device's energy in the run leaves out the idle baseline
    assert set(g["device_energy_j"]) == {3425.0}
    assert g.loc["setup", "share"] == pytest.approx(625.0 / 3425.0)
    assert set(g["basis"]) == {"measured"}
    c = w.loc["cpu0"]
    assert set(c["floor_w"]) == {40.0} and set(c["basis"]) == {"estimated"}
    assert c.loc["checkpoint", ["at_floor_j", "above_floor_j"]].tolist() == [160.0, 80.0]


def test_energy_conserved_and_shares_sum():
    ph = phases()
    w = waiting_table(ph, floors())
    assert np.allclose(w["at_floor_j"] + w["above_floor_j"], w["energy_j"])
    assert np.allclose(w["at_floor_share"] + w["above_floor_share"], w["share"])
    r = run_summary(w, ph).set_index("device_kind")
    assert r.loc["gpu", "energy_j"] == 3425.0 and r.loc["gpu", "work_j"] == 1200.0
    assert r.loc["gpu", "waiting_j"] == 2225.0
    assert r.loc["gpu", "waiting_j"] + r.loc["gpu", "work_j"] == r.loc["gpu", "energy_j"]
    assert r.loc["gpu", "waiting_share"] == pytest.approx(
        w[w["device"] == "gpu0"]["share"].sum())
    assert r.loc["gpu", "biggest_phase"] == "process_startup"
    assert r.loc["cpu", "waiting_j"] == 740.0 and r.loc["cpu", "basis"] == "estimated"


def test_without_context_floor_the_idle_baseline_is_the_floor():
    w = waiting_table(phases()).set_index(["device", "phase"])
    assert w.loc[("gpu0", "setup"), "floor_w"] == 80.0
    assert w.loc[("gpu0", "setup"), "at_floor_j"] == 400.0
    assert w.loc[("gpu0", "setup"), "floor_kind"].startswith("idle without CUDA context")


def test_devices_of_two_hosts_keep_their_own_energy_and_floor():
    a, b = phases(), phases()
    a["host"], b["host"] = "n1", "n2"
    b["energy_j"] *= 2
    b["mean_power_w"] *= 2
    fl = pd.DataFrame([{"run_id": "r1", "host": h, "device": "gpu0", "context_idle_w": c}
                       for h, c in (("n1", 120.0), ("n2", 200.0))])
    w = waiting_table(pd.concat([a, b], ignore_index=True), fl).set_index(
        ["host", "device", "phase"])
    assert w.loc[("n1", "gpu0", "setup"), "device_energy_j"] == 3425.0
    assert w.loc[("n2", "gpu0", "setup"), "device_energy_j"] == 6850.0
    assert w.loc[("n2", "gpu0", "setup"), ["floor_w", "at_floor_j", "above_floor_j"]].tolist() \
        == [200.0, 1000.0, 250.0]

def test_idle_ranks_in_grad_sync_wait_for_the_slowest():
    ph = phases(gpus=("gpu0", "gpu1"))
    extra = pd.DataFrame([{"run_id": "r1", "phase": "grad_sync", "device_kind": "gpu",
                           "device": d, "time_s": t, "energy_j": 200.0 * t,
                           "mean_power_w": 200.0, "source": "nvml-samples", **CELL}
                          for d, t in (("gpu0", 1.0), ("gpu1", 3.0))])
    w = waiting_table(pd.concat([ph, extra], ignore_index=True))
    gs = w[w["phase"] == "grad_sync (idle rank)"]
    assert gs["device"].tolist() == ["gpu1"]
    assert gs["time_s"].iloc[0] == 2.0 and gs["energy_j"].iloc[0] == 400.0


def test_cell_summary_over_repeats_and_facility_estimate():
    ph = pd.concat([phases("a", {**CELL, "repeat": 1}), phases("b", {**CELL, "repeat": 2})])
    ph.loc[(ph["run_id"] == "b") & (ph["phase"] == "checkpoint") & (ph["device"] == "gpu0"),
           "energy_j"] = 700.0  # repeat 2 waits 200 J more
    tables = waiting_tables(ph, None, jobs_per_year=3600.0)
    cells = cell_summary(tables["waiting_runs.csv"]).set_index("device_kind")
    assert cells.loc["gpu", "n"] == 2 and cells.loc["gpu", "waiting_j"] == 2325.0
    fac = waiting_facility(cell_summary(tables["waiting_runs.csv"]), 3600.0).set_index(
        "device_kind")
    assert fac.loc["gpu", "waiting_kwh_per_year"] == pytest.approx(2325.0 * 3600 / 3.6e6)
    assert fac.loc["gpu", "jobs_per_year"] == 3600.0
    assert fac.loc["gpu", "source"].startswith("estimate") and "measured" in fac.loc[
        "gpu", "source"]
    assert "estimated" in fac.loc["cpu", "source"]


def test_context_floor_is_the_lowest_steady_power_while_memory_is_held():
    rows = []
    t = 0
    for i in range(400):  # 20 ms readings: 2 s idle, 2 s noisy busy, 2 s at 121 W, 2 s busy
        s = i * 0.02
        held = s >= 2.0
        p = (80.0 if not held else 400.0 + 100 * (i % 2) if s < 4.0 or s >= 6.0
             else 121.0 + 0.1 * (i % 3))
        t = int(s * 1e9) + 1
        rows.append({"t_ns": t, "host": "h", "device": "gpu0", "metric": "power_w", "value": p,
                     "source": "nvml-samples"})
        if i % 25 == 0:
            rows.append({"t_ns": t, "host": "h", "device": "gpu0", "metric": "mem_used_b",
                         "value": 5e8 + (2e9 if held else 0), "source": "nvml-poll"})
    trace = pd.DataFrame(rows)
    f = context_floor(trace, 0, int(1.9e9))
    assert f["context_idle_w"].iloc[0] == pytest.approx(121.1, abs=0.1)
    no_mem = context_floor(trace[trace["metric"] == "power_w"])
    assert np.isnan(no_mem["context_idle_w"].iloc[0])


def test_whatif_cap_never_above_cap_never_below_floor_zero_when_already_below():
    m = SimGpuModel()
    assert capped_wait_power(124.0, 122.0, 200.0, m) == 124.0  # below the cap: unchanged
    p = capped_wait_power(450.0, 122.0, 200.0, m)
    assert 122.0 <= p <= 200.0
    assert capped_wait_power(450.0, 190.0, 200.0, m) >= 190.0
    assert capped_wait_power(450.0, 250.0, 200.0, m) == 250.0  # no cap goes below the floor
    w = waiting_table(phases(), floors())
    w.loc[(w["device"] == "gpu0") & (w["phase"] == "data_load"), "energy_j"] = 450.0
    out = waiting_whatif(w, [200.0, 150.0]).set_index(["phase", "cap_w"])
    ck = out.loc[("checkpoint", 200.0)]
    assert ck["saving_j"] == 0.0 and "already at or below the cap" in ck["note"]
    dl = out.loc[("data_load", 200.0)]
    assert dl["sim_power_w"] <= 200.0 and dl["saving_j"] > 0
    assert dl["saving_j"] == pytest.approx(450.0 - dl["sim_power_w"] * 1.0)
    assert np.isnan(out.loc[("data_load", 150.0), "saving_j"])  # below the lowest cap: refused
    assert "not evaluated" in out.loc[("data_load", 150.0), "note"]
    assert set(out["source"].str.split(" ").str[0]) == {"simulated"}
    assert (out["saving_j"].dropna() >= 0).all()


def test_basis_of_sources():
    assert basis("nvml-samples") == "measured"
    assert basis("estimate") == "estimated" and basis("nvml-samples,estimate") == "estimated"
    assert basis("sim") == "simulated"


@pytest.mark.slow
def test_waiting_rule_writes_the_tables_from_a_tiny_input(tmp_path, env_path):
    """Rule `waiting` (rules/attribute.smk) on a one-cell matrix: the phases table and the cell's
    trace + meta.json in, the four waiting tables out, the context floor read from the trace."""
    import json
    import os
    import subprocess
    import sys

    import yaml

    repo = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((repo / "config/config.yaml").read_text())
    cfg["execution"].update(workloads=["qwen"], storage=["shared"], checkpoint=["on"], repeats=1)
    cfg.setdefault("analysis", {})["waiting"] = {"jobs_per_year": 3600}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = tmp_path / cfg["results_dir"]
    cell = res / "runs/qwen/shared/ckpt-on/r1"
    cell.mkdir(parents=True)
    rows = ["t_ns,host,device,metric,value,source"]
    for i in range(300):  # 1 s bare idle (80 W), then 5 s with a context at 120 W
        t, held = 10**18 + i * 20_000_000, i >= 50
        rows.append(f"{t},h,gpu0,power_w,{120.0 if held else 80.0},nvml-samples")
        if i % 25 == 0:
            rows.append(f"{t},h,gpu0,mem_used_b,{3e9 if held else 5e8},nvml-poll")
    (cell / "trace.csv").write_text("\n".join(rows) + "\n")
    (cell / "meta.json").write_text(json.dumps({
        "run_id": "r1", "idle_baseline": {"start_ns": 10**18, "end_ns": 10**18 + 10**9}}))
    (res / "tables").mkdir()
    phases().to_csv(res / "tables/phases.csv", index=False)
    env = {**env_path, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-m", "snakemake",
                          f"{cfg['results_dir']}/tables/waiting.csv",
                          "-s", str(repo / "Snakefile"), "-d", str(tmp_path), "--cores", "1",
                          "--allowed-rules", "waiting"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    w = pd.read_csv(res / "tables/waiting.csv").set_index(["device", "phase"])
    assert w.loc[("gpu0", "setup"), "context_idle_w"] == 120.0
    assert w.loc[("gpu0", "setup"), "above_floor_j"] == 25.0
    fac = pd.read_csv(res / "tables/waiting_facility.csv").set_index("device_kind")
    assert fac.loc["gpu", "waiting_kwh_per_year"] == pytest.approx(2225.0 * 3600 / 3.6e6)
    assert (res / "tables/waiting_whatif.csv").exists()
    assert (res / "tables/waiting_runs.csv").exists()


H200 = Path(__file__).resolve().parents[2] / "results/reference/h200"


@pytest.mark.parametrize("folder", ["workflow", "workflow-repeats", "workflow-waiting"])
def test_committed_h200_waiting_tables_are_recomputed_from_the_committed_cells(tmp_path, folder):
    """results/reference/h200/<folder>/tables/waiting*.csv are what `write_waiting_tables` makes
    of the committed phases table and cells (the command in README.md)."""
    root = H200 / folder
    metas = sorted(root.glob("runs/*/*/*/r*/meta.json"))
    write_waiting_tables(root / "tables/phases.csv", tmp_path, 10000,
                         traces=[m.with_name("trace.csv") for m in metas], metas=metas)
    for name in WAITING_FILES.values():
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / name),
                                      pd.read_csv(root / "tables" / name), check_exact=False,
                                      rtol=1e-9)


def test_h200_qwen_checkpoint_wait_by_hand():
    """Qwen3-1.7B checkpoint-on (gpu1 workflow): checkpoint ~21 s at ~124 W, against the context
    floor of ~122 W read from the trace, so almost all of it lies at the idle floor."""
    w = pd.read_csv(H200 / "workflow/tables/waiting.csv")
    ck = w[(w["run_id"] == "qwen-shared-ckpton-r1") & (w["device"] == "gpu0")
           & (w["phase"] == "checkpoint")].iloc[0]
    assert ck["time_s"] == pytest.approx(21.38, abs=0.01)
    assert ck["energy_j"] / ck["time_s"] == pytest.approx(123.7, abs=0.1)
    assert ck["floor_w"] == pytest.approx(122.4, abs=0.1)
    assert ck["at_floor_j"] == pytest.approx(ck["floor_w"] * ck["time_s"])


def test_h200_async_checkpoint_pauses_are_waiting_by_hand():
    """Qwen3-1.7B, checkpoint async (workflow-waiting): the staging copy (6.6 s) and the wait for
    the write (19.8 s) are waiting; the run's GPU waiting is the sum of its waiting phases in the
    cell's own phases.csv, and those two are most of it."""
    from wattlife.contracts import WAITING_PHASES

    root = H200 / "workflow-waiting"
    ph = pd.read_csv(root / "runs/qwen/local/ckpt-async/r1/phases.csv")
    gpu = ph[ph["device_kind"] == "gpu"].set_index("phase")
    runs = pd.read_csv(root / "tables/waiting_runs.csv")
    r = runs[(runs["run_id"] == "qwen-local-ckptasync-r1") & (runs["device_kind"] == "gpu")]
    waiting = float(r["waiting_j"].iloc[0])
    assert waiting == pytest.approx(gpu.loc[gpu.index.isin(WAITING_PHASES), "energy_j"].sum())
    assert gpu.loc["checkpoint_stage", "time_s"] == pytest.approx(6.56, abs=0.01)
    assert gpu.loc["checkpoint_wait", "time_s"] == pytest.approx(19.79, abs=0.01)
    pauses = gpu.loc[["checkpoint_stage", "checkpoint_wait"], "energy_j"].sum()
    assert pauses == pytest.approx(3378.9, abs=0.1) and pauses / waiting > 0.5


def test_fig9_is_drawn_from_the_waiting_tables(tmp_path):
    from wattlife.figures import draw_all

    for name, df in waiting_tables(phases(), floors(), 1000.0).items():
        df.to_csv(tmp_path / name, index=False)
    made = draw_all(tmp_path, tmp_path / "fig")
    assert {p.name for p in made} == {"fig9_waiting.png", "fig9_waiting.pdf"}
    assert (tmp_path / "fig" / "fig9_waiting.png").stat().st_size > 10_000


def test_a_phases_table_without_a_contract_column_is_named(tmp_path):
    from wattlife.contracts import ContractError

    phases().drop(columns=["source"]).to_csv(tmp_path / "phases.csv", index=False)
    with pytest.raises(ContractError, match=r"phases\.csv.*source"):
        write_waiting_tables(tmp_path / "phases.csv", tmp_path / "out", 1000.0)
