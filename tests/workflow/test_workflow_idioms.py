"""The workflow's structure (issue 40): every preset dry-runs on its own with exactly its own
matrix, one measuring rule per workload kind whatever the repeats, rounds of repeats and each
round's seeded order (chained where measurements run one at a time), a user's sbatch flags
(`slurm.extra`) on every measuring rule beside --exclusive, a local flag per rule, the PFI work
folder a temp() output, benchmark files on CPU steps only; and which failures of a PFI cap are
data (a recorded point) and which the infrastructure's (the job fails)."""

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml

from wattlife.jobs import cell_positions, pfi_run_id
from wattlife.sweeps.failures import InfrastructureFailure, classify, run_logged

REPO = Path(__file__).resolve().parents[2]
MEASURING = {"execute", "execute_tokenizer", "pfi_cap", "pfi_cap_multinode"}

# each preset alone (its overlays after it, as their comments say): the dry run's job counts
# (a PFI cap's and a transfer's files are declared by a link job of their own, as a cell's)
PRESETS = {
    "demo": ((), {"execute": 4, "execute_tokenizer": 4, "download": 5, "upload": 1,
                  "powercap_sweep": 1, "pfi": 1, "allocate": 1, "total": 68}),
    "paper": (("config/paper.yaml",), {"execute": 12, "execute_tokenizer": 12, "download": 12,
                                       "upload": 1, "attribute": 24, "round_done": 2,
                                       "total": 155}),
    "pfi": (("config/pfi.yaml",), {"pfi_cap": 156, "pfi_cap_multinode": 36, "pfi_curve": 35,
                                   "pfi": 1, "predictor": 1, "allocate": 1, "total": 425}),
    "gpu1": (("config/gpu1.yaml",), {"execute": 12, "execute_tokenizer": 12, "download": 5,
                                     "powercap_sweep": 1, "round_done": 2, "total": 134}),
    "gpu1-decode": (("config/gpu1.yaml", "config/gpu1-decode.yaml"), {"execute": 6, "total": 35}),
    "gpu1-qwen": (("config/gpu1.yaml", "config/gpu1-qwen.yaml"),
                  {"execute_tokenizer": 12, "total": 59}),
    "gpu1-qwen-r1": (("config/gpu1.yaml", "config/gpu1-qwen.yaml", "config/gpu1-qwen-r1.yaml"),
                     {"execute_tokenizer": 4, "total": 25}),
    "gpu1-repeats": (("config/gpu1.yaml", "config/gpu1-repeats.yaml"),
                     {"execute": 12, "download": 5, "total": 85}),
    "gpu1-repeats-storage": (("config/gpu1.yaml", "config/gpu1-repeats-storage.yaml"),
                             {"execute": 6, "total": 35}),
    "gpu1-waiting": (("config/gpu1.yaml", "config/gpu1-waiting.yaml"),
                     {"execute": 6, "execute_tokenizer": 3, "total": 46}),
    ".test": ((".test/config/config.yaml",), {"execute": 1, "powercap_sweep": 1, "total": 13}),
}
SIMULATED_SWEEP = {"powercap_sweep"}  # the demo's and gpu1's simulated power-cap jobs
NOT_IN_PAPER = SIMULATED_SWEEP | {"pfi", "predictor", "allocate", "gen_images", "gen_text",
                                  "gen_catalogue", "pfi_cap"}


def _dry(wf: Path, env: dict, files: tuple[str, ...], *extra: str) -> subprocess.CompletedProcess:
    conf = ("--configfile", *files) if files else ()
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "8", *conf,
                           "--config", f"results_dir={wf / 'res-dry'}", *extra],
                          cwd=wf, env=env, capture_output=True, text=True, timeout=600)


def _counts(out: str) -> dict[str, int]:
    stats = out.split("Job stats:")[-1]
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M)}


def test_every_preset_dry_runs_alone_with_exactly_its_own_matrix(workflow_dir, env_path):
    """Before: every --configfile was merged over the demo's config/config.yaml (the paper preset
    had the demo's simulated power-cap jobs, 144 jobs against 142 now (2 of them rounds' ends);
    config/pfi.yaml alone: KeyError 'qwen'; the catalogue's .test config had 6 simulated
    power-cap jobs, its own 2)."""
    shutil.copytree(REPO / ".test", workflow_dir / ".test", dirs_exist_ok=True)
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(PRESETS, pool.map(lambda p: _dry(workflow_dir, env_path, p[0]),
                                          PRESETS.values()), strict=True))
    for name, (_files, want) in PRESETS.items():
        out = runs[name]
        assert out.returncode == 0, (name, out.stdout[-2000:] + out.stderr[-2000:])
        got = _counts(out.stdout)
        print(name, got["total"], "jobs")
        assert {k: got.get(k, 0) for k in want} == want, (name, got)
        assert not any(k.startswith("execute_r") for k in got), (name, got)  # one rule per kind
    assert not NOT_IN_PAPER & set(_counts(runs["paper"].stdout))
    pfi = _counts(runs["pfi"].stdout)
    assert not {"execute", "execute_tokenizer", "download", "gen_images", "gen_text"} & set(pfi)


