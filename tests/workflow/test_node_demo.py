"""config/node-demo.yaml end to end (issue 45): the CPU demo with an EMULATED node source, run as
committed (only its folders moved into a tmp dir). Every measuring job's node rows say
`pm_counters_emulated`; node_rest is node minus its parts, phase by phase and per transfer, with
the worst-case interval around it; no emulator outlives its run."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import copy_workflow
from wattlife.devices.node_sources import EMULATED_SOURCE

REPO = Path(__file__).resolve().parents[2]
PARTS = ("gpu", "cpu", "dram")


def _conserved(rows: pd.DataFrame, key: list[str]) -> int:
    """node_rest = node - parts (energy), lo = node_lo - parts_hi, hi = node_hi - parts_lo, for
    every group of `key`; how many groups had a node."""
    checked = 0
    for _, g in rows.groupby(key):
        kind = g.set_index("device_kind")
        if "node" not in kind.index:
            continue
        parts = g[g["device_kind"].isin(PARTS)]
        rest, node = kind.loc["node_rest"], kind.loc["node"]
        assert np.isclose(rest["energy_j"], node["energy_j"] - parts["energy_j"].sum(),
                          rtol=1e-9, atol=1e-6), g
        assert np.isclose(rest["energy_lo_j"], node["energy_lo_j"] - parts["energy_hi_j"].sum(),
                          rtol=1e-9, atol=1e-6), g
        assert np.isclose(rest["energy_hi_j"], node["energy_hi_j"] - parts["energy_lo_j"].sum(),
                          rtol=1e-9, atol=1e-6), g
        assert rest["energy_lo_j"] <= rest["energy_j"] <= rest["energy_hi_j"], g
        checked += 1
    return checked


@pytest.mark.slow
def test_the_node_demo_preset_runs_and_its_node_rest_conserves_energy(tmp_path, env_path):
    wf = copy_workflow(tmp_path / "workflow")
    cfg = yaml.safe_load((REPO / "config/node-demo.yaml").read_text())
    cfg["results_dir"] = str(tmp_path / "res")
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")}
    conf = tmp_path / "node-demo.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    out = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                          "--configfile", str(conf)], cwd=wf, env=env_path, capture_output=True,
                         text=True, timeout=1700)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = tmp_path / "res"
    ph = pd.read_csv(res / "tables" / "phases.csv")
    node = ph[ph["device_kind"] == "node"]
    assert len(node) and set(node["source"]) == {EMULATED_SOURCE}
    assert set(ph.loc[ph["device_kind"] == "node_rest", "phase"]) == set(node["phase"])
    assert _conserved(ph, ["run_id", "phase"]) == len(node)
    tr = pd.read_csv(res / "tables" / "downloads.csv")
    assert set(tr["node_source"]) == {EMULATED_SOURCE}
    assert set(tr.loc[tr["device_kind"] == "node", "direction"]) == {"download", "upload"}
    assert _conserved(tr, ["artefact", "direction"]) == 3
    assert (tr.loc[tr["device_kind"] == "node_rest", "energy_j"] > 0).all()  # the base at least
    assert (res / "figures" / "fig1_phase_energy_time.png").stat().st_size > 10_000
    meta = json.loads(next(res.glob("runs/*/*/*/*/meta.json")).read_text())
    (info,) = [b for b in meta["sampler"]["backends"] if "node" in b.get("devices", [])]
    assert info["source"] == EMULATED_SOURCE and info["emulator"].startswith("EMULATED")
    assert any("NOT MEASURED (source=pm_counters_emulated)" in n for n in meta["sensor_notes"])
    assert not Path(f"/proc/{info['emulator_pid']}").exists() or _zombie(info["emulator_pid"])
    assert not Path(info["root"]).exists()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("part", ["", "transfers/gen-dataset-s", "transfers/gen-model-s",
                                  "transfers/upload"], ids=lambda p: p or "cell")
def test_the_committed_node_demo_re_attributes_to_its_phases(tmp_path, part):
    """Every number of results/reference/cpu/node-demo's table comes from its raw files: today's
    attribution (the workflow's options) of each trace and events gives its phases.csv, and
    `wattlife check` finds no error there."""
    from wattlife.attribution import attribute_files
    from wattlife.check import ERROR, check_run

    run = REPO / "results" / "reference" / "cpu" / "node-demo" / part
    assert [f for f in check_run(run) if f.severity == ERROR] == []
    attribute_files(run / "trace.csv", run / "events.csv", tmp_path / "phases.csv",
                    idle_split=True)
    committed = pd.read_csv(run / "phases.csv")
    made = pd.read_csv(tmp_path / "phases.csv")[list(committed.columns)]
    pd.testing.assert_frame_equal(made, committed, check_exact=False, rtol=1e-9, atol=1e-9)


def test_the_committed_node_demo_cell_is_emulated_and_conserves_energy():
    """results/reference/cpu/node-demo (the preset's cell, committed): its node rows and its
    transfers' say `pm_counters_emulated`, never a measured source, and node_rest is node minus
    its parts with the worst-case interval, in every phase and transfer."""
    ref = REPO / "results" / "reference" / "cpu" / "node-demo"
    ph = pd.read_csv(ref / "phases.csv")
    node = ph[ph["device_kind"] == "node"]
    assert set(node["source"]) == {EMULATED_SOURCE}
    assert _conserved(ph, ["run_id", "phase"]) == len(node) > 10
    tr = pd.read_csv(ref / "downloads.csv")
    assert set(tr["node_source"]) == {EMULATED_SOURCE}
    assert _conserved(tr, ["artefact", "direction"]) == 3
    meta = json.loads((ref / "meta.json").read_text())
    assert any("NOT MEASURED (source=pm_counters_emulated)" in n for n in meta["sensor_notes"])
