"""The workflow's `check` rule runs `wattlife check` with the workload's kind on a cell before its
attribution: a good cell passes (check.txt written), a damaged one fails the job with the finding
in the cell's check.log."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# a tiny image-classification-like workload marking what workloads/image.py marks
WORK = ("import json, os, pathlib, time\nfrom wattlife.markers import phase, step\n"
        "with phase('model_load'):\n    time.sleep(0.02)\n"
        "for i in range(4):\n"
        "    with step(items=4):\n"
        "        for name in ('data_load', 'h2d', 'forward', 'backward', 'optimizer'):\n"
        "            with phase(name):\n                time.sleep(0.005)\n"
        "w = pathlib.Path(os.environ['WATTLIFE_EVENTS']).parent / 'work'\n"
        "w.mkdir(exist_ok=True)\n"
        "(w / 'summary.json').write_text(json.dumps({'steps': 4, 'throughput': 1.0,\n"
        "    'throughput_unit': 'images/s (all ranks)', 'classes': 3}))\n")

REPO = Path(__file__).resolve().parents[2]
CELL = "results/demo/runs/resnet/shared/ckpt-on/r1"


def _check_job(workdir: Path, env: dict) -> subprocess.CompletedProcess:
    # only the check rule: the cell's files are taken as they are (no training is started)
    return subprocess.run([sys.executable, "-m", "snakemake", f"{CELL}/check.txt",
                           "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--cores", "1",
                           "--allowed-rules", "check"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_check_rule_passes_a_good_cell_and_fails_a_broken_one(tmp_path, env_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text((REPO / "config/config.yaml").read_text())
    assert yaml.safe_load((REPO / "config/config.yaml").read_text())["workloads"]["resnet"][
        "kind"] == "image_classification"
    cell = tmp_path / CELL
    cell.mkdir(parents=True)
    env = {**env_path, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("WATTLIFE_EVENTS", None)
    made = subprocess.run([sys.executable, "-m", "wattlife.cli", "run", "--trace",
                           str(cell / "trace.csv"), "--events", str(cell / "events.csv"),
                           "--gpu", "sim", "--cpu", "estimate", "--idle-s", "0.1", "--",
                           sys.executable, "-c", WORK], env=env, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr

    good = _check_job(tmp_path, env)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    assert "ok (0 error(s)" in (cell / "check.txt").read_text()

    # damage: no `step` rows left, so the image workload's required phase is missing
    events = (cell / "events.csv").read_text().splitlines()
    (cell / "events.csv").write_text("\n".join(r for r in events if ",step," not in r) + "\n")
    (cell / "check.txt").unlink()
    bad = _check_job(tmp_path, env)
    assert bad.returncode != 0
    log = (cell / "check.log").read_text()
    assert "step" in log and "events.csv" in log and "error" in log, log
    assert not (cell / "check.txt").exists()
