"""`wattlife run`'s command line: `--config` reads only the file's `sampler` section (a file
holding it alone is a config; its errors name the file and the key, nothing else), and every
option's help gives its default."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from wattlife.cli import build_parser, load_sampler_cfg
from wattlife.config import ConfigError, load_config, load_section

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path, config, children, env):
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(tmp_path / "trace.csv"),
           "--events", str(tmp_path / "events.csv"), "--config", str(config), "--cpu",
           "estimate", "--", sys.executable, "-c", "pass"]
    return children.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        timeout=120)


def test_a_sampler_only_config_is_accepted_and_used(tmp_path, env_path, children):
    cfg = tmp_path / "sampler.yaml"
    cfg.write_text("sampler:\n  gpu: sim\n  interval_ms: 20\n  idle_baseline_s: 0\n"
                   "  sim_gpu: {n_gpus: 2}\n")
    out = _run(tmp_path, cfg, children, env_path)
    assert out.returncode == 0, out.stderr
    settings = json.loads((tmp_path / "meta.json").read_text())["sampler"]["settings"]
    assert (settings["gpu"], settings["interval_ms"], settings["sim_gpu"]["n_gpus"]) == (
        "sim", 20, 2)
    assert settings["nvml"]["drain_ms"] == 500  # absent keys: the schema's defaults


def test_a_misspelt_sampler_key_is_one_error_naming_file_key_and_allowed_keys(
        tmp_path, env_path, children):
    cfg = tmp_path / "sampler.yaml"
    cfg.write_text("sampler:\n  intervl_ms: 20\n")
    out = _run(tmp_path, cfg, children, env_path)
    assert out.returncode == 2
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(cfg) in err and "unknown key sampler.intervl_ms" in err
    assert "allowed keys at sampler are ['cpu', " in err and "'interval_ms'" in err
    assert "missing required key" not in err  # no noise about the sections run does not read
    assert not (tmp_path / "trace.csv").exists()  # refused before the sampler started


def test_a_whole_workflow_config_gives_its_sampler_section():
    cfg = REPO / "config" / "config.yaml"
    assert load_section(cfg, "sampler") == load_config(cfg)["sampler"]
    assert load_sampler_cfg(str(cfg)) == load_config(cfg)["sampler"]


@pytest.mark.parametrize("text,expected", [
    ("sampler:\n  interval_ms: fast\n", "sampler.interval_ms: expected number, got 'fast'"),
    ("sampler:\n  gpu: cuda\n", "sampler.gpu: expected one of ['auto', 'nvml', 'sim', 'none']"),
    ("run_name: x\n", "missing required key sampler"),
    ("samplr:\n  gpu: sim\n", "unknown key samplr: allowed keys at top level are"),
    ("sampler: [gpu]\n", "sampler: expected object, got ['gpu']"),
])
def test_sampler_section_errors_name_the_file_and_the_key(tmp_path, text, expected):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_section(cfg, "sampler")
    assert str(cfg) in str(err.value) and expected in str(err.value)
    assert "missing required key execution" not in str(err.value)


def test_a_whole_config_is_still_checked_whole_where_it_is_read_whole(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("sampler:\n  gpu: sim\n")
    with pytest.raises(ConfigError, match="missing required key execution"):
        load_config(cfg)


def test_every_run_option_states_its_default():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    missing = [a.dest for a in run._actions
               if not isinstance(a, argparse._HelpAction) and "default" not in (a.help or "")]
    assert missing == []
