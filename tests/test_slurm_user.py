"""The user's side of Slurm (issue 40): site values checked before anything is submitted
(wattlife.slurm_preflight) and a results folder's orphaned jobs (wattlife.slurm_orphans). The job
a run measured in and the energy beside Slurm's: tests/test_slurm_record.py.

Slurm's commands answer here with texts in their formats (the squeue lines' format as a CI-cluster
squeue printed it); the live tests (marked `slurm`) ask the CI cluster itself."""

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

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


# -- through the workflow (the Slurm profile as shipped; Slurm's commands are stubs) -----------


@pytest.mark.slow
def test_a_wrong_site_value_stops_the_run_before_any_sbatch(tmp_path, env_path):
    """An unknown partition used to give measuring jobs 1 CPU and 4 GB; the shipped site file's
    placeholders passed the dry run without a word."""
    import os
    import sys

    from conftest import copy_workflow
    from standins import fake_slurm

    log = tmp_path / "sbatch.log"
    fake_slurm(tmp_path / "bin", log)
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
    from standins import downloaded, submissions

    downloaded(tmp_path, "config/paper.yaml", "wikitext-103")
    (line,) = submissions(tmp_path, env_path, "config/paper.yaml",
                          [str(tmp_path / "res/runs/qwen/local/ckpt-on/r1/trace.csv")])
    names = O.recorded_runs(tmp_path / "res")
    assert len(names) == 1 and f"--job-name {names[0]} " in line, (names, line)


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


_FIELD = st.text(alphabet=st.characters(blacklist_characters="|\n\r", blacklist_categories=("Cs",)),
                 min_size=1, max_size=30).map(str.strip).filter(bool)


@given(st.lists(st.tuples(_FIELD, _FIELD, _FIELD, _FIELD, _FIELD), max_size=5))
def test_squeue_lines_read_back_as_the_jobs_they_list(rows):
    text = "".join(f"{i}|{s}|wattlife_{n}|{c}|{e}|{w}\n" for i, (s, n, c, e, w) in enumerate(rows))
    jobs = O.parse_squeue(text)
    assert [(j.state, j.name, j.comment, j.elapsed, j.where) for j in jobs] == \
        [(s, f"wattlife_{n}", c, e, w) for s, n, c, e, w in rows]
    assert all(O.describe(j.comment).rule is not None for j in jobs)  # never raises