def _rules(wf: Path, env: dict, files: tuple[str, ...], config: dict) -> dict[str, dict]:
    """Each rule of the workflow built from `files` + `config`, as JSON: priority, local flag,
    benchmark, temp outputs, slurm_extra (a function of the wildcards: evaluated for each
    pfi_matrix cell)."""
    conf = wf / f"overlay-{abs(hash((files, json.dumps(config, sort_keys=True))))}.yaml"
    conf.write_text(yaml.safe_dump(config))
    code = (
        "import json, sys\nfrom pathlib import Path\nfrom snakemake.api import SnakemakeApi\n"
        "from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, "
        "StorageSettings\n"
        "files = [Path(f) for f in sys.argv[1:]]\n"
        "with SnakemakeApi(OutputSettings()) as api:\n"
        "    wf = api.workflow(resource_settings=ResourceSettings(cores=1), "
        "config_settings=ConfigSettings(configfiles=files), storage_settings=StorageSettings(), "
        "snakefile=Path('Snakefile'), workdir=Path.cwd())._workflow\n"
        "    cells = list((wf.config.get('pfi_matrix') or {}).get('cells') or {})\n"
        "    out = {}\n"
        "    for r in wf.rules:\n"
        "        ex = r.resources.get('slurm_extra')\n"
        "        ex = sorted({ex({'pcell': c}) for c in cells}) if callable(ex) else ex\n"
        "        out[r.name] = {'priority': 'callable' if callable(r.priority) else r.priority,\n"
        "                       'local': r.name in wf._localrules, 'extra': ex,\n"
        "                       'benchmark': str(r.benchmark) if r.benchmark else None,\n"
        "                       'temp': [str(f) for f in r.output if f.is_flagged('temp')],\n"
        "                       'shell': r.shellcmd}\n"
        "    print('RULES', json.dumps(out))\n")
    args = [*files, str(conf)]
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=wf, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RULES "))
    return json.loads(line[len("RULES "):])


def test_one_measuring_rule_per_kind_whatever_the_repeats(workflow_dir, env_path):
    """Before: `execute`, `execute_r2`, ... one rule per repeat index."""
    rules = _rules(workflow_dir, env_path, ("config/paper.yaml",), {"execution": {"repeats": 7}})
    assert {n for n in rules if n.startswith("execute")} == {"execute", "execute_tokenizer"}
    from snakemake.rules import Rule

    # a priority of the wildcards where this Snakemake evaluates one per job (9.27.1); 9.14.8
    # (the lock's) accepts numbers only: every job 0
    want = "callable" if hasattr(Rule, "expand_priority") else 0
    assert rules["execute"]["priority"] == rules["execute_tokenizer"]["priority"] == want


def test_a_users_sbatch_flags_reach_every_measuring_rule_beside_exclusive(workflow_dir, env_path):
    """`slurm.extra` on training cells of both kinds (every repeat: one rule each) and on PFI
    caps of one and several nodes. Before: only a `--set-resources <rule>:slurm_extra` merged
    through Snakemake's private `_parsed_overwrite_resources`, and not on repeat >= 2 rules."""
    site = {"slurm": {"gpu_partition": "gpuq", "extra": "--mail-type=END --qos=long"}}
    paper = _rules(workflow_dir, env_path, ("config/paper.yaml",), site)
    pfi = _rules(workflow_dir, env_path, ("config/pfi.yaml",), site)
    extras = [paper["execute"]["extra"], paper["execute_tokenizer"]["extra"],
              *pfi["pfi_cap"]["extra"], *pfi["pfi_cap_multinode"]["extra"]]
    assert extras and all(e == "--exclusive --mail-type=END --qos=long" for e in extras), extras
    assert all(not rules[n]["local"] for rules in (paper, pfi) for n in MEASURING if n in rules)


def test_a_set_resources_slurm_extra_on_a_measuring_rule_is_refused(workflow_dir, env_path):
    out = _dry(workflow_dir, env_path, (), "--set-resources",
               "execute:slurm_extra='--mail-type=END'")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "--set-resources execute:slurm_extra" in text and "slurm={extra:" in text, text[-2000:]


