"""A key given twice in one mapping of a config file, anywhere in it, is an error naming the file,
the line and the key: for `wattlife` commands (load_config, load_section: sweep, run, ...) and for
the workflow's `--configfile` (the Snakefile re-reads `workflow.configfiles` strictly).

Before: `interval_ms: 50` then `interval_ms: 500` was accepted by Snakemake, `wattlife run` and
`wattlife sweep`; the last one won (10x coarser sampling)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wattlife.cli import main
from wattlife.config import ConfigError, load_config, load_section

REPO = Path(__file__).resolve().parents[2]
BASE = (REPO / "config/config.yaml").read_text()
SAMPLER = "sampler:\n  gpu: sim\n  cpu: estimate\n  interval_ms: 50\n  interval_ms: 500\n"


def _mappings(text: str) -> list[tuple[int, str, str]]:
    """(line index, indent, key) of every block-mapping key line of a YAML text."""
    out = []
    for i, line in enumerate(text.splitlines()):
        m = re.match(r"^( *)([A-Za-z_][\w.-]*):( |$)", line)
        if m:
            out.append((i, m.group(1), m.group(2)))
    return out


KEYS = _mappings(BASE)


def _duplicate(text: str, k: int) -> tuple[str, int, str]:
    """`text` with key line k repeated right after its block (same indent): (text, line, key)."""
    lines = text.splitlines()
    i, indent, key = KEYS[k]
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or lines[j].startswith(indent + " ")
                              or lines[j].lstrip().startswith("#")
                              or (lines[j].startswith(indent + "- "))):
        j += 1
    block = lines[i:j]
    return "\n".join(lines[:j] + block + lines[j:]) + "\n", j + 1, key


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, len(KEYS) - 1))
def test_a_duplicated_key_anywhere_is_named_with_its_file_and_line(tmp_path, k):
    text, line, key = _duplicate(BASE, k)
    assert yaml.safe_load(text) is not None  # PyYAML alone takes it silently
    p = tmp_path / "dup.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}:{line}: duplicate key '{key}'") and "\n" not in msg


def test_the_issue_sampler_key_in_run_and_sweep(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text(SAMPLER)
    want = rf"{p}:5: duplicate key 'interval_ms' \(first at line 4\)"
    with pytest.raises(ConfigError, match=want):
        load_section(p, "sampler")
    rc = main(["run", "--config", str(p), "--trace", str(tmp_path / "t.csv"), "--events",
               str(tmp_path / "e.csv"), "--", "true"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{p}:5: duplicate key 'interval_ms'" in err
    assert not (tmp_path / "t.csv").exists()
    full = tmp_path / "full.yaml"
    full.write_text(BASE + "\n" + SAMPLER.replace("sampler:", "sampler:  # again"))
    assert main(["sweep", "--config", str(full), "-o", str(tmp_path / "c.csv")]) == 2
    assert "duplicate key 'sampler'" in capsys.readouterr().err


def test_a_merge_key_may_be_overridden_and_json_is_read_too(tmp_path):
    from wattlife.config import strict_yaml

    assert strict_yaml("a: &x {b: 1}\nc:\n  <<: *x\n  b: 2\n", "f") == {"a": {"b": 1},
                                                                         "c": {"b": 2}}
    with pytest.raises(ConfigError, match=r"^j.json:1: duplicate key 'a'"):
        strict_yaml('{"a": 1, "a": 2}', "j.json")


@pytest.mark.slow
def test_the_workflow_refuses_a_configfile_with_a_duplicated_key(tmp_path, env_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(BASE)
    dup = tmp_path / "dup.yaml"
    dup.write_text(BASE.replace("sampler:\n", "sampler:\n  interval_ms: 50\n", 1)
                   .replace("  interval_ms: 50\n", "  interval_ms: 50\n  interval_ms: 500\n", 1))
    assert dup.read_text().count("interval_ms: 500") == 1
    env = {**env_path, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"),
                          "-d", str(tmp_path), "--cores", "1", "--configfile", str(dup)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert re.search(rf"{dup}:\d+: duplicate key 'interval_ms'", out.stdout + out.stderr), \
        out.stderr[-2000:]
