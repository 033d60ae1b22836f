"""One's own script, first class: the worked examples (examples/) through `wattlife run`,
`wattlife attribute RUN_DIR` and `wattlife figures RUN_DIR` on the CPU (hf_trainer.py here;
torch_loop.py where README.md runs it, tests/project/test_readme.py, with the same checks); a run
needs no matrix keys, gets a named folder of its own and a measured idle baseline; energy per item
and throughput come from the events' `step(items=...)`, with or without the suite's summary.json."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from wattlife.analysis.aggregate import collect_phases
from wattlife.run.naming import default_run_dir, script_name

REPO = Path(__file__).resolve().parents[2]


def _wattlife(args: list[str], cwd: Path, env: dict, timeout: float = 600):
    out = subprocess.run([sys.executable, "-m", "wattlife.cli", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("example, steps, per_step", [
    ("hf_trainer.py", 8, {"forward", "backward", "optimizer"})])
def test_an_example_runs_and_gives_per_phase_and_per_item_energy(tmp_path, env_path, example,
                                                                  steps, per_step):
    run = tmp_path / "run"
    _wattlife(["run", "-o", str(run), "--idle-s", "0.3", "--gpu", "none", "--cpu", "estimate",
               "--", sys.executable, str(REPO / "examples" / example), "--steps", str(steps)],
              tmp_path, env_path)
    shown = _wattlife(["attribute", str(run)], tmp_path, env_path).stdout
    assert "J/item" in shown and "items/s (all ranks)" in shown, shown
    ph = pd.read_csv(run / "tables" / "phase_summary.csv")
    assert per_step <= set(ph["phase"]), set(ph["phase"])
    ev = pd.read_csv(run / "events.csv")
    batch = ev.loc[ev["phase"] == "step", "items"].iloc[0]
    steady = steps - 3  # the first 3 steps are warm-up (contracts.warmup_count)
    assert set(ph["items"].dropna()) == {batch * steady}  # the events' items, steady steps
    fwd = ph[(ph["phase"] == "forward") & (ph["device_kind"] == "cpu")].iloc[0]
    assert fwd["energy_per_item_j"] == pytest.approx(fwd["energy_j"] / (batch * steady))
    assert pd.read_csv(run / "tables" / "throughput.csv")["throughput"].iloc[0] > 0
    figs = _wattlife(["figures", str(run)], tmp_path, env_path).stdout
    assert str(run / "figures" / "fig1_phase_energy_time.png") in figs
    assert set(pd.read_csv(run / "tables" / "phases.csv")["workload"]) == {"run"}  # its id


def test_a_plain_run_gets_a_named_folder_and_a_measured_idle_baseline(tmp_path, env_path):
    """No --trace/--events/--cell/--idle-s: runs/<script>-<UTC time>/, its name the run id, the
    schema's idle baseline (2 s) measured before the command."""
    script = tmp_path / "my_train.py"
    script.write_text("from wattlife.markers import step\nwith step(items=4):\n    pass\n")
    out = _wattlife(["run", "--gpu", "none", "--cpu", "estimate", "--", sys.executable,
                     str(script)], tmp_path, env_path)
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("my_train-") and run.name.endswith("Z"), run.name
    assert f"{run.relative_to(tmp_path)}" in out.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["run_id"] == run.name and meta["cell"] == {}
    assert meta["sampler"]["settings"]["idle_baseline_s"] == 2.0
    window = meta["idle_baseline"]
    assert window["end_ns"] - window["start_ns"] >= 1.9e9  # measured, not skipped
    assert meta["workload_start_ns"] >= window["end_ns"]


def test_run_names_follow_the_script():
    assert script_name(["python", "train.py", "--lr", "1"]) == "train"
    assert script_name(["python3", "-m", "pkg.finetune"]) == "finetune"
    assert script_name(["torchrun", "--nproc-per-node", "2", "a/b/pretrain.py"]) == "pretrain"
    assert script_name(["./bench", "-x"]) == "bench"
    assert default_run_dir(["python", "t.py"], "runs", now=0).name == "t-19700101T000000Z"


def test_a_second_run_in_the_same_second_gets_its_own_folder(tmp_path):
    first = default_run_dir(["python", "t.py"], tmp_path, now=0)
    first.mkdir()
    assert default_run_dir(["python", "t.py"], tmp_path, now=0).name == "t-19700101T000000Z-2"


def _phases_run(root: Path, summary: dict | None, warmup_row: bool) -> Path:
    """A run folder: events of 8 steps of 32 items (the 3 first warm-up), one forward of 80 J."""
    root.mkdir()
    ev = [{"run_id": "mine", "host": "h", "rank": 0, "phase": "step", "start_ns": i * 10**9,
           "end_ns": i * 10**9 + 5 * 10**8, "step": i, "items": 32.0} for i in range(8)]
    pd.DataFrame(ev).to_csv(root / "events.csv", index=False)
    rows = [("forward", 80.0)] + ([("warmup", 10.0)] if warmup_row else [])
    pd.DataFrame([{"run_id": "mine", "phase": p, "device_kind": "cpu", "device": "cpu0",
                   "energy_j": e, "energy_lo_j": e, "energy_hi_j": e, "time_s": 1.0,
                   "count": 3, "mean_power_w": e, "method": "integrate", "source": "estimate"}
                  for p, e in rows]).to_csv(root / "phases.csv", index=False)
    (root / "meta.json").write_text(json.dumps({"schema_version": 1, "run_id": "mine"}))
    if summary is not None:
        (root / "work").mkdir()
        (root / "work" / "summary.json").write_text(json.dumps(summary))
    return root


def test_items_come_from_the_events_steps_without_a_summary(tmp_path):
    df = collect_phases([_phases_run(tmp_path / "r", None, warmup_row=True) / "phases.csv"])
    assert set(df["items"]) == {5 * 32.0} and set(df["items_basis"]) == {"events: steady steps"}
    assert df["throughput"].tolist() == pytest.approx([32 / 0.5] * len(df))  # steady steps
    assert set(df["throughput_unit"]) == {"items/s (all ranks)"}


def test_with_a_summary_the_events_still_count_the_items_the_phases_cover(tmp_path):
    """The suite's summary counts every step (8 x 32); the per-step phases of a table with
    warm-up rows cover the 5 steady ones: per-item energy divides by those (it was 7.5 % low in
    the H200 tables); a table without warm-up rows divides by every step's items."""
    summary = {"epochs_run": 1.0, "train_items": 256, "throughput": 60.0,
               "throughput_unit": "images/s (all ranks)", "throughput_basis": "step"}
    steady = collect_phases([_phases_run(tmp_path / "a", summary, True) / "phases.csv"])
    assert set(steady["items"]) == {160.0} and set(steady["throughput"]) == {60.0}
    raw = collect_phases([_phases_run(tmp_path / "b", summary, False) / "phases.csv"])
    assert set(raw["items"]) == {256.0} and set(raw["items_basis"]) == {"events: all steps"}
