"""A results or storage path with a space: every shell command a rule runs keeps each path one
argument (before, `> {log}` unquoted wrote a stray file outside the results folder)."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _shell_commands(conf: Path, env, cwd: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--configfile", str(conf)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [ln.split("Shell command: ", 1)[1] for ln in out.stdout.splitlines()
            if ln.startswith("Shell command: ") and ln != "Shell command: None"]


@pytest.mark.parametrize("preset", ["config/config.yaml", "config/paper.yaml", "config/pfi.yaml"])
def test_every_path_with_a_space_stays_one_argument(tmp_path, env_path, preset, workflow_dir):
    root = tmp_path / "with space"
    cfg = yaml.safe_load((REPO / preset).read_text())
    cfg["results_dir"] = str(root / "res")
    cfg["storage"] = {"shared": str(root / "shared"), "local": str(root / "local")}
    conf = tmp_path / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmds = _shell_commands(conf, env_path, workflow_dir)
    assert len(cmds) > 5
    for cmd in cmds:
        tokens = shlex.split(cmd)
        split = [t for t in tokens if t.endswith("/with") or t.startswith("space/")]
        assert not split, f"a path was split at its space in: {cmd[:500]}"
        assert any(str(root) in t for t in tokens), cmd[:500]
