"""The user's side of Slurm (issue 40): site values checked before anything is submitted
(wattlife.slurm_preflight), a results folder's orphaned jobs (wattlife.slurm_orphans), the job a
run measured in (wattlife.slurm_job: meta.json's `slurm`) and each job's energy beside Slurm's
accounting (wattlife.slurm_energy).

No Slurm here: the Slurm commands' answers are texts in their documented formats (the CI cluster
has no accounting, so sacct's ConsumedEnergy can not be recorded there; the sacct text below is
written in `sacct -P`'s format, not recorded from a cluster with an energy plugin)."""

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from wattlife import slurm_energy as E
from wattlife import slurm_job as J
from wattlife import slurm_orphans as O
from wattlife import slurm_preflight as P

REPO = Path(__file__).resolve().parents[1]
# `sinfo -h -o '%R|%f'`: partitions and their node features (one line per node group)
SINFO = "gpuq|h200,ib\ngpuq|h200\nh100q|h100,ib\ncpuq|(null)\n"
# `sacctmgr -n -P show associations user=me format=Account`
SACCTMGR = "proj1\nproj2\n"


def _site(**kw):
    base = dict(account=None, gpu_partition="gpuq", cpu_partition=None, partitions=None,
                constraints=None, cpus_per_task=None, mem_mb=None)
    return SimpleNamespace(**{**base, **kw})


def _prep(**kw):
    base = dict(download_on="login", upload_on="login", upload_to="loopback-put",
                upload_target=None)
    return SimpleNamespace(**{**base, **kw})


def _answers(table: dict[str, tuple[int, str]]):
    """A `run` that answers each Slurm command (by its name) with (rc, stdout)."""
    def run(args, **_kw):
        rc, out = table.get(args[0], (1, ""))
        return subprocess.CompletedProcess(args, rc, stdout=out, stderr="")
    return run


FACTS = P.query_facts(_answers({"sinfo": (0, SINFO), "sacctmgr": (0, SACCTMGR)}), user="me")


def test_the_clusters_partitions_features_and_accounts_are_read():
    assert FACTS.partitions == {"gpuq": {"h200", "ib"}, "h100q": {"h100", "ib"},
                                "cpuq": frozenset()}
    assert FACTS.accounts == {"proj1", "proj2"}
    none = P.query_facts(_answers({}), user="me")  # no Slurm here
    assert none.partitions is None and none.accounts is None


def test_an_unknown_partition_feature_or_account_is_one_line_naming_the_key():
    bad = _site(gpu_partition="gpu", account="my-account", partitions={"h100": "h100q"},
                constraints={"h100": "h100&nvl"})
    lines = P.site_problems(bad, _prep(download_on="cpu"), {}, FACTS)
    assert lines == [
        "config slurm.gpu_partition: 'gpu' is not a partition of this cluster (sinfo knows: "
        "cpuq, gpuq, h100q)",
        "config prepare.download_on: 'cpu' is not a partition of this cluster (sinfo knows: "
        "cpuq, gpuq, h100q)",
        "config slurm.constraints.h100: feature 'nvl' is on no node of partition 'h100q' "
        "(sinfo knows: h100, ib)",
        "config slurm.account: 'my-account' is not one of your Slurm accounts (sacctmgr "
        "knows: proj1, proj2)"]
    good = _site(account="PROJ1", partitions={"h100": "h100q"}, constraints={"h100": "h100"},
                 cpu_partition="cpuq")
    assert P.site_problems(good, _prep(download_on="cpuq"), {}, FACTS) == []


