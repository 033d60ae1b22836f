"""The rules read the typed config: a schema-valid config without the optional `analysis`
section (which crashed the allocate rule before) gets the schema's defaults in the commands."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_allocate_rule_without_analysis_keys_uses_the_schema_defaults(tmp_path, env_path):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    del cfg["analysis"]  # every key of it is optional
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p",
                          "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "1",
                          "results/demo/tables/allocation.csv"],
                         cwd=tmp_path, env=env_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert ("--cuts 0,0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4 --workloads 500 --jobs 100 --mix random"
            in text)
    assert "-o results/demo/tables/pfi.csv --mc 2000" in text
