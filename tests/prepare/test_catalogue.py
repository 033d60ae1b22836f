"""The Snakemake workflow catalogue's files (issue 42): `.snakemake-workflow-catalog.yml`,
`config/README.md` (every config file and every key of the schema) and `.test/config/config.yaml`
(the smallest valid config: it validates, and its dry run is the whole pipeline without a
download, an upload or a GPU)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, copy_workflow
from wattlife.config import load_config, validate_config
from wattlife.config.loading import schema

TEST_CONFIG = REPO / ".test" / "config" / "config.yaml"


def test_catalogue_yml_has_the_catalogue_s_keys():
    doc = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())
    usage = doc["usage"]
    assert set(usage) <= {"mandatory-flags", "software-stack-deployment", "report"}
    flags = usage["mandatory-flags"]
    assert flags["desc"].strip() and flags["flags"].strip()
    profile = re.search(r"--profile (\S+)", flags["flags"]).group(1)
    assert (REPO / profile / "config.yaml").is_file()
    deploy = usage["software-stack-deployment"]
    assert set(deploy) <= {"conda", "singularity", "singularity+conda", "apptainer",
                           "apptainer+conda"}
    assert all(isinstance(v, bool) for v in deploy.values())
    # conda is never claimed while an env file installs the suite from the checkout (`-e ..` points
    # into .snakemake/ when Snakemake copies the env file), nor before `--sdm conda` has run: no
    # conda channel is reachable here (tests/test_condaenv.py checks the files instead)
    editable = [p.name for p in (REPO / "envs").glob("*.yaml") if "-e .." in p.read_text()]
    assert not editable and deploy.get("conda") is False, editable
    assert isinstance(usage["report"], bool)
    assert (REPO / "Snakefile").is_file() and list((REPO / "rules").glob("*.smk"))
    readme = (REPO / "README.md").read_text().lower()
    assert "snakemake" in readme and "workflow" in readme  # the catalogue's criteria


def test_config_readme_names_every_config_and_every_schema_key():
    text = (REPO / "config" / "README.md").read_text()
    for path in (REPO / "config").glob("*.yaml"):
        if path.name != "schema.yaml":
            assert f"`config/{path.name}`" in text, path.name
    assert "`.test/config/config.yaml`" in text
    for key, spec in schema()["properties"].items():
        assert f"### `{key}`" in text, key
        props = spec.get("properties") or {}
        if not props and isinstance(spec.get("additionalProperties"), dict):
            props = spec["additionalProperties"].get("properties") or {}
        for sub in props:
            assert f"| `{sub}`" in text, f"{key}.{sub}"


def test_test_config_is_valid_alone_and_over_the_demo_config():
    alone = yaml.safe_load(TEST_CONFIG.read_text())
    validate_config(alone)
    cfg = load_config(TEST_CONFIG)
    assert cfg["execution"]["repeats"] == 1 and cfg["sampler"]["gpu"] == "sim"


def test_test_config_dry_run_is_the_pipeline_without_transfers(tmp_path, env_path):
    work = copy_workflow(tmp_path / "wf")
    (work / ".test" / "config").mkdir(parents=True)
    (work / ".test" / "config" / "config.yaml").write_text(TEST_CONFIG.read_text())
    done = subprocess.run(["snakemake", "--cores", "2", "--configfile", ".test/config/config.yaml",
                           "-n"], cwd=work, env=env_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout.split("Job stats:", 1)[1]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", table, re.M))
    assert jobs.pop("total") == "13"  # the one cell: execute (measure, publish) + link_cell
    assert set(jobs) == {"gen_images", "powercap_sweep", "execute", "link_cell", "pfi", "allocate",
                         "check", "predictor", "attribute", "aggregate_phases", "waiting",
                         "figures", "all"}


def test_make_lint_runs_snakefmt_and_snakemake_lint_and_both_pass(tmp_path, env_path):
    """`make lint` checks the workflow's format (snakefmt, [tool.snakefmt] in pyproject.toml) and
    Snakemake's own linter; both pass on the code (snakefmt where the `dev` extra is installed)."""
    import importlib.util
    import shutil

    lint = (REPO / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "snakefmt --check Snakefile rules/" in lint and "snakemake --lint" in lint
    work = copy_workflow(tmp_path / "wf")
    done = subprocess.run(["snakemake", "--lint"], cwd=work, env=env_path, capture_output=True,
                          text=True, timeout=300)
    said = done.stdout + done.stderr  # no lint at all (this is the suite's one `snakemake --lint`)
    assert done.returncode == 0 and "good condition" in said and "Lints for" not in said, said
    if importlib.util.find_spec("snakefmt") is None:
        pytest.skip("snakefmt is not installed here (the lock's `dev` extra has it)")
    shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")
    fmt = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "rules/"],
                         cwd=work, capture_output=True, text=True, timeout=300)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