def test_local_flags_benchmarks_and_temp_outputs(workflow_dir, env_path):
    """Without a CPU partition every CPU step is a local job (pfi_study too: the hand-kept list
    missed it); with one only `all`; measuring rules never. Benchmark files on CPU steps only.
    A PFI job's checkpoint folder (model + optimizer, on the shared storage) is removed by the job
    whatever its exit status (a temp() output before custody: its measuring rule's one output is
    now the pointer, whose name has a wildcard the folder has not)."""
    demo = _rules(workflow_dir, env_path, ("config/config.yaml",), {})
    cpu_part = _rules(workflow_dir, env_path, ("config/config.yaml",),
                      {"slurm": {"cpu_partition": "cpuq"}})
    pfi = _rules(workflow_dir, env_path, ("config/pfi.yaml",), {})
    cpu_steps = {n for n, r in demo.items() if r["benchmark"]}
    assert {"check", "attribute", "figures", "pfi_study", "link_cell"} <= cpu_steps
    assert not cpu_steps & (MEASURING | {"download", "upload"})
    assert all(demo[n]["local"] for n in cpu_steps | {"all", "measurements", "download", "upload"})
    assert {n for n, r in cpu_part.items() if r["local"]} == {"all", "measurements", "download",
                                                             "upload"}
    assert not any(demo[n]["local"] for n in MEASURING if n in demo)
    for name in ("pfi_cap", "pfi_cap_multinode"):  # before custody: a temp() output
        assert pfi[name]["temp"] == []
        assert pfi[name]["shell"].startswith("mkdir -p {params.checkpoint:q} && rc=0 && ")
        assert pfi[name]["shell"].endswith(" || rc=$?; rm -rf {params.checkpoint:q}; exit $rc")
    assert pfi_run_id("dense-pt-x", 700.0) == "dense-pt-x-cap700"  # the folder the run writes


@pytest.mark.parametrize("rc, output, kind", [
    (0, "", None),
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", "data"),
    (-15, "RuntimeError: CUDA out of memory\ntorchrun: sending SIGTERM", "data"),
    (1, "ValueError: cap 100 W outside GPU 0's range [200, 700] W", "data"),
    (-9, "step 120", "infrastructure"),
    (137, "srun: error: task 0 killed", "infrastructure"),
    (1, "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp",
     "infrastructure"),
    (1, "srun: error: Node failure on gpu-07", "infrastructure"),
    (1, "slurmstepd: *** STEP 12.0 ON n1 CANCELLED AT 2026-01-01 DUE TO TIME LIMIT ***",
     "infrastructure"),
    (1, "Signal 15 (SIGTERM) received by PID 4242", "infrastructure"),
])
def test_which_failures_are_data_and_which_the_infrastructures(rc, output, kind):
    assert classify(rc, output)[0] == kind


def test_run_logged_passes_the_output_through_and_keeps_its_tail(tmp_path):
    sink = tmp_path / "log.txt"
    with sink.open("w") as f:
        rc, tail = run_logged("for i in $(seq 1 1000); do echo line $i; done; exit 3", f)
    assert rc == 3 and sink.read_text().count("\n") == 1000
    assert tail.startswith("line 601\n") and tail.endswith("line 1000\n")
    rc, _ = run_logged("kill -TERM $$", open(tmp_path / "x.txt", "w"))
    assert rc == -15


def _cap_run(tmp_path, monkeypatch, inner: str):
    """`sweep_matrix_cap` of config/pfi.yaml's first cell at 700 W with the launched command
    replaced by `inner` (no GPU, no training)."""
    from wattlife import launch
    from wattlife.config import load_config, settings
    from wattlife.sweeps.real import sweep_matrix_cap

    monkeypatch.setattr(launch, "build_command", lambda *a, **k: inner)
    cfg = load_config(REPO / "config/pfi.yaml")
    cell = next(iter(cfg["pfi_matrix"]["cells"]))
    out = tmp_path / "cap-700" / "curve-point.csv"
    return lambda: sweep_matrix_cap(settings(cfg), REPO / "config/pfi.yaml", cell, 700.0, out), out


