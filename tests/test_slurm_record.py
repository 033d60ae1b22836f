"""The job a run measured in (wattlife.slurm_job: meta.json's `slurm`, `wattlife check`'s line)
and each measuring job's energy beside Slurm's accounting (wattlife.slurm_energy), issue 40.

The recorded step environment and `scontrol show job -o` line (tests/data/slurm/) come from a step
on the CI Slurm (22.05.8) started as the executor plugin's jobstep starts one; so do the `sacct
-P` / `sstat -P` answers (tests/data/slurm/sacct-P.txt, sstat-P.txt): its nodes account energy
(acct_gather_energy/pm_counters on an emulated tree) and slurmdbd stores it (.ci/slurm-up.sh).
The live tests join sstat's energy of a running job and sacct's of an ended one."""

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wattlife import slurm_energy as E
from wattlife import slurm_job as J
from wattlife import slurm_orphans as O

REPO = Path(__file__).resolve().parents[1]

# -- the job a run measured in ---------------------------------------------------------------

SCONTROL = ("JobId=7 JobName=wattlife_aaaa-1 UserId=me(1000) Partition=gpuq NodeList=n[1-2] "
            "NumNodes=2 NumCPUs=224 MinMemoryNode=19284M "
            "Comment=rule_execute_wildcards_resnet_local_on_1_0123456789abcdef "
            "Command=(null)\n")


def test_meta_records_the_job_step_nodes_cpus_and_memory_from_scontrol():
    # the step's environment as the executor plugin leaves it: no SLURM_MEM_PER_NODE
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_CPUS_PER_NODE": "112(x2)",
           "SLURM_STEP_NODELIST": "n1"}
    rec = J.job_record(env, 112, "n1", J.parse_scontrol_job(SCONTROL), None)
    assert rec["mem_per_node_mb"] == 19284 and rec["mem_per_node_from"] == "scontrol MinMemoryNode"
    assert (rec["job_id"], rec["step_id"], rec["job_nodelist"], rec["nodes"]) == \
        ("7", "0", "n[1-2]", 2)
    assert (rec["cpus_allowed"], rec["job_cpus_on_node"]) == (112, 112)
    assert rec["comment"].startswith("rule_execute") and rec["mem_limit_mb"] is None
    assert J.mem_mb("2G") == 2048 and J.mem_mb("0") == 0 and J.mem_mb("x") is None
    with_env = J.job_record({**env, "SLURM_MEM_PER_NODE": "1000"}, 1, "n1", {}, 500)
    assert with_env["mem_per_node_from"] == "SLURM_MEM_PER_NODE"
    assert with_env["mem_limit_from"] == "cgroup memory.max"


def test_the_record_from_what_a_ci_cluster_step_saw():
    """Recorded on the CI Slurm (22.05.8) inside a step started as the executor plugin's jobstep
    starts one (every SLURM_* variable but the job id cleared): no SLURM_MEM_PER_NODE, and
    SLURM_JOB_NAME is the step's command; scontrol has the job's memory and name."""
    data = REPO / "tests/data/slurm"
    env = dict(ln.split("=", 1) for ln in (data / "step-env.txt").read_text().splitlines())
    assert "SLURM_MEM_PER_NODE" not in env and env["SLURM_JOB_NAME"] == "bash"
    job = J.parse_scontrol_job((data / "scontrol-show-job-o.txt").read_text())
    rec = J.job_record(env, 2, "wl1", job, None)
    assert (rec["job_id"], rec["step_id"], rec["job_name"], rec["partition"]) == \
        ("65", "0", "wattlife_test-rec", "debug")
    assert (rec["mem_per_node_mb"], rec["job_nodelist"], rec["nodes"]) == (3000, "wl1", 1)
    assert (rec["cpus_allowed"], rec["job_cpus_on_node"]) == (2, 2)
    assert rec["comment"] == "rule_execute_wildcards_resnet_local_on_1_0123456789abcdef"
    assert O.describe(rec["comment"]) == O.JobWhat("execute", "resnet/local/ckpt-on", "1")