def test_a_placeholder_is_named_even_where_slurm_cannot_be_asked():
    no_acct = P.SiteFacts(FACTS.partitions, None)  # sacctmgr lists nothing: no accounting
    lines = P.site_problems(_site(account=P.PLACEHOLDER_ACCOUNT), _prep(), {}, no_acct)
    assert lines == ["config slurm.account: 'my-account' is config/site.yaml's placeholder: "
                     "give your account, or leave the key out"]
    assert P.site_problems(_site(account=P.PLACEHOLDER_ACCOUNT), _prep(), {}, None) == lines
    unknown = _site(gpu_partition="gpux", constraints={"h200": "h200"})  # said once, not twice
    assert len(P.site_problems(unknown, _prep(), {}, FACTS)) == 1
    note = P.unchecked_notes(_site(account="proj9"), no_acct)
    assert "not checked" in note[0] and "Both 'sacctmgr' and 'sshare'" in note[0]
    paths = P.path_problems(_prep(upload_to="copy", upload_target="/nonexistent-top/x/outbox"),
                            {"shared": "/nonexistent-top/project/wattlife", "local": "$TMPDIR/w"})
    assert [ln.split(":")[0] for ln in paths] == ["config storage.shared",
                                                  "config prepare.upload.target"]
    assert "/nonexistent-top does not" in paths[0]
    assert P.path_problems(_prep(), {"shared": "/tmp/w", "local": "rel/x"}) == []
    # a Slurm run without sinfo's answer stops: nothing falls back to 1 CPU
    stop = P.start_problems(_site(), _prep(), {}, P.SiteFacts(None, None))
    assert stop == [P.NO_SINFO] and "1 CPU" in P.stop_message(stop)


def test_the_shipped_site_file_holds_the_placeholders_the_check_knows():
    site = yaml.safe_load((REPO / "config/site.yaml").read_text())
    assert site["slurm"]["account"] == P.PLACEHOLDER_ACCOUNT
    shared = site["storage"]["shared"]
    if Path("/", Path(shared).parts[1]).exists():
        pytest.skip(f"this machine has {Path(shared).parts[1]}: the shipped path may be real")
    assert P.path_problem("storage.shared", shared).startswith("config storage.shared: ")


@given(st.text(alphabet="ab1&|[]*,()", max_size=20))
def test_constraint_features_are_the_expressions_names(expr):
    names = P.constraint_features(expr)
    assert all(n and not set(n) & set("&|[](),") for n in names)


# -- orphans ----------------------------------------------------------------------------------

# `squeue -h --me -o '%i|%T|%j|%k|%M|%R'`: two runs of this results folder, one other
SQUEUE = (
    "101|RUNNING|wattlife_aaaa-1|rule_execute_wildcards_resnet_local_on_1_0123456789abcdef|"
    "12:03|n1\n"
    "102|PENDING|wattlife_aaaa-1|rule_execute_r2_wildcards_my_lm_shared_async_2_"
    "fedcba9876543210|0:00|(Priority)\n"
    "103|RUNNING|wattlife_bbbb-2|rule_pfi_cap_wildcards_qwen-8g_450|1:02:03|n[2-3]\n"
    "104|RUNNING|wattlife_other|rule_execute_wildcards_x_local_on_1_0123456789abcdef|1:00|n4\n"
    "105|RUNNING|someone_else|rule_x|1:00|n5\n")


def test_orphans_are_the_recorded_runs_jobs_only_each_said_as_its_cell(tmp_path):
    assert O.run_name_from_log("x\nSLURM run ID: wattlife_aaaa-1\ny") == "wattlife_aaaa-1"
    O.record_run(tmp_path, "wattlife_aaaa-1")
    O.record_run(tmp_path, "wattlife_bbbb-2")
    names = O.recorded_runs(tmp_path)
    assert names == ["wattlife_aaaa-1", "wattlife_bbbb-2"]
    jobs = O.parse_squeue(SQUEUE, names)
    assert [j.job_id for j in jobs] == ["101", "102", "103"]
    assert [j.job_id for j in O.parse_squeue(SQUEUE)] == ["101", "102", "103", "104"]  # --all
    table = O.job_table(jobs)
    assert table[1].split("\t") == ["101", "RUNNING", "12:03", "execute", "resnet/local/ckpt-on",
                                    "1", "n1"]
    assert table[2].split("\t")[3:6] == ["execute_r2", "my_lm/shared/ckpt-async", "2"]
    assert table[3].split("\t")[3:6] == ["pfi_cap", "pfi/qwen-8g at 450 W", "-"]


