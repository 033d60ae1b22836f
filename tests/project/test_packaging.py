"""A non-editable install, run from outside the repository, finds everything it ships: the
configuration schema, the model configs, the hardware profiles and the study's published tables
(wattlife.config.resource_path), and its commands work."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from pathlib import Path
import wattlife
from wattlife.analysis.pfi import read_study_jobs
from wattlife.config import hardware_profile, load_config, resource_path, schema

target = Path(sys.argv[1]).resolve()
assert Path(wattlife.__file__).resolve().is_relative_to(target), wattlife.__file__
assert "sampler" in schema()["properties"]
assert hardware_profile("h200").max_cap_w == 700
assert json.loads(resource_path("models", "qwen3-tiny.json").read_text())["model_type"] == "qwen3"
assert len(read_study_jobs()) == 25
cfg = load_config("config.yaml")
assert cfg["sampler"]["rapl_root"] == schema()["properties"]["sampler"]["properties"][
    "rapl_root"]["default"]
print("ok")
"""


@pytest.mark.slow
def test_non_editable_install_finds_its_resources_outside_the_repo(tmp_path, wattlife_wheel):
    # the session's wheel (conftest.wattlife_wheel: built from a copy of what the sdist holds, so
    # the build leaves nothing in the repository), installed as `pip install .` installs it
    (wheel,) = wattlife_wheel.glob("wattlife-*.whl")
    target = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--no-index", "--no-compile", "--target", str(target), str(wheel)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    shipped = target / "wattlife" / "resources"
    assert not shipped.is_symlink() and (shipped / "schema.yaml").is_file()
    assert len(list((shipped / "models").glob("*.json"))) >= 10
    assert {p.stem for p in (shipped / "hardware").glob("*.yaml")} >= {"h100", "h200"}

    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "config.yaml").write_text((REPO / "config" / "config.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WATTLIFE_EVENTS")}
    env["PYTHONPATH"] = str(target)  # the package from the install; its deps from this venv
    probe = subprocess.run([sys.executable, "-c", PROBE, str(target)], cwd=cwd, env=env,
                           capture_output=True, text=True)
    assert probe.returncode == 0 and "ok" in probe.stdout, probe.stdout + probe.stderr

    wattlife = target / "bin" / "wattlife"
    assert wattlife.exists(), sorted(p.name for p in target.iterdir())
    helped = subprocess.run([str(wattlife), "--help"], cwd=cwd, env=env, capture_output=True,
                            text=True)
    assert helped.returncode == 0 and "pfi-sweep" in helped.stdout, helped.stderr
    swept = subprocess.run([str(wattlife), "sweep", "--config", "config.yaml", "-o", "curves.csv"],
                           cwd=cwd, env=env, capture_output=True, text=True)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert (cwd / "curves.csv").read_text().startswith("job,")