@pytest.mark.slow
def test_a_run_in_a_slurm_step_writes_its_job_into_meta_json(tmp_path, env_path):
    """`wattlife run` inside a step (the recorded environment; `scontrol` answers the recorded
    job): meta.json's `slurm` has the job's memory per node, which used to be null."""
    import os

    data = REPO / "tests/data/slurm"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(f"#!/bin/bash\ncat {data / 'scontrol-show-job-o.txt'}\n")
    (bindir / "scontrol").chmod(0o755)
    env = dict(ln.split("=", 1) for ln in (data / "step-env.txt").read_text().splitlines())
    env["SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0"] = str(len(os.sched_getaffinity(0)))
    env = {**env_path, **env, "PATH": f"{bindir}{os.pathsep}{env_path['PATH']}"}
    run = subprocess.run(["wattlife", "run", "-o", str(tmp_path / "r"), "--gpu", "sim", "--cpu",
                          "estimate", "--idle-s", "0", "--", "true"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"mem_per_node_mb": 3000' in run.stderr  # the step line of run.log
    rec = json.loads((tmp_path / "r/meta.json").read_text())["slurm"]
    assert (rec["job_id"], rec["mem_per_node_mb"], rec["job_nodelist"]) == ("65", 3000, "wl1")
    check = subprocess.run(["wattlife", "check", str(tmp_path / "r")], env=env,
                           capture_output=True, text=True, timeout=120)
    assert "info: " in check.stdout and "Slurm job 65 step 0 on wl1" in check.stdout, check.stdout


def test_the_record_asks_scontrol_once_per_step(monkeypatch):
    """Asked at the step check, reused by meta.json at the end (a job killed at its time limit
    must not wait on scontrol there)."""
    calls: list[str] = []
    monkeypatch.setattr(J, "scontrol_job", lambda j: calls.append(j) or {"MinMemoryNode": "2G"})
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    first, again = J.current("n9"), J.current("n9")
    assert calls == ["4242"] and first == again and first["mem_per_node_mb"] == 2048
    monkeypatch.delenv("SLURM_JOB_ID")
    assert J.current("n9") is None


def test_the_cgroup_limit_is_read_from_the_process_cgroup(tmp_path):
    (tmp_path / "proc").write_text("0::/slurm/job7\n")
    lim = tmp_path / "cg/slurm/job7"
    lim.mkdir(parents=True)
    (lim / "memory.max").write_text(f"{19284 << 20}\n")
    assert J.cgroup_memory_limit_mb(str(tmp_path / "proc"), str(tmp_path / "cg")) == 19284
    (lim / "memory.max").write_text("max\n")
    assert J.cgroup_memory_limit_mb(str(tmp_path / "proc"), str(tmp_path / "cg")) is None


# -- energy beside Slurm's accounting ---------------------------------------------------------

# recorded on the CI cluster (docs/slurm-evidence.md says what each job and line is): `sacct -P -j
# 7,8,9,10 -o JobID,State,Elapsed,NodeList,ConsumedEnergyRaw` and, job 10 still running, `sstat
# -P -a -j 10 -o JobID,ConsumedEnergyRaw`
SACCT = (REPO / "tests/data/slurm/sacct-P.txt").read_text()
SSTAT = (REPO / "tests/data/slurm/sstat-P.txt").read_text()


def _run(folder: Path, job: str | None, energy: dict[str, float], step: str | None = None
         ) -> None:
    folder.mkdir(parents=True)
    meta = {"cell": {"workload": "resnet", "repeat": 1},
            "slurm": {"job_id": job, "step_id": step} if job else None}
    (folder / "meta.json").write_text(json.dumps(meta))
    rows = ["run_id,phase,device_kind,device,energy_j,source"]
    rows += [f"r,forward,{k},{k}0,{v},{'nvml' if k == 'gpu' else 'rapl'}"
             for k, v in energy.items()]
    (folder / "phases.csv").write_text("\n".join(rows) + "\n")


def test_each_jobs_energy_is_shown_beside_slurms_with_the_difference(tmp_path):
    """On sacct's recorded answer: job 7's job line (one srun step), job 8's measuring step (8.1,
    meta.json's step; its job line 2280 J sums 8.0 and 8.1), job 9 with no job-line energy (the
    batch step, the largest), job 10 still running (0 J: none)."""
    _run(tmp_path / "runs/resnet/local/ckpt-on/r1", "7", {"gpu": 600, "cpu": 200})
    _run(tmp_path / "runs/resnet/local/ckpt-on/r1/nodes/n2", "7", {"gpu": 1})  # a node's copy
    _run(tmp_path / "runs/resnet/local/ckpt-on/r2", "8", {"gpu": 1000, "dram": 50}, step="1")
    _run(tmp_path / "runs/resnet/local/ckpt-on/r3", "9", {"gpu": 500})
    _run(tmp_path / "runs/resnet/local/ckpt-on/r4", "10", {"gpu": 250})
    _run(tmp_path / "runs/resnet/local/ckpt-off/r1", None, {"gpu": 1})  # not a Slurm job
    ours = E.suite_energy(tmp_path)
    assert sorted(ours["job_id"]) == ["10", "7", "8", "9"]  # each run once: no node copy
    assert sorted(ours["cell"])[0] == "resnet/local/ckpt-on/r1"
    assert E.measuring_steps(ours) == {"8": "8.1"}
    slurm = E.parse_sacct(SACCT, measuring=E.measuring_steps(ours))
    t = E.energy_table(ours, slurm).set_index("job_id")
    assert t.loc["7", "slurm_energy_j"] == 1008 and t.loc["7", "suite_energy_j"] == 800
    assert t.loc["7", "difference_j"] == 208
    assert t.loc["7", "difference_pct"] == pytest.approx(100 * 208 / 1008)
    assert t.loc["7", "suite_source"] == "nvml+rapl (gpu+cpu, phases.csv)"
    assert t.loc["7", "slurm_source"] == \
        "sacct ConsumedEnergyRaw (job 7: the sum of its srun steps)"
    # the step the run measured in, not the job line that adds the steps up
    assert t.loc["8", "slurm_energy_j"] == 1532
    assert t.loc["8", "slurm_source"] == "sacct ConsumedEnergyRaw (step 8.1, the measuring step)"
    # no job-line energy: the largest step's, never the steps summed
    assert t.loc["9", "slurm_energy_j"] == 808 and "9.batch" in t.loc["9", "slurm_source"]
    assert t.loc["10", "slurm_source"].startswith("none: sacct reports no energy")
    assert set(t["difference_source"]) == {"derived: slurm_energy_j - suite_energy_j"}


def test_a_running_job_takes_sstats_energy_so_far(tmp_path):
    sacct, sstat = tmp_path / "sacct.txt", tmp_path / "sstat.txt"
    sacct.write_text(SACCT)
    sstat.write_text(SSTAT)
    tab = E.query_accounting(["7", "8", "9", "10"], str(sacct), str(sstat)).set_index("job_id")
    assert tab.loc["10", "slurm_energy_j"] == 2713  # no step named: the largest, the batch step
    assert tab.loc["10", "slurm_source"].startswith("sstat (running: so far)")
    assert tab.loc["7", "slurm_energy_j"] == 1008
    step = E.query_accounting(["10"], str(sacct), str(sstat), {"10": "10.0"}).set_index("job_id")
    assert step.loc["10", "slurm_energy_j"] == 2682
    assert "step 10.0, the measuring step" in step.loc["10", "slurm_source"]
    with pytest.raises(ValueError, match="ConsumedEnergyRaw"):
        E.parse_sacct("JobID|State\n7|RUNNING\n")


def test_the_energy_command_writes_the_table_with_sources(tmp_path, capsys):
    from wattlife.cli import build_parser

    _run(tmp_path / "res/runs/resnet/local/ckpt-on/r1", "8", {"gpu": 1000, "cpu": 300}, step="1")
    (tmp_path / "sacct.txt").write_text(SACCT)
    a = build_parser().parse_args(["slurm-energy", str(tmp_path / "res"), "--sacct",
                                   str(tmp_path / "sacct.txt")])
    assert a.fn(a) == 0
    out = capsys.readouterr().out
    assert "1532" in out and "1300" in out and "232" in out
    table = (tmp_path / "res/tables/slurm_energy.csv").read_text().splitlines()[0].split(",")
    assert {"suite_source", "slurm_source", "difference_source", "slurm_step"} <= set(table)


def test_check_says_the_slurm_step_and_warns_of_a_short_one():
    from wattlife.check.outputs import slurm_step

    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_JOB_CPUS_PER_NODE": "112(x2)"}
    rec = J.job_record(env, 112, "n1", J.parse_scontrol_job(SCONTROL), None)
    (info,) = slurm_step(rec, "meta.json")
    assert info.severity == "info" and info.text() == (
        "info: meta.json: Slurm job 7 step 0 on n[1-2] (this node n1): 112 of the job's 112 "
        "CPUs on the node, 19284 MB per node (scontrol MinMemoryNode), enforced limit none "
        "read [slurm.step]")
    short = slurm_step(J.job_record(env, 1, "n1", {}, None), "meta.json")
    assert [x.code for x in short] == ["slurm.step", "slurm.step-cpus", "slurm.memory-unknown"]
    assert slurm_step(None, "meta.json") == []  # not a Slurm run


# -- on the CI Slurm (WATTLIFE_TEST_SLURM=1; .ci/run starts it) --------------------------------


@pytest.mark.slurm
@pytest.mark.slow
def test_live_a_plugin_like_step_records_its_jobs_memory(tmp_path):
    """meta.json's memory per node was always null: the executor plugin's step clears every
    SLURM_* variable but the job id before its srun, so SLURM_MEM_PER_NODE is absent there."""
    import sys

    from conftest import slurm_test_partition

    part = slurm_test_partition()
    out = subprocess.run(["sinfo", "-h", "-N", "-p", part, "-o", "%m"], capture_output=True,
                         text=True).stdout.split()
    mem = min(int(m.rstrip("+")) for m in out) // 2
    probe = (f"{sys.executable} -c 'import json; from wattlife import slurm_job; "
             "print(\"REC\", json.dumps(slurm_job.current()))'")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nenv -i PATH=\"$PATH\" HOME=\"$HOME\" "
                      f"PYTHONPATH={REPO / 'src'} SLURM_JOB_ID=\"$SLURM_JOB_ID\" "
                      f"srun -n1 --cpu-bind=q {probe}\n")
    log = tmp_path / "job.out"
    sub = subprocess.run(["sbatch", "--wait", "-p", part, "-N1", "--mem", str(mem), "-J",
                          "wattlife_live-probe", "-o", str(log), str(script)],
                         capture_output=True, text=True, timeout=300)
    text = log.read_text() if log.exists() else ""
    assert sub.returncode == 0, sub.stderr + text
    rec = json.loads(next(ln for ln in text.splitlines() if ln.startswith("REC ")).split(" ", 1)[1])
    print("a plugin-like step recorded:", rec)
    assert rec["mem_per_node_mb"] == mem and rec["mem_per_node_from"] == "scontrol MinMemoryNode"
    assert rec["job_name"] == "wattlife_live-probe" and rec["step_id"] == "0"
    assert rec["nodes"] == 1 and rec["cpus_allowed"] >= 1


@given(st.integers(0, 10**9), st.sampled_from(["", "M", "G"]))
def test_memory_values_read_in_mb(n, unit):
    assert J.mem_mb(f"{n}{unit}") == n * {"": 1, "M": 1, "G": 1024}[unit]


@pytest.mark.slurm
@pytest.mark.slow
def test_live_slurm_energy_joins_sstats_energy_of_a_running_job(tmp_path):
    """On the CI Slurm, whose nodes account energy through acct_gather_energy/pm_counters
    (.ci/slurm-up.sh: an emulated /sys/cray/pm_counters per node, 150 / 350 W alternating each
    second; no accounting storage, so sacct answers nothing): a job measured by `wattlife run`
    that still runs is joined with sstat's ConsumedEnergy so far, beside the suite's, with the
    difference. Before: `slurm-energy` said only that sacct failed."""
    import os
    import sys
    import time

    from conftest import slurm_test_partition

    res = tmp_path / "res"
    run = res / "runs/resnet/shared/ckpt-off/r1"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\nset -e\n"
        f"srun -n1 {Path(sys.executable).parent}/wattlife run -o {run} --gpu sim --cpu estimate"
        " --idle-s 0 -- sleep 3\n"
        f"touch {tmp_path}/measured\nsleep 120\n")
    t0 = time.monotonic()
    sub = subprocess.run(["sbatch", "--parsable", "-p", slurm_test_partition(), "-N1", "-w", "wl1",
                          "-J", "wattlife_live-energy", "-o", str(tmp_path / "job.out"),
                          str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        for _ in range(600):
            if (tmp_path / "measured").exists():
                break
            time.sleep(0.2)
        assert (tmp_path / "measured").exists(), (tmp_path / "job.out").read_text()
        att = subprocess.run([Path(sys.executable).parent / "wattlife", "attribute", str(run)],
                             capture_output=True, text=True, timeout=300)
        assert att.returncode == 0, att.stderr[-2000:]
        time.sleep(2)  # the plugin's next reading (AcctGatherNodeFreq=1)
        t = E.energy_table(E.suite_energy(res), E.query_accounting([job])).set_index("job_id")
        dt = time.monotonic() - t0
        print("slurm-energy, live:", t.loc[job].to_dict())
        row = t.loc[job]
        assert row["slurm_source"].startswith("sstat (running: so far) ConsumedEnergyRaw")
        assert row["slurm_state"] == "RUNNING" and row["suite_energy_j"] > 0
        # the emulated node draws 150-350 W: the job's steps so far, at most since it started
        assert 0 < row["slurm_energy_j"] <= 350 * dt
        assert row["difference_j"] == row["slurm_energy_j"] - row["suite_energy_j"]
        if "accounting_storage/slurmdbd" in subprocess.run(
                ["scontrol", "show", "config"], capture_output=True, text=True).stdout:
            # with storage: the measuring step (ended, the job still running) is sacct's, final
            steps = E.measuring_steps(E.suite_energy(res))
            assert steps == {job: f"{job}.0"}
            mine = E.query_accounting([job], measuring=steps).set_index("job_id").loc[job]
            print("the measuring step, ended:", mine.to_dict())
            assert mine["slurm_source"] == \
                f"sacct ConsumedEnergyRaw (step {job}.0, the measuring step)"
            assert mine["slurm_state"] == "RUNNING" and 0 < mine["slurm_energy_j"] <= 350 * dt
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=60)


def _accounting_storage_or_skip() -> None:
    """Go on where the cluster stores accounting (slurmdbd); skip, saying why, where the CI
    script could not start it (/run/wattlife-slurmdb/failed) or on another cluster without it;
    fail on the CI cluster (ClusterName=wattlife) when it has none and did not say why."""
    import re

    conf = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                          timeout=60).stdout
    if re.search(r"AccountingStorageType\s*=\s*accounting_storage/slurmdbd", conf):
        return
    why = Path("/run/wattlife-slurmdb/failed")
    if why.exists():
        pytest.skip(f"no accounting storage: .ci/slurm-up.sh could not start it: "
                    f"{why.read_text().strip()}")
    if not re.search(r"ClusterName\s*=\s*wattlife\b", conf):
        pytest.skip("this cluster has no accounting storage (sacct keeps no ended job)")
    pytest.fail("the CI cluster (.ci/slurm-up.sh) has no accounting storage and did not say why")