def test_wait_says_what_is_left_at_each_look():
    answers = iter([SQUEUE, SQUEUE.replace("101|RUNNING", "999|RUNNING"), ""])

    def run(args, **_kw):
        return subprocess.CompletedProcess(args, 0, stdout=next(answers), stderr="")
    said: list[str] = []
    O.wait_jobs(["wattlife_aaaa-1"], poll_s=5, run=run, say=said.append, sleep=lambda s: None,
                clock=iter([0.0, 60.0, 120.0, 180.0]).__next__)
    assert said[0].startswith("waiting for 2 job(s) (1 PENDING, 1 RUNNING; 101, 102)")
    assert "job 101 left the queue" in said
    assert said[-2:] == ["job 102 left the queue", "job 999 left the queue"]


def test_the_orphans_command_refuses_a_folder_without_recorded_runs(tmp_path, capsys):
    from wattlife.cli import build_parser

    a = build_parser().parse_args(["slurm-orphans", str(tmp_path)])
    with pytest.raises(ValueError, match="no Slurm run recorded.*--all"):
        a.fn(a)


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

# `sacct -P -j 7,8,9 -o JobID,State,Elapsed,NodeList,ConsumedEnergyRaw` (format as documented)
SACCT = ("JobID|State|Elapsed|NodeList|ConsumedEnergyRaw\n"
         "7|COMPLETED|00:10:00|n[1-2]|650000\n7.batch|COMPLETED|00:10:00|n1|300000\n"
         "7.0|COMPLETED|00:09:50|n[1-2]|640000\n"
         "8|COMPLETED|00:05:00|n3|\n8.batch|COMPLETED|00:05:00|n3|120000\n"
         "8.extern|COMPLETED|00:05:00|n3|125000\n"
         "9|RUNNING|00:01:00|n4|\n9.batch|RUNNING|00:01:00|n4|0\n")
SSTAT = "JobID|ConsumedEnergyRaw\n9.batch|31000\n9.0|30000\n"


def _run(folder: Path, job: str | None, energy: dict[str, float]) -> None:
    folder.mkdir(parents=True)
    meta = {"cell": {"workload": "resnet", "repeat": 1},
            "slurm": {"job_id": job} if job else None}
    (folder / "meta.json").write_text(json.dumps(meta))
    rows = ["run_id,phase,device_kind,device,energy_j,source"]
    rows += [f"r,forward,{k},{k}0,{v},{'nvml' if k == 'gpu' else 'rapl'}"
             for k, v in energy.items()]
    (folder / "phases.csv").write_text("\n".join(rows) + "\n")


def test_each_jobs_energy_is_shown_beside_slurms_with_the_difference(tmp_path):
    _run(tmp_path / "runs/resnet/local/ckpt-on/r1", "7", {"gpu": 500000, "cpu": 100000})
    _run(tmp_path / "runs/resnet/local/ckpt-on/r1/nodes/n2", "7", {"gpu": 1})  # a node's copy
    _run(tmp_path / "runs/resnet/local/ckpt-on/r2", "8", {"gpu": 100000, "dram": 5000})
    _run(tmp_path / "runs/resnet/local/ckpt-on/r3", "9", {"gpu": 25000})
    _run(tmp_path / "runs/resnet/local/ckpt-off/r1", None, {"gpu": 1})  # not a Slurm job
    ours = E.suite_energy(tmp_path)
    assert sorted(ours["job_id"]) == ["7", "8", "9"]  # each run once: no node copy, no non-Slurm
    assert sorted(ours["cell"])[0] == "resnet/local/ckpt-on/r1"
    slurm = E.parse_sacct(SACCT)
    t = E.energy_table(ours, slurm).set_index("job_id")
    assert t.loc["7", "slurm_energy_j"] == 650000 and t.loc["7", "suite_energy_j"] == 600000
    assert t.loc["7", "difference_j"] == 50000
    assert t.loc["7", "difference_pct"] == pytest.approx(100 * 50000 / 650000)
    assert t.loc["7", "suite_source"] == "nvml+rapl (gpu+cpu, phases.csv)"
    assert t.loc["7", "slurm_source"] == "sacct ConsumedEnergyRaw (job 7)"
    # no job-line energy: the largest step's, never the steps summed
    assert t.loc["8", "slurm_energy_j"] == 125000 and "8.extern" in t.loc["8", "slurm_source"]
    assert t.loc["9", "slurm_source"].startswith("none: sacct reports no energy")
    assert set(t["difference_source"]) == {"derived: slurm_energy_j - suite_energy_j"}


