"""The job slices (wattlife.jobs), the launch builder (wattlife.launch) and the assembly of a
cell's curve from its caps: pure functions, no Snakemake."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wattlife import jobs as J
from wattlife.config import SamplerSettings, load_config, validate_config
from wattlife.launch import LaunchSpec, build_command, run_files, train_args
from wattlife.run.node import merge_meta, run_node
from wattlife.sweeps.real import assemble_curve

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def demo():
    return load_config(REPO / "config/config.yaml")


def _reordered(obj):
    if isinstance(obj, dict):
        return {k: _reordered(obj[k]) for k in reversed(list(obj))}
    return obj


def test_a_cell_slice_holds_its_workload_only_and_ignores_key_order(demo):
    s = J.cell_slice(demo, "resnet", "local", "on", 1)
    assert set(s["workloads"]) == {"resnet"} and "analysis" not in s and "powercap" not in s
    assert J.canonical(s) == J.canonical(J.cell_slice(_reordered(demo), "resnet", "local", "on", 1))
    other = json.loads(json.dumps(demo))
    other["analysis"]["pfi_mc"] += 1
    other["workloads"]["qwen"]["lr"] *= 2
    assert J.canonical(J.cell_slice(other, "resnet", "local", "on", 1)) == J.canonical(s)
    other["workloads"]["resnet"]["lr"] *= 2
    assert J.canonical(J.cell_slice(other, "resnet", "local", "on", 1)) != J.canonical(s)
    validate_config(s)  # a slice is a valid config without the top-level required keys


def test_transfer_slices_carry_the_allowed_concurrency(demo):
    one, three = (J.download_slice(demo, "gen-dataset-s", n) for n in (1, 3))
    assert one["prepare"]["catalogue"][0]["name"] == "gen-dataset-s"
    assert one["transfers_at_once"] == 1
    assert J.canonical(one) != J.canonical(three)
    assert "analysis" not in J.upload_slice(demo, 1)
    validate_config(one)


def test_pfi_cap_slice_excludes_the_cells_cap_list():
    cfg = load_config(REPO / "config/pfi.yaml")
    name = next(iter(cfg["pfi_matrix"]["cells"]))
    a = J.pfi_cap_slice(cfg, name, 300.0)
    assert list(a["pfi_matrix"]["cells"]) == [name] and a["pfi_cap_w"] == 300.0
    cfg["analysis"]["pfi_mc"] = 17
    assert J.canonical(J.pfi_cap_slice(cfg, name, 300.0)) == J.canonical(a)
    validate_config(a)


def test_caps_and_nodes_of_pfi_cells():
    cfg = load_config(REPO / "config/pfi.yaml")
    cells = cfg["pfi_matrix"]["cells"]
    by_gpus = {c["gpus"]: n for n, c in cells.items()}
    assert J.cell_caps(cfg, by_gpus[8]) == [200, 300, 400, 500, 600, 700]
    assert J.cell_caps(cfg, by_gpus[16]) == J.cell_caps(cfg, by_gpus[32]) == [200, 500, 600, 700]
    cells[by_gpus[8]]["caps"] = [650, 250]
    assert J.cell_caps(cfg, by_gpus[8]) == [250, 650]
    assert J.nodes_for(8, 8) == (1, 8) and J.nodes_for(16, 8) == (2, 8)
    assert J.nodes_for(32, 8) == (4, 8)
    assert J.nodes_for(4, 8) == (1, 4) and J.nodes_for(12, 8) == (2, 6)
    with pytest.raises(ValueError, match="split evenly"):
        J.nodes_for(20, 8)


def test_transfer_runtime_grows_with_size():
    assert J.transfer_runtime_min(1e6) == 31
    # 513 GB at 100 Mbit/s is 11.4 h; with the 1.5 margin and the 30 min floor: 1056 min
    assert J.transfer_runtime_min(513e9) == 30 + int(np.ceil(1.5 * 513e9 * 8 / 100e6 / 60))
    with pytest.raises(ValueError, match="min_rate_mbps"):
        J.transfer_runtime_min(1e9, 0)


def test_one_node_command_wraps_the_launcher_under_the_sampler():
    spec = LaunchSpec(launcher="torchrun --nproc-per-node 4", gpus_per_node=4)
    cmd = build_command(spec, config="c.json", run_dir="R", run_id="x", cell={"w": "q"},
                        inner=train_args("c.json", "q", "local", "on", "R/work"))
    assert cmd.startswith("wattlife run --config c.json --trace R/trace.csv")
    assert "-- torchrun --nproc-per-node 4 -m wattlife.cli train --config c.json" in cmd
    assert "'{\"w\": \"q\"}'" in cmd and "srun" not in cmd
    assert run_files("R", spec)["ranks"] == [f"R/events.rank{r}.csv" for r in (1, 2, 3)]
    plain = build_command(LaunchSpec(), config="c", run_dir="R", run_id="x", cell={},
                          inner=["train"], in_slurm=False)
    assert "-- wattlife train" in plain and plain.startswith("wattlife run")


def test_one_node_command_in_a_slurm_job_runs_in_a_whole_node_step_of_its_own():
    """Inside a Slurm job the one-node command leaves the executor's 1-CPU step: srun --whole
    (all of the job's CPUs, memory and GPUs on the node), exec'd so signals reach it."""
    cmd = build_command(LaunchSpec(), config="c", run_dir="R", run_id="x", cell={},
                        inner=["train"], in_slurm=True)
    head, _, rest = cmd.partition("exec srun ")
    assert head.startswith("for v in $(compgen -e") and head.endswith("done; ")
    assert rest.startswith('--jobid="$SLURM_JOB_ID" --overlap --whole --nodes=1 --ntasks=1 ')
    assert "--cpu-bind=none wattlife run --config c --trace R/trace.csv" in rest


def test_multi_node_command_caps_and_samples_every_node():
    spec = LaunchSpec(nodes=4, gpus_per_node=8, cap_w=500, powercap_backend="nvidia-smi",
                      allow_real=True)
    cmd = build_command(spec, config="c.json", run_dir="R", run_id="x", cell={}, inner=["train"])
    # one task per node of the job's allocation (the executor's step variables cleared, the job
    # named), each holding all of its node (--whole), unbound (not the step's one CPU)
    assert ('for v in $(compgen -e | grep "^SLURM_" | grep -vx -e SLURM_JOB_ID -e SLURM_CONF);'
            ' do unset "$v"; done; srun --jobid="$SLURM_JOB_ID" --overlap --whole --nodes=4'
            " --ntasks=4 --ntasks-per-node=1 --kill-on-bad-exit=1 --cpu-bind=none") in cmd
    assert 'nodelist=$(squeue -h -j "$SLURM_JOB_ID" -o %N)' in cmd  # the job's, not the step's
    # each node's launch-node sets the cap on its own GPUs and runs its own sampler and torchrun
    assert "wattlife launch-node --config c.json --node-dir R/nodes" in cmd
    assert "--cap 500 --powercap-backend nvidia-smi --state-dir R --allow-real" in cmd
    assert ("torchrun --nnodes=4 --nproc-per-node=8 --rdzv-backend=c10d"
            " --rdzv-endpoint=\"$head:29500\"") in cmd
    assert "wattlife merge-nodes --traces R/nodes/*/trace.csv" in cmd
    assert "launch-node --merge-meta R/nodes --meta R/meta.json" in cmd
    assert set(run_files("R", spec)) == {"trace", "events", "meta", "nodes", "clock"}


def test_run_node_caps_the_simulated_gpu_and_restores_it(tmp_path):
    code = "import os; print(os.environ['WATTLIFE_EVENTS'])"
    sampler = SamplerSettings.from_dict({"gpu": "sim", "cpu": "none", "interval_ms": 20,
                                         "idle_baseline_s": 0})
    rc = run_node([sys.executable, "-c", code], settings=sampler,
                  run_id="n", cell={"c": 1}, node_dir=str(tmp_path / "nodes"), cap_w=300)
    assert rc == 0
    (host,) = [p for p in (tmp_path / "nodes").iterdir()]
    meta = json.loads((host / "meta.json").read_text())
    assert meta["cell"] == {"c": 1, "cap_w": 300}
    assert meta["sampler"]["settings"]["sim_gpu"]["cap_w"] == 300
    assert not list(host.glob("powercap-state-*.json"))  # restored: no state left behind
    doc = merge_meta(tmp_path / "nodes", tmp_path / "meta.json")
    assert list(doc["nodes"]) == [host.name]


def test_a_cells_curve_shows_failed_and_missing_caps():
    def point(cap, status="ok", thr=100.0):
        return pd.DataFrame([{"job": "j", "gpu_model": "G", "n_gpus": 8, "cap_w": cap,
                              "throughput": thr,
                              "throughput_unit": "tokens/s", "power_w": cap * 8, "status": status,
                              "dram_active": 0.3}])

    df = assemble_curve([point(700.0), point(300.0, "failed: boom", np.nan)], job="j",
                        caps=[300, 500, 700])
    assert list(df["cap_w"]) == [300, 500, 700]
    assert list(df["status"]) == ["failed: boom", "missing", "ok"]
    assert df["throughput"].isna().tolist() == [True, True, False]
    assert df["dram_active"].notna().tolist() == [False, False, True]  # the uncapped run's only


def test_aggregate_curves_cli_writes_the_status(tmp_path):
    from wattlife.cli import main

    p = tmp_path / "cap-700.csv"
    pd.DataFrame([{"job": "j", "gpu_model": "G", "n_gpus": 8, "cap_w": 700, "throughput": 1.0,
                   "throughput_unit": "t/s", "power_w": 5600.0, "source": "sim"}]
                 ).to_csv(p, index=False)
    out = tmp_path / "curves.csv"
    assert main(["aggregate-curves", str(p), str(tmp_path / "cap-200.csv"), "--job", "j",
                 "--caps", "200,700",
                 "-o", str(out)]) == 0
    df = pd.read_csv(out)
    assert dict(zip(df["cap_w"], df["status"], strict=True)) == {200: "missing", 700: "ok"}


def test_slice_written_by_a_rule_loads_as_a_config(tmp_path, demo):
    p = tmp_path / "config.json"
    p.write_text(J.canonical(J.cell_slice(demo, "qwen", "shared", "off", 2)))
    cfg = load_config(p)
    assert cfg["workloads"]["qwen"]["kind"] == "causal_lm" and cfg["storage"] == demo["storage"]
    bad = tmp_path / "bad.json"
    bad.write_text(yaml.safe_dump({"slice": "x", "sampler": {"gpu": "warp"}}))
    with pytest.raises(ValueError, match="sampler.gpu"):
        load_config(bad)


def test_transfers_overlapping_each_other_are_counted():
    from wattlife.analysis.downloads import download_rows, overlapping

    # [0,10) and [5,15) overlap; [20,30) is alone; the last window is unknown
    got = overlapping(np.array([0, 5, 20, np.nan]), np.array([10, 15, 30, np.nan]))
    assert got[:3].tolist() == [1, 1, 0] and np.isnan(got[3])
    ph = pd.DataFrame([{"phase": "download_dataset", "device_kind": "cpu", "energy_j": 1.0,
                        "energy_lo_j": 0.9, "energy_hi_j": 1.1, "time_s": 1.0,
                        "method": "integrate", "source": "estimate"}])
    recs = [{"name": n, "bytes": 1, "start_ns": a, "end_ns": b, "transfers_at_once": 1}
            for n, a, b in (("x", 0, 10), ("y", 5, 15))]
    rows = download_rows(recs, [ph, ph])
    assert rows["overlapping_transfers"].tolist() == [1, 1]
    assert rows["transfers_at_once"].tolist() == [1, 1]


def test_a_multi_node_meta_counts_every_nodes_rows(tmp_path):
    """The merged trace holds every node's rows: meta.json says so (check compares them)."""
    from wattlife.run.node import merge_meta

    for host, rows, rc in (("wl1", 3797, 0), ("wl2", 3685, 0)):
        (tmp_path / "nodes" / host).mkdir(parents=True)
        (tmp_path / "nodes" / host / "meta.json").write_text(json.dumps(
            {"host": host, "exit_code": rc, "sampler": {"rows": rows, "interval_s": 0.02}}))
    doc = merge_meta(tmp_path / "nodes", tmp_path / "meta.json")
    assert doc["sampler"] == {"rows": 7482, "interval_s": 0.02} and doc["host"] == "wl1"
    assert doc["nodes"]["wl2"]["sampler"]["rows"] == 3685
