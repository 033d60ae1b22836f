import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import BIN
from wattlife.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


def _write(tmp_path, mutate):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    mutate(cfg)
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_demo_config_is_valid_and_gets_defaults():
    cfg = load_config(REPO / "config/config.yaml")
    assert cfg["sampler"]["interval_ms"] == 50
    assert cfg["powercap"]["allow_real"] is False


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["sampler"].update(intervall_ms=20), r"unknown key sampler\.intervall_ms"),
    (lambda c: c["sampler"].update(interval_ms="fast"), r"sampler\.interval_ms: expected number"),
    (lambda c: c["workloads"]["resnet"].update(steps=2.5),
     r"workloads\.resnet\.steps: expected integer"),
    (lambda c: c.pop("storage"), r"missing required key storage"),
    (lambda c: c["workloads"]["resnet"].pop("batch_size"),
     r"missing required key workloads\.resnet\.batch_size"),
    (lambda c: c["sampler"].update(gpu="amd"), r"sampler\.gpu: expected one of"),
    (lambda c: c.update(colour="blue"), r"unknown key colour"),
    (lambda c: c.update(attribution={"sensor_response": "h200"}),
     r"attribution\.sensor_response: expected boxcar, estimate, or the path of a CSV"),
])
def test_bad_config_names_the_key(tmp_path, mutate, message):
    path = _write(tmp_path, mutate)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(path)
    assert str(err.value).startswith(f"invalid config {path}: ")  # the file, then the keys


@pytest.mark.slow
def test_snakemake_stops_on_bad_config_with_the_key(tmp_path, env_path, workflow_dir):
    bad = _write(tmp_path, lambda c: c["execution"].update(repeats="two"))
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(bad),
                          "--cores", "1"], cwd=workflow_dir, env=env_path, capture_output=True,
                         text=True)
    assert out.returncode != 0
    assert "execution.repeats: expected integer" in out.stdout + out.stderr


RESPONSE = "results/reference/h200/attribution/h200_sensor_response.csv"


@pytest.fixture(scope="module")
def forceall_dry_run(workflow_dir) -> str:
    """One dry run of the whole demo DAG (`-n -p --forceall`) with attribution options given on
    the command line (they change the attribute jobs' commands, not the DAG's rules): its output,
    read by the two tests below (one Snakemake start instead of two)."""
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "--cores",
                          "2", "--config",
                          f"attribution={{method: deconvolve, sensor_response: {RESPONSE}}}"],
                         cwd=workflow_dir, capture_output=True, text=True,
                         env=dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}"))
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


@pytest.mark.slow
def test_dry_run_shows_the_whole_demo_dag(forceall_dry_run):
    for rule in ("gen_images", "execute", "attribute", "aggregate_phases", "powercap_sweep", "pfi",
                 "predictor", "allocate", "figures"):
        assert rule in forceall_dry_run, rule


@pytest.mark.slow
def test_attribution_options_reach_every_attribute_job(forceall_dry_run):
    cmds = [ln for ln in forceall_dry_run.splitlines() if "wattlife attribute " in ln]
    assert cmds and all(f"--method deconvolve --sensor-response {RESPONSE}" in c for c in cmds)