@pytest.mark.slurm
@pytest.mark.slow
def test_live_slurm_energy_joins_saccts_energy_of_an_ended_job(tmp_path):
    """On the CI Slurm with accounting storage (.ci/slurm-up.sh: MariaDB, slurmdbd) and node
    energy (acct_gather_energy/pm_counters, emulated: 150 / 350 W alternating each second): a job
    measured by `wattlife run` ENDS, and `wattlife slurm-energy` joins sacct's ConsumedEnergyRaw
    of the step the run measured in (meta.json's step) beside the suite's, with the difference.
    Before: sacct said "Slurm accounting storage is disabled"; the join was shown on hand-written
    sacct text only."""
    import os
    import sys
    import time

    import pandas as pd

    from conftest import slurm_test_partition

    _accounting_storage_or_skip()
    res = tmp_path / "res"
    run = res / "runs/resnet/shared/ckpt-off/r1"
    wattlife = Path(sys.executable).parent / "wattlife"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nset -e\n"
                      f"srun -n1 {wattlife} run -o {run} --gpu sim --cpu estimate --idle-s 0"
                      " -- sleep 3\n")
    t0 = time.monotonic()
    sub = subprocess.run(["sbatch", "--parsable", "--wait", "-p", slurm_test_partition(), "-N1",
                          "-w", "wl1", "-J", "wattlife_live-ended", "-o", str(tmp_path / "job.out"),
                          str(script)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    dt = time.monotonic() - t0
    assert sub.returncode == 0, sub.stderr + (tmp_path / "job.out").read_text()
    job = sub.stdout.strip().split(";")[0]
    ask = ["sacct", "-P", "-j", job, "-o", E.SACCT_FIELDS]
    for _ in range(120):  # the controller hands the ended job to slurmdbd
        text = subprocess.run(ask, capture_output=True, text=True, timeout=60).stdout
        if f"\n{job}.0|COMPLETED" in text and f"\n{job}|COMPLETED" in text:
            break
        time.sleep(0.5)
    print(f"recorded `{' '.join(ask)}`:\n{text}")
    att = subprocess.run([wattlife, "attribute", str(run)], capture_output=True, text=True,
                         timeout=300)
    assert att.returncode == 0, att.stderr[-2000:]
    cli = subprocess.run([wattlife, "slurm-energy", str(res)], capture_output=True, text=True,
                         timeout=300)
    print("wattlife slurm-energy:", cli.stdout, cli.stderr[-2000:], sep="\n")
    assert cli.returncode == 0, cli.stderr[-2000:]
    row = pd.read_csv(res / "tables/slurm_energy.csv", dtype={"job_id": str}).set_index(
        "job_id").loc[job]
    assert row["slurm_source"] == f"sacct ConsumedEnergyRaw (step {job}.0, the measuring step)"
    assert row["slurm_state"] == "COMPLETED" and row["suite_energy_j"] > 0
    # the emulated node draws 150-350 W; the step ran `sleep 3` at least, the job at most dt
    assert 150 * 2 <= row["slurm_energy_j"] <= 350 * dt
    assert row["difference_j"] == pytest.approx(row["slurm_energy_j"] - row["suite_energy_j"])
