"""The phase registry (`contracts.phases.PHASES`) is the one place a phase is declared: today's
lists keep their values and order, a phase added as one row of the table reaches the figures'
order and colours, the waiting and per-item classifications, the tables and `wattlife check`, and
no list of phase names is written anywhere else in src/."""

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import package_with_rows
from wattlife.contracts import phases as registry

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "wattlife"

#: two fake phases, added to the table as one developer would: one row each
FAKE_ROWS = ('    PhaseSpec("fake_wait", lifecycle=True, per_step=True, waiting=15),\n'
             '    PhaseSpec("fake_beside", concurrent=True, drawn=False),\n')

#: a training script marking both: fake_wait inside each step, fake_beside over two steps
SCRIPT = """
import time
from wattlife.contracts.clock import now_ns
from wattlife.markers import concurrent, phase, step
for i in range(8):
    with step(items=4):
        if i == 5:
            t0 = now_ns()
        with phase("fake_wait"):
            time.sleep(0.02)
        with phase("forward"):
            time.sleep(0.02)
    if i == 6:
        concurrent("fake_beside", t0, now_ns())
with phase("finalize"):
    time.sleep(0.02)
"""

#: what the package, imported afresh, makes of the two names
PROBE = """
import json, sys
import pandas as pd
from wattlife.analysis.waiting import waiting_table
from wattlife.contracts import LIFECYCLE_PHASES, PER_STEP_PHASES, WAITING_PHASES
from wattlife.figures.common import PHASE_PALETTE, PHASE_ORDER
phases = pd.read_csv(sys.argv[1])
print(json.dumps({
    "order": PHASE_ORDER, "colour": PHASE_PALETTE.get("fake_wait"),
    "today": [PHASE_PALETTE[p] for p in PHASE_ORDER if not p.startswith("fake")],
    "lifecycle": "fake_wait" in LIFECYCLE_PHASES, "per_step": "fake_wait" in PER_STEP_PHASES,
    "waiting": "fake_wait" in WAITING_PHASES,
    "waiting_rows": sorted(set(waiting_table(phases)["phase"])),
}))
"""


def test_todays_lists_keep_their_values_and_order():
    from wattlife import contracts as c
    from wattlife.figures.common import PHASE_ORDER

    assert c.LIFECYCLE_PHASES == [
        "download_dataset", "download_model", "stage_copy", "model_load", "data_load", "h2d",
        "forward", "backward", "optimizer", "grad_sync", "validation", "checkpoint",
        "checkpoint_stage", "checkpoint_wait", "upload"]
    assert c.CONCURRENT_PHASES == ("checkpoint_write",)
    assert c.WRAPPER_PHASES == ("idle_baseline", "process_startup", "process_exit")
    assert c.PER_STEP_PHASES == ("data_load", "h2d", "forward", "backward", "optimizer",
                                 "grad_sync")
    assert c.WAITING_PHASES == (
        "process_startup", "setup", "tokenize", "model_load", "stage_copy", "data_load",
        "checkpoint", "checkpoint_stage", "checkpoint_wait", "compile", "finalize",
        "process_exit", "unattributed", "idle")
    assert PHASE_ORDER == [
        "idle_baseline", "process_startup", "setup", "download_dataset", "download_model",
        "stage_copy", "tokenize", "model_load", "data_load", "h2d", "forward", "backward",
        "optimizer", "grad_sync", "validation", "checkpoint", "checkpoint_stage",
        "checkpoint_wait", "upload", "compile", "warmup", "step", "finalize", "process_exit",
        "unattributed"]
    assert (c.STEP, c.COMPILE, c.WARMUP, c.IDLE, c.RESIDUAL, c.UNATTRIBUTED) == (
        "step", "compile", "warmup", "idle", "deconvolution_residual", "unattributed")


def test_the_table_is_well_formed():
    names = [s.name for s in registry.PHASES]
    assert len(names) == len(set(names)), "a phase declared twice"
    places = [s.waiting for s in registry.PHASES if s.waiting]
    assert len(places) == len(set(places)), "two waiting phases share a place in the order"
    assert registry.phase_spec("checkpoint_write").concurrent
    assert registry.phase_spec("my own phase") is None  # a user's name: no flags, still valid


