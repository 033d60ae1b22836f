"""The workflow's unit of work is a cell: on the session's finished (small) demo, which config edits
rerun what (`snakemake -n`), that one cell is measured again alone, and that every file under the
results folder is a declared output or log of some rule; and a PFI matrix's (cell, cap) jobs."""

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

MEASURING = {"execute", "execute_tokenizer", "download", "upload", "powercap_sweep", "pfi_cap",
             "pfi_cap_multinode", "gen_catalogue", "gen_images", "gen_text"}


def snakemake(args, env, cwd: Path, timeout=900):
    """Snakemake in `cwd`, a copy of the workflow (conftest.copy_workflow), never the checkout."""
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def jobs_of(out: str) -> dict[str, int]:
    """The dry run's job counts by rule (empty when nothing is to be done)."""
    stats = out.split("Job stats:")[-1] if "Job stats:" in out else ""
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M) if k != "total"}


def tree(root: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(root)):
            (p.stat().st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def demo(finished_demo):
    """The session's finished demo (tests/conftest.py): 8 cells, 5 downloads, 1 upload."""
    return finished_demo


def dry(demo, cfg: dict | None = None, extra=(), sort_keys=False) -> tuple[dict[str, int], str]:
    conf = demo["conf"]
    if cfg is not None:
        conf = demo["tmp"] / "edited.yaml"
        conf.write_text(yaml.safe_dump(cfg, sort_keys=sort_keys))
    out = snakemake(["-n", "--configfile", str(conf), *extra], demo["env"], demo["wf"],
                    timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return jobs_of(out.stdout), out.stdout


def undeclared(res: Path, conf: Path, env: dict, wf: Path,
               targets=()) -> tuple[list[str], int]:
    """Files under `res` that are no output or log of the DAG (nor inside a directory output)."""
    out = snakemake(["--summary", "--configfile", str(conf), "--", *targets], env, wf, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split("\t") for line in out.stdout.splitlines()[1:] if line.strip()]
    done = ("ok", "removed temp file")  # a PFI job's checkpoint: temp(), deleted after the job
    assert rows and all(r[4] in done for r in rows), [r for r in rows if r[4] not in done]
    declared = {Path(r[0]).resolve() for r in rows}  # every output of the DAG ...
    declared |= {Path(x.strip()).resolve() for r in rows for x in r[3].split(",")
                 if x.strip() not in ("", "-")}
    dirs = [d for d in declared if d.is_dir()]  # ... its logs, and what directory outputs hold
    dirs.append((res / "attempts").resolve())  # the measurements' own folders (custody): no rule's
    dirs.append((res / "benchmarks").resolve())  # the CPU steps' `benchmark:` files (common.smk)
    files = [p.resolve() for p in res.rglob("*") if p.is_file()]
    bad = [str(p) for p in files if p not in declared and not any(d in p.parents for d in dirs)]
    return bad, len(files)


def test_every_file_under_results_is_declared(demo):
    bad, n = undeclared(demo["res"], demo["conf"], demo["env"], demo["wf"])
    assert n > 60 and not bad, bad


def test_a_finished_run_has_nothing_to_do(demo):
    jobs, out = dry(demo)
    assert jobs == {} and "Nothing to be done" in out


def test_keys_reordered_rerun_nothing(demo):
    jobs, out = dry(demo, demo["cfg"], sort_keys=True)  # every mapping's keys in another order
    assert jobs == {}, out[-2000:]


def test_an_analysis_key_reruns_no_measurement(demo):
    cfg = yaml.safe_load(yaml.safe_dump(demo["cfg"]))
    cfg["analysis"]["pfi_mc"] = 21
    cfg["analysis"]["allocation_cuts"] = [0.0, 0.2]
    jobs, _ = dry(demo, cfg)
    assert {"pfi", "allocate"} <= set(jobs) and not set(jobs) & MEASURING, jobs
    assert "attribute" not in jobs and "aggregate_phases" not in jobs


def test_one_workload_key_reruns_that_workloads_cells_only(demo):
    cfg = yaml.safe_load(yaml.safe_dump(demo["cfg"]))
    cfg["workloads"]["resnet"]["lr"] = 0.07
    jobs, out = dry(demo, cfg)
    assert jobs.get("execute") == 4 and "execute_tokenizer" not in jobs, jobs  # resnet's four cells
    others = {"download", "upload", "powercap_sweep", "gen_catalogue", "gen_images", "gen_text"}
    assert not others & set(jobs)
    assert "/runs/qwen/" not in "".join(re.findall(r"output: (.*)", out))


def test_rerun_one_cell_measures_it_again_and_nothing_else(demo):
    res = demo["res"]
    cell = res / "runs/resnet/local/ckpt-on/r1"
    before = tree(res)
    # the README's commands: retire the cell's measurement (kept, never adopted again), then rerun:
    # the cell's training again (under the sampler) and everything downstream
    retire = subprocess.run(["wattlife", "retire", str(res), "resnet/local/ckpt-on/r1"],
                            env=demo["env"], capture_output=True, text=True, timeout=60)
    assert retire.returncode == 0, retire.stderr
    out = snakemake(["--configfile", str(demo["conf"]), "--forcerun", str(cell / "trace.csv")],
                    demo["env"], demo["wf"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    after = tree(res)
    rel = str(cell.relative_to(res))
    assert after[f"{rel}/trace.csv"][1] != before[f"{rel}/trace.csv"][1]  # measured again
    assert after[f"{rel}/phases.csv"][0] > before[f"{rel}/phases.csv"][0]
    others = [k for k in before if k.startswith("runs/") and not k.startswith(rel)]
    others += [k for k in before
               if k.startswith(("transfers/", "prepare/served/", "prepare/uploaded/"))]
    assert len(others) > 20 and all(after[k] == before[k] for k in others), \
        [k for k in others if after[k] != before[k]]
    assert after["tables/phases.csv"][0] > before["tables/phases.csv"][0]  # downstream follows
    assert after["tables/curves.csv"] == before["tables/curves.csv"]  # not downstream: untouched
    assert "rule execute_tokenizer" not in out.stdout + out.stderr
    ph = pd.read_csv(res / "tables/phases.csv")
    assert set(ph["workload"]) == {"resnet", "qwen"}
    jobs, _ = dry(demo)
    assert jobs == {}


@pytest.fixture(scope="module")
def pfi_run(tmp_path_factory, workflow_dir):
    """A one-cell PFI matrix on the simulated cap backend (CPU training, simulated GPU): caps 150 W
    (below the simulated H200's 200 W floor: refused, as nvidia-smi refuses it), 400 W and 700 W."""
    import os

    tmp = tmp_path_factory.mktemp("pfi")
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp / "res")
    cfg["storage"] = {"shared": str(tmp / "shared"), "local": str(tmp / "local")}
    cfg["data"]["text"]["words"] = 5_000
    cfg["sampler"]["idle_baseline_s"] = 0.2
    cfg["powercap"].pop("jobs")
    cfg["powercap"]["hardware"] = "h200"
    cell = {"model_config": "qwen3-tiny", "task": "pretrain", "gpus": 1, "seq_len": 32,
            "batch_size": 2, "device": "cpu", "caps": [150, 400, 700]}
    cfg["pfi_matrix"] = {"dataset": "wikitext-mini", "duration_s": 2, "eval_at_s": 1,
                         "ckpt_at_s": 1, "tokenizer_vocab": 300, "cells": {"tiny-1g": cell}}
    conf = tmp / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    target = str(tmp / "res/tables/curves.csv")
    out = snakemake(["--configfile", str(conf), "--", target], env, workflow_dir)  # targets: --
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {"tmp": tmp, "conf": conf, "env": env, "res": tmp / "res", "target": target,
            "wf": workflow_dir}


def test_pfi_jobs_are_one_per_cell_and_cap_and_the_curve_shows_a_failed_cap(pfi_run):
    res = pfi_run["res"]
    cur = pd.read_csv(res / "tables/curves.csv")
    st = dict(zip(cur["cap_w"], cur["status"], strict=True))
    assert st[400] == st[700] == "ok" and st[150].startswith("failed"), st
    assert "outside" in (res / "pfi/tiny-1g/cap-150/run.log").read_text()  # the device refused it
    ok = cur[cur["status"] == "ok"]
    assert (ok["throughput"] > 0).all() and set(ok["source"]) == {"sim"}
    assert cur.loc[cur["cap_w"] == 150, "throughput"].isna().all()
    for cap in ("150", "400", "700"):
        assert (res / f"pfi/tiny-1g/cap-{cap}/config.json").exists()
        assert not (pfi_run["tmp"] / f"shared/checkpoints/tiny-1g-cap{cap}").exists()  # temp()
    assert (res / "benchmarks/pfi_curve/tiny-1g.tsv").exists()
    bad, n = undeclared(res, pfi_run["conf"], pfi_run["env"], pfi_run["wf"], [pfi_run["target"]])
    assert n > 20 and not bad, bad


def test_a_failed_cap_is_rerun_alone(pfi_run):
    res = pfi_run["res"]
    before = tree(res / "pfi")
    point = res / "pfi/tiny-1g/cap-150/curve-point.csv"
    # as a cell's: retire its measurement (kept, never adopted again), then rerun the point
    retire = subprocess.run(["wattlife", "retire", str(res), "pfi/tiny-1g/cap-150"],
                            env=pfi_run["env"], capture_output=True, text=True, timeout=60)
    assert retire.returncode == 0, retire.stderr
    out = snakemake(["--configfile", str(pfi_run["conf"]), "--forcerun", str(point), "--",
                     pfi_run["target"]], pfi_run["env"], pfi_run["wf"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    after = tree(res / "pfi")
    key = "tiny-1g/cap-150/curve-point.csv"
    assert after[key][0] > before[key][0]
    for cap in ("400", "700"):
        same = [k for k in before if k.startswith(f"tiny-1g/cap-{cap}/")]
        assert same and all(after[k] == before[k] for k in same)
    counts = jobs_of(out.stdout + out.stderr)
    assert counts.get("pfi_cap") == 1, counts