def test_a_running_job_takes_sstats_energy_so_far(tmp_path):
    sacct, sstat = tmp_path / "sacct.txt", tmp_path / "sstat.txt"
    sacct.write_text(SACCT)
    sstat.write_text(SSTAT)
    tab = E.query_accounting(["7", "8", "9"], str(sacct), str(sstat)).set_index("job_id")
    assert tab.loc["9", "slurm_energy_j"] == 31000
    assert tab.loc["9", "slurm_source"].startswith("sstat (running: so far)")
    assert tab.loc["7", "slurm_energy_j"] == 650000
    with pytest.raises(ValueError, match="ConsumedEnergyRaw"):
        E.parse_sacct("JobID|State\n7|RUNNING\n")


def test_the_energy_command_writes_the_table_with_sources(tmp_path, capsys):
    from wattlife.cli import build_parser

    _run(tmp_path / "res/runs/resnet/local/ckpt-on/r1", "7", {"gpu": 500000, "cpu": 100000})
    (tmp_path / "sacct.txt").write_text(SACCT)
    a = build_parser().parse_args(["slurm-energy", str(tmp_path / "res"), "--sacct",
                                   str(tmp_path / "sacct.txt")])
    assert a.fn(a) == 0
    out = capsys.readouterr().out
    assert "650000" in out and "600000" in out and "50000" in out
    table = (tmp_path / "res/tables/slurm_energy.csv").read_text().splitlines()[0].split(",")
    assert {"suite_source", "slurm_source", "difference_source"} <= set(table)


# -- through the workflow (the Slurm profile as shipped; Slurm's commands are stubs) -----------


def _stub_slurm(bindir: Path, log: Path) -> None:
    """sbatch records its call; sinfo answers the features (`%f`) or the nodes; sacctmgr one
    account; the rest answers nothing."""
    bindir.mkdir(parents=True)
    feats = "gpuq|(null)\\nh100q|h100\\ncpuq|(null)\\n"
    nodes = "gpuq*|8|64000\\nh100q|8|64000\\ncpuq|4|16000\\n"
    (bindir / "sbatch").write_text(f'#!/bin/bash\necho "sbatch $*" >> {log}\nwc -l < {log}\n')
    (bindir / "sinfo").write_text(
        f"#!/bin/bash\ncase \"$*\" in *%f*) printf '{feats}';; *) printf '{nodes}';; esac\n")
    (bindir / "sacctmgr").write_text("#!/bin/bash\necho acct\n")
    for name in ("sacct", "squeue", "scontrol", "scancel", "sshare"):
        (bindir / name).write_text("#!/bin/bash\nexit 0\n")
    for f in bindir.iterdir():
        f.chmod(0o755)


