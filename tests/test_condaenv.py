"""The workflow's conda envs (issue 42): envs/analysis.yaml and envs/training.yaml are valid conda
env files written from the lock (every pip line the lock's exact version, no `-e ..`), split by
what the rules need, named by every rule; their post-deploy scripts install the suite pinned by
version from a wheel. No conda channel is reachable here, so conda itself never runs in a test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from conftest import REPO
from wattlife.condaenv import read_pins, render

ENVS = ("analysis", "training")
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower())


def _lock() -> dict[str, str]:
    return {_norm(p.split("==")[0]): p.split("==")[1]
            for p in read_pins((REPO / "requirements/lock.txt").read_text())}


def _env(name: str) -> tuple[dict, dict[str, str]]:
    doc = yaml.safe_load((REPO / "envs" / f"{name}.yaml").read_text())
    pip = [d for d in doc["dependencies"] if isinstance(d, dict)]
    assert len(pip) == 1 and set(pip[0]) == {"pip"}, pip
    return doc, {_norm(p.split("==")[0]): p.split("==")[1] for p in pip[0]["pip"]}


@pytest.mark.parametrize("name", ENVS)
def test_env_file_is_a_conda_env_of_exact_lock_pins(name):
    doc, pins = _env(name)
    assert set(doc) == {"name", "channels", "dependencies"}
    assert doc["name"] == f"wattlife-{name}" and doc["channels"] == ["conda-forge", "nodefaults"]
    conda = [d for d in doc["dependencies"] if isinstance(d, str)]
    assert conda == ["python=3.11", "pip"]
    raw = [d for d in doc["dependencies"] if isinstance(d, dict)][0]["pip"]
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+", p) for p in raw), raw  # no -e, path
    lock = _lock()
    assert {k: (v, lock.get(k)) for k, v in pins.items() if lock.get(k) != v} == {}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {_norm(re.split(r"[<>=!~ ;\[]", r)[0]) for r in project["dependencies"]}
    assert core <= set(pins), core - set(pins)
    assert "wattlife" not in pins  # the post-deploy script installs it, by version
    # written by `make lock`, not by hand: the file is what condaenv.render makes of its pins
    text = (REPO / "envs" / f"{name}.yaml").read_text()
    assert text == render(name, [f"{k}=={v}" for k, v in _pins_in_order(text)])


def _pins_in_order(text: str) -> list[tuple[str, str]]:
    return [tuple(m.groups()) for m in re.finditer(r"^ {6}- (\S+)==(\S+)$", text, re.M)]


def test_analysis_env_has_no_torch_and_training_env_has_the_workloads_and_clients():
    _, analysis = _env("analysis")
    _, training = _env("training")
    heavy = {"torch", "torchvision", "transformers", "accelerate", "peft", "triton"}
    assert not heavy & set(analysis) and not [k for k in analysis if k.startswith("nvidia-cu")]
    assert heavy - {"triton"} <= set(training)
    assert {"huggingface-hub", "datasets", "kaggle"} <= set(training)
    assert set(analysis) <= set(training)


def _rule_envs() -> dict[str, str]:
    """rule (or anonymous rule's first wattlife command) -> the env file its `conda:` names; the
    key ends with `:measuring` where the rule's shell runs a measurement (`wattlife measure` or
    `wattlife attempt`: a cell, a PFI cap, a transfer)."""
    out = {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        blocks = re.split(r"\n\s*rule\b", path.read_text())
        for block in blocks[1:]:
            env = re.search(r'conda:\s*\n\s*"\.\./envs/([^"]+)"', block)
            shell = block.split("shell:", 1)[1] if "shell:" in block else ""
            cmds = re.findall(r"wattlife ([a-z-]+)", shell)
            if env:
                name = block.split(":")[0].strip() or "?"
                kind = "measuring" if {"measure", "attempt"} & set(cmds) else "other"
                out[f"{path.name}:{name}:{cmds[0] if cmds else None}:{kind}"] = env[1]
    return out


def test_every_rule_names_one_of_the_two_envs_and_measuring_rules_the_training_env():
    envs = _rule_envs()
    assert len(envs) >= 20 and set(envs.values()) == {"analysis.yaml", "training.yaml"}, envs
    assert sum(k.endswith(":measuring") for k in envs) >= 4, envs  # cells, PFI caps, transfers
    for rule, env in envs.items():
        assert (env == "training.yaml") is rule.endswith(":measuring"), (rule, env)


@pytest.mark.parametrize("name", ENVS)
def test_post_deploy_pins_the_suite_s_version(name):
    text = (REPO / "envs" / f"{name}.post-deploy.sh").read_text()
    assert re.findall(r'"wattlife==([^"]+)"', text) == [VERSION]
    assert "--no-index" in text and "-e " not in text


@pytest.mark.slow
def test_post_deploy_installs_the_pinned_wheel_and_fails_clearly_without_it(tmp_path,
                                                                            wattlife_wheel):
    # the session's wheel of a copy of the package (conftest.wattlife_wheel: nothing written into
    # the checkout) in tmp_path/work/dist, then the script run as Snakemake runs it: in the env
    # (here a venv: conda gives the same python and pip), from the working directory
    work = tmp_path / "work"
    shutil.copytree(wattlife_wheel, work / "dist")
    venv, bare = tmp_path / "env", tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    shutil.copytree(venv, bare, symlinks=True)  # a second new env (a venv is relocatable as a
    # whole: its pyvenv.cfg sits beside its python), made without a second ensurepip
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    script = REPO / "envs" / "analysis.post-deploy.sh"
    done = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = subprocess.run([str(venv / "bin/python"), "-c",
                          "import importlib.metadata as m; print(m.version('wattlife'))"],
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert got.stdout.strip() == VERSION
    # the new env (nothing installed in it), run where no dist/ holds the wheel
    assert subprocess.run([str(bare / "bin/python"), "-c", "import wattlife"], cwd=tmp_path,
                          capture_output=True, env={"PATH": os.environ["PATH"]}).returncode != 0
    env["PATH"] = f"{bare / 'bin'}:{os.environ['PATH']}"
    failed = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                            text=True)
    assert failed.returncode != 0 and f"wattlife=={VERSION}" in failed.stderr


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}==[0-9]{1,2}\.[0-9]{1,2}", fullmatch=True),
                max_size=5),
       st.lists(st.sampled_from(["", "# a comment", "    # via x"]), max_size=3))
def test_read_pins_keeps_exact_pins_and_drops_comments(pins, noise):
    assert read_pins("\n".join(noise + pins + noise)) == pins


@pytest.mark.parametrize("line", ["-e ..", "numpy>=1.26", "./dist/w.whl", "x @ file:///y"])
def test_read_pins_refuses_anything_but_an_exact_pin_naming_the_line(line):
    with pytest.raises(ValueError, match=rf"line 2: {re.escape(repr(line))} is not an exact pin"):
        read_pins(f"a==1\n{line}\n")