def test_an_oom_at_a_cap_is_a_recorded_point_and_a_signal_fails_the_job(tmp_path, monkeypatch):
    """Before: any failure wrote placeholder files and a `failed` point, exit 0 (a time-limit
    kill or a lost node looked like a measured failure; retries and requeue never acted)."""
    run, out = _cap_run(tmp_path / "oom", monkeypatch,
                        "echo 'torch.OutOfMemoryError: CUDA out of memory'; exit 1")
    run()
    point = pd.read_csv(out)
    status = point["status"].iloc[0]
    assert status.startswith("failed") and "out of memory" in status, status
    run, out = _cap_run(tmp_path / "sig", monkeypatch, "echo step 1; kill -TERM $$")
    with pytest.raises(InfrastructureFailure, match="signal 15"):
        run()
    assert not out.exists() and not (out.parent / "meta.json").exists()


def _jobs(out: str) -> list[dict[str, str]]:
    """The dry run's jobs (`-n` output): each block's rule, input and wildcards lines."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", out):
        m = re.match(r"(?:local)?rule (\w+):\n", block)
        if m:
            fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
            jobs.append({"rule": m.group(1), **fields})
    return jobs


def test_a_local_run_chains_each_round_in_its_seeded_order_a_cluster_run_does_not(
        workflow_dir, env_path):
    """Issue 40 (order within a round): with profiles/local (one measurement at a time) the cell
    at position p of round r waits for the turn file of position p - 1 (`turn_done`, which reads
    that cell's pointer), in `jobs.round_orders`' order for `execution.order_seed`; each job is
    told its place (`--order`). Without the `exclusive_node` limit (a cluster) nothing waits.
    Before: no cell of a round waited for another, and no place was passed."""
    overlay = workflow_dir / "order.yaml"
    overlay.write_text(yaml.safe_dump({"execution": {
        "storage": ["shared", "local"], "checkpoint": ["off", "on"], "repeats": 2,
        "order_seed": 11}}))
    files = ("--configfile", ".test/config/config.yaml", str(overlay))
    shutil.copytree(REPO / ".test", workflow_dir / ".test", dirs_exist_ok=True)
    res = workflow_dir / "res-dry"
    cells = [f"resnet/{s}/ckpt-{c}/r{r}" for s in ("shared", "local") for c in ("off", "on")
             for r in (1, 2)]
    targets = [f"{res}/runs/{c}/trace.csv" for c in cells]
    local = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                            "-n", *files, "--config", f"results_dir={res}", "--", *targets],
                           cwd=workflow_dir, env=env_path, capture_output=True, text=True,
                           timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    plan = cell_positions([(c, int(c[-1])) for c in cells], 11, enforced=True)
    at = {(int(c[-1]), p["round_position"]): c for c, p in plan.items()}
    jobs = _jobs(local.stdout + local.stderr)
    turns = {j["output"].split("/rounds/")[1]: j["input"] for j in jobs
             if j["rule"] == "turn_done"}
    assert turns.keys() == {f"r{r}/p{p}.done" for r in (1, 2) for p in (1, 2, 3)}, turns
    for (r, p), c in at.items():
        if p < 4:
            assert f"/runs/{c}/sealed-" in turns[f"r{r}/p{p}.done"], (r, p, turns)
    measured = [j for j in jobs if j["rule"] == "execute"]
    assert len(measured) == 8
    for j in measured:
        w = dict(re.findall(r"(\w+)=(\w+)", j["wildcards"]))
        c = f"{w['workload']}/{w['storage']}/ckpt-{w['checkpoint']}/r{w['repeat']}"
        p = plan[c]["round_position"]
        gate = re.findall(r"/rounds/(r\d+/p\d+)\.done", j["input"])
        assert gate == ([] if p == 1 else [f"r{c[-1]}/p{p - 1}"]), (c, p, j["input"])
    orders = re.findall(r"--order '(\{.*?\})'", local.stdout + local.stderr)
    assert sorted(json.loads(o)["round_position"] for o in orders) == [1, 1, 2, 2, 3, 3, 4, 4]
    cluster = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "8", "-n", "-p", *files,
                              "--config", f"results_dir={res}", "--", *targets],
                             cwd=workflow_dir, env=env_path, capture_output=True, text=True,
                             timeout=600)
    assert cluster.returncode == 0, cluster.stderr[-3000:]
    assert "turn_done" not in _counts(cluster.stdout), cluster.stdout[-2000:]
    assert '"order_enforced":false' in cluster.stdout + cluster.stderr


def test_an_overlay_given_alone_says_to_put_the_demo_config_first(workflow_dir, env_path):
    overlay = workflow_dir / "only-repeats.yaml"
    overlay.write_text("execution: {repeats: 2}\n")
    out = _dry(workflow_dir, env_path, (str(overlay),))
    assert out.returncode != 0
    assert "config/config.yaml first" in out.stdout + out.stderr, (out.stdout + out.stderr)[-2000:]


def test_only_the_upload_cells_checkpoint_outlives_its_job_and_the_upload_removes_it(
        workflow_dir, env_path):
    """Issue 40: training cells' checkpoints are not kept. Every measuring job removes its cell's
    checkpoint folder when it ends (`wattlife measure` without --keep-checkpoint), but the
    upload cell's (`prepare.upload.cell`), which the upload step removes after its sealed
    upload. Before: no measuring job removed one."""
    out = _dry(workflow_dir, env_path, (), "-p", "--forceall")
    assert out.returncode == 0, out.stderr[-3000:]
    measures = [ln for ln in out.stdout.splitlines() if "wattlife measure --results" in ln]
    kept = [ln for ln in measures if "--keep-checkpoint" in ln]
    assert len(measures) == 8 and len(kept) == 1 and "--cell qwen/local/ckpt-on/r1" in kept[0]
    upload = [ln for ln in out.stdout.splitlines() if "wattlife upload --from-summary" in ln]
    assert len(upload) == 1 and re.search(
        rf"&& wattlife drop-checkpoint {workflow_dir}/res-dry/runs/qwen/local/ckpt-on/r1/work/"
        rf"summary.json >> {workflow_dir}/res-dry/transfers/upload/"
        rf"attempt-[0-9a-f]{{16}}\.log 2>&1$",
        upload[0].rstrip()), upload


@pytest.mark.slow
def test_rounds_of_repeats_run_in_order_and_each_round_in_its_seeded_order(workflow_dir,
                                                                          env_path, tmp_path):
    """Issues 40 and 40-order, on the lock's Snakemake (9.14.8 takes no priority of the
    wildcards): a real local run of 3 cells x 2 repeats starts the measuring jobs round by round
    and, within each round, in the seeded permutation of `execution.order_seed` (a different
    one per round), each cell's meta.json recording its place; a cell of round 1 measured again
    (retired) reruns its round's end and its turn only, no other cell.
    Before: the order was Snakemake's (every measuring job priority 0; within a round, its sets'
    order: memory addresses), and meta.json recorded no place."""
    res = tmp_path / "res"
    conf = tmp_path / "rounds.yaml"
    conf.write_text(yaml.safe_dump({
        "results_dir": str(res),
        "storage": {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")},
        "execution": {"storage": ["local"], "checkpoint": ["off", "sync", "async"],
                      "repeats": 2, "order_seed": 1},
        "sampler": {"idle_baseline_s": 0.2},  # (the .test config's 1 s: 6 x 0.8 s for nothing)
        "workloads": {"resnet": {"steps": 2, "val_every": 2}}}))
    shutil.copytree(REPO / ".test", workflow_dir / ".test", dirs_exist_ok=True)
    cells = [f"resnet/local/ckpt-{c}/r{r}" for c in ("off", "sync", "async") for r in (1, 2)]
    plan = cell_positions([(c, int(c[-1])) for c in cells], 1, enforced=True)
    want = sorted(cells, key=lambda c: (int(c[-1]), plan[c]["round_position"]))
    assert want[:3] != sorted(want[:3]) and [c[:-1] for c in want[:3]] != [
        c[:-1] for c in want[3:]], want  # the seed's orders: not sorted, not the same twice
    last = [f"{res}/runs/{c}/trace.csv" for c in cells]
    args = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--configfile",
            ".test/config/config.yaml", str(conf)]
    run = subprocess.run([*args, "--", *last], cwd=workflow_dir, env=env_path,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    started = re.findall(r"^(?:local)?rule execute\w*:\n(?:    .*\n)*?    wildcards: workload="
                         r"(\w+), storage=(\w+), checkpoint=(\w+), repeat=(\d+)", run.stderr,
                         re.M)
    assert [f"{w}/{s}/ckpt-{c}/r{r}" for w, s, c, r in started] == want, started
    for c in cells:
        cell = json.loads((res / "runs" / c / "meta.json").read_text())["cell"]
        assert {k: cell[k] for k in plan[c]} == plan[c], (c, cell)
    assert (res / "rounds" / "r1.done").read_text().count("sealed-") == 3
    first = want[0]
    retired = subprocess.run([sys.executable, "-m", "wattlife.cli", "retire", str(res), first],
                             env=env_path, capture_output=True, text=True, timeout=120)
    assert retired.returncode == 0, retired.stderr
    dry = subprocess.run([*args, "-n", "--", *last], cwd=workflow_dir, env=env_path,
                         capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = _counts(dry.stdout + dry.stderr)
    assert jobs == {"execute": 1, "link_cell": 1, "round_done": 1, "turn_done": 1,
                    "total": 4}, jobs