def _wattlife(args: list[str], cwd: Path, env: dict, ok: bool = True):
    out = subprocess.run([sys.executable, "-m", "wattlife.cli", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    assert (out.returncode == 0) == ok, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _analyse(run: Path, src: Path, env: dict, tables: Path | None = None) -> dict:
    """`wattlife attribute` of `run` with the package at `src` (exit code and output), the
    error findings of `wattlife check --json`, and the probe of `tables`/phases.csv (default:
    the run's own)."""
    env = {**env, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-m", "wattlife.cli", "attribute", str(run)],
                          cwd=run.parent, env=env, capture_output=True, text=True, timeout=600)
    out = {"attribute": done.returncode, "attribute_out": done.stdout + done.stderr}
    check = subprocess.run([sys.executable, "-m", "wattlife.cli", "check", "--json", str(run)],
                           cwd=run.parent, env=env, capture_output=True, text=True, timeout=600)
    out["errors"] = [f for f in json.loads(check.stdout) if f["severity"] == "error"]
    tables = tables or run / "tables"
    probe = subprocess.run([sys.executable, "-c", PROBE, str(tables / "phases.csv")],
                           cwd=run.parent, env=env, capture_output=True, text=True, timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    return {**out, **json.loads(probe.stdout)}


@pytest.mark.slow
def test_a_phase_added_as_one_row_flows_to_figures_tables_waiting_and_check(tmp_path, env_path):
    run = tmp_path / "run"
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    _wattlife(["run", "-o", str(run), "--idle-s", "0.3", "--gpu", "none", "--cpu", "estimate",
               "--", sys.executable, str(script)], tmp_path, {**env_path,
                                                             "PYTHONPATH": str(REPO / "src")})
    plain = tmp_path / "plain"
    shutil.copytree(run, plain)
    copy = package_with_rows(tmp_path / "src", "contracts/phases.py", "PHASES", FAKE_ROWS)
    fake = _analyse(run, copy, env_path)
    assert fake["attribute"] == 0, fake["attribute_out"]
    # figures: the package imports, the new phase has its place and a colour of its own
    assert fake["order"][-1] == "fake_wait" and "fake_beside" not in fake["order"]
    assert fake["colour"] is not None and fake["colour"] not in fake["today"]
    # tables: a row of its own, energy per item (per-step flag), a waiting row (waiting flag)
    assert fake["lifecycle"] and fake["per_step"] and fake["waiting"]
    assert "fake_wait" in set(pd.read_csv(run / "phases.csv")["phase"])
    summary = pd.read_csv(run / "tables" / "phase_summary.csv")
    assert (summary.loc[summary["phase"] == "fake_wait", "energy_per_item_j"] > 0).all()
    assert "fake_wait" in fake["waiting_rows"]
    # concurrent flag: out of the phase tree (no row) and accepted by `wattlife check`
    assert "fake_beside" not in set(pd.read_csv(run / "phases.csv")["phase"])
    # (a loaded machine may give trace findings of its own; the events must give none)
    assert not [f for f in fake["errors"] if f["code"].startswith("events.")], fake["errors"]
    # the same run under today's table: none of it, so the flow above is the registry's doing
    old = _analyse(plain, REPO / "src", env_path, tables=run / "tables")
    assert "fake_wait" not in old["order"] and old["colour"] is None
    assert not (old["lifecycle"] or old["per_step"] or old["waiting"])
    assert "fake_wait" not in old["waiting_rows"]
    # an overlap that does not nest: refused by attribution and by `wattlife check`
    assert old["attribute"] != 0 and "'fake_beside'" in old["attribute_out"]
    assert [f for f in old["errors"] if f["code"] == "events.overlap"
            and "'fake_beside'" in f["message"]], old["errors"]


def _phase_lists(tree: ast.AST, known: set[str]) -> list[tuple[int, list[str]]]:
    """Every list, tuple or set literal holding two or more of the `known` phase names as
    string literals: (line, the names). (Dict keys are not phase lists: a checkpoint's
    `{"model", "optimizer", "step"}` state is not one.)"""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            continue
        names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in known]
        if len(names) >= 2:
            found.append((node.lineno, names))
    return found


def test_no_list_of_phase_names_is_written_outside_the_registry():
    known = {s.name for s in registry.PHASES}
    home = SRC / "contracts" / "phases.py"
    found = [f"{p.relative_to(REPO)}:{line}: {names}"
             for p in sorted(SRC.rglob("*.py")) if p != home
             for line, names in _phase_lists(ast.parse(p.read_text(), str(p)), known)]
    assert not found, "phase names listed outside contracts/phases.py (derive from PHASES):\n" \
        + "\n".join(found)


def test_the_scan_finds_a_list_of_phase_names():
    tree = ast.parse('X = ("forward", "backward")\nY = f(["data_load", "h2d"])\n'
                     'Z = ("forward", "other")\nS = {"step": 1, "optimizer": 2}\n')
    assert [line for line, _ in _phase_lists(tree, {"forward", "backward", "data_load", "h2d",
                                                    "step", "optimizer"})] == [1, 2]


def test_every_phase_gets_a_colour_today_s_unchanged_and_a_pinned_one_kept(monkeypatch):
    from wattlife.figures import common

    today = dict(common.PHASE_PALETTE)
    many = registry.PHASES + tuple(registry.PhaseSpec(f"extra{i}") for i in range(80))
    monkeypatch.setattr(common, "PHASES", many)
    colours = common._phase_colours()
    assert len(colours) == 25 + 80 and {k: colours[k] for k in today} == today
    assert len(set(colours.values())) == len(common._COLOURS)  # distinct until the palette cycles
    assert colours == common._phase_colours()  # the same on every call
    pinned = registry.PHASES + (registry.PhaseSpec("mine", colour="#123456"),)
    monkeypatch.setattr(common, "PHASES", pinned)
    assert common._phase_colours()["mine"] == (0x12 / 255, 0x34 / 255, 0x56 / 255)