@pytest.mark.slow
def test_a_wrong_site_value_stops_the_run_before_any_sbatch(tmp_path, env_path):
    """An unknown partition used to give measuring jobs 1 CPU and 4 GB; the shipped site file's
    placeholders passed the dry run without a word."""
    import os
    import sys

    from conftest import copy_workflow

    log = tmp_path / "sbatch.log"
    _stub_slurm(tmp_path / "bin", log)
    wf = copy_workflow(tmp_path / "workflow")
    env = dict(env_path, PATH=f"{tmp_path / 'bin'}{os.pathsep}{env_path['PATH']}")
    base = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--nolock",
            "--slurm-status-command", "squeue", "--config", f"results_dir={tmp_path / 'res'}"]
    run = subprocess.run([*base, "slurm={gpu_partition: gpux}", "--",
                          str(tmp_path / "res/tables/pfi.csv")], cwd=wf, env=env,
                         capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode != 0 and not log.exists(), out[-3000:]
    line = ("config slurm.gpu_partition: 'gpux' is not a partition of this cluster (sinfo "
            "knows: cpuq, gpuq, h100q)")
    assert f"{line}; nothing was submitted" in out, out[-3000:]
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm",
                          "--configfile", "config/paper.yaml", "config/site.yaml"], cwd=wf,
                         env=env, capture_output=True, text=True, timeout=600)
    said = dry.stdout + dry.stderr
    assert dry.returncode == 0 and not log.exists(), said[-3000:]
    for key in ("slurm.account: 'my-account' is not one of your Slurm accounts",
                "slurm.gpu_partition: 'gpu' is not a partition", "storage.shared:",
                "prepare.download_on: 'cpu' is not a partition"):
        assert f"wattlife: config {key}" in said, said[-3000:]


@pytest.mark.slow
def test_a_slurm_run_records_its_run_id_in_the_results_folder(tmp_path, env_path):
    """`slurm-orphans RESULTS` acts on the runs recorded there: the submitted job's name."""
    from test_sbatch import submissions

    (tmp_path / "res/transfers/wikitext-103").mkdir(parents=True)
    for name in ("config.json", "trace.csv", "events.csv", "meta.json", "record.json"):
        (tmp_path / "res/transfers/wikitext-103" / name).write_text("")
    (line,) = submissions(tmp_path, env_path, "config/paper.yaml",
                          [str(tmp_path / "res/runs/qwen/local/ckpt-on/r1/trace.csv")])
    names = O.recorded_runs(tmp_path / "res")
    assert len(names) == 1 and f"--job-name {names[0]} " in line, (names, line)


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
def test_live_site_facts_name_the_clusters_partitions():
    from conftest import slurm_test_partition

    part = slurm_test_partition()
    facts = P.query_facts()
    assert facts.partitions is not None and part in facts.partitions, facts
    lines = P.site_problems(_site(gpu_partition="no-such-partition"), _prep(), {}, facts)
    assert lines and lines[0].startswith("config slurm.gpu_partition: 'no-such-partition' is not "
                                         "a partition of this cluster (sinfo knows: ")
    assert part in lines[0]
    assert P.site_problems(_site(gpu_partition=part), _prep(), {}, facts) == []


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


_FIELD = st.text(alphabet=st.characters(blacklist_characters="|\n\r", blacklist_categories=("Cs",)),
                 min_size=1, max_size=30).map(str.strip).filter(bool)


@given(st.lists(st.tuples(_FIELD, _FIELD, _FIELD, _FIELD, _FIELD), max_size=5))
def test_squeue_lines_read_back_as_the_jobs_they_list(rows):
    text = "".join(f"{i}|{s}|wattlife_{n}|{c}|{e}|{w}\n" for i, (s, n, c, e, w) in enumerate(rows))
    jobs = O.parse_squeue(text)
    assert [(j.state, j.name, j.comment, j.elapsed, j.where) for j in jobs] == \
        [(s, f"wattlife_{n}", c, e, w) for s, n, c, e, w in rows]
    assert all(O.describe(j.comment).rule is not None for j in jobs)  # never raises


@given(st.integers(0, 10**9), st.sampled_from(["", "M", "G"]))
def test_memory_values_read_in_mb(n, unit):
    assert J.mem_mb(f"{n}{unit}") == n * {"": 1, "M": 1, "G": 1024}[unit]
