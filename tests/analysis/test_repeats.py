"""Repeats and intervals (issue 27): hand-made tables whose intervals and significance are known,
per-item energy, the figures' captions, and the order in which the workflow runs repeats."""

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wattlife.analysis.aggregate import (
    device_share,
    phase_summary,
    storage_checkpoint_deltas,
    throughput_summary,
)
from wattlife.analysis.repeats import significant, t_interval, welch_interval
from wattlife.jobs import repeat_priority

REPO = Path(__file__).resolve().parents[2]


def test_t_interval_of_known_values_and_none_with_one_repeat():
    n, mean, sd, lo, hi = t_interval([9.0, 10.0, 11.0])  # sd 1, t(0.975, 2) = 4.3027
    assert (n, mean, sd) == (3, 10.0, 1.0)
    assert lo == pytest.approx(10 - 4.302653 / math.sqrt(3), rel=1e-6)
    assert hi == pytest.approx(10 + 4.302653 / math.sqrt(3), rel=1e-6)
    n, mean, sd, lo, hi = t_interval([7.0])
    assert (n, mean) == (1, 7.0) and all(math.isnan(v) for v in (sd, lo, hi))  # never invented


def test_welch_interval_of_known_values():
    diff, lo, hi = welch_interval([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])  # var 1/3 + 0, dof 2
    half = 4.302653 * math.sqrt(1 / 3)
    assert diff == 2.0 and lo == pytest.approx(2 - half) and hi == pytest.approx(2 + half)
    assert significant(lo, hi) is False  # 2 ± 2.48 includes 0
    assert all(math.isnan(v) for v in welch_interval([1.0], [0.0, 1.0])[1:])
    assert significant(math.nan, math.nan) is None


def _phases(effect_j: float, noise_j: float, repeats: int, seed: int = 0) -> pd.DataFrame:
    """A two-workload-free matrix: one workload, shared/local x checkpoint off, `repeats` runs;
    `forward` costs 100 J (+ effect_j when local) plus noise; `stage_copy` only when local."""
    rng = np.random.default_rng(seed)
    rows = []
    for storage in ("shared", "local"):
        for r in range(1, repeats + 1):
            for phase in ("forward", "process_startup") + (("stage_copy",) if storage == "local"
                                                          else ()):
                base = {"forward": 100.0, "process_startup": 50.0, "stage_copy": 30.0}[phase]
                e = base + (effect_j if (phase == "forward" and storage == "local") else 0.0)
                for kind, share in (("gpu", 0.8), ("cpu", 0.2)):
                    val = (e + rng.normal(0, noise_j)) * share
                    rows.append({"run_id": f"{storage}-r{r}", "phase": phase, "device_kind": kind,
                                 "device": f"{kind}0", "energy_j": val, "energy_lo_j": val - 1,
                                 "energy_hi_j": val + 1, "time_s": 1.0, "count": 1,
                                 "mean_power_w": val, "method": "integrate",
                                 "source": "sim" if kind == "gpu" else "estimate",
                                 "workload": "resnet", "storage": storage, "checkpoint": "off",
                                 "repeat": r, "items": 1000.0,
                                 "throughput_unit": "images/s (all ranks)",
                                 "throughput": 500.0 + rng.normal(0, 5),
                                 "throughput_basis": "step", "throughput_wall": 400.0})
    return pd.DataFrame(rows)


def _effect(deltas: pd.DataFrame, phase: str) -> pd.Series:
    return deltas[(deltas["storage"] == "local") & (deltas["phase"] == phase)].iloc[0]


def test_an_effect_of_zero_with_noise_is_not_significant_and_a_large_one_is():
    zero = _effect(storage_checkpoint_deltas(_phases(0.0, 5.0, 5)), "forward")
    assert zero["n"] == 5 and zero["n_base"] == 5
    assert zero["d_energy_lo_j"] < 0 < zero["d_energy_hi_j"] and zero["significant"] is False
    large = _effect(storage_checkpoint_deltas(_phases(60.0, 5.0, 5)), "forward")
    assert large["d_energy_lo_j"] > 0 and large["significant"] is True
    assert large["d_energy_j"] == pytest.approx(60.0, abs=12)
    assert large["effect_interval"].startswith("Welch t95")
    # a phase the baseline lacks counts 0 J there: its effect is its own energy
    stage = _effect(storage_checkpoint_deltas(_phases(0.0, 5.0, 5)), "stage_copy")
    assert stage["d_energy_j"] == pytest.approx(30.0, abs=8) and stage["significant"] is True


def test_one_repeat_gives_nan_intervals_and_no_significance():
    ph = _phases(60.0, 5.0, 1)
    eff = _effect(storage_checkpoint_deltas(ph), "forward")
    assert math.isnan(eff["d_energy_lo_j"]) and math.isnan(eff["d_energy_hi_j"])
    assert eff["significant"] is None
    summ = phase_summary(ph)
    assert (summ["n"] == 1).all() and summ["energy_repeat_lo_j"].isna().all()
    assert summ["energy_lo_j"].notna().all()  # the per-run measurement interval stays apart
    share = device_share(ph)
    assert (share["n"] == 1).all() and share["share_repeat_lo"].isna().all()
    thr = throughput_summary(ph)
    assert (thr["n"] == 1).all() and thr["throughput_repeat_lo"].isna().all()


def test_summaries_carry_n_mean_interval_and_per_item_energy():
    ph = _phases(0.0, 5.0, 3)
    summ = phase_summary(ph)
    fwd = summ[(summ["storage"] == "shared") & (summ["phase"] == "forward")
               & (summ["device_kind"] == "gpu")].iloc[0]
    runs = ph[(ph["storage"] == "shared") & (ph["phase"] == "forward")
              & (ph["device_kind"] == "gpu")]["energy_j"]
    n, mean, _, lo, hi = t_interval(runs.to_numpy())
    assert (fwd["n"], fwd["energy_j"], fwd["energy_repeat_lo_j"], fwd["energy_repeat_hi_j"]) == \
        pytest.approx((n, mean, lo, hi))
    assert fwd["interval"] == "t95 across repeats" and fwd["item_unit"] == "J/image"
    assert fwd["energy_per_item_j"] == pytest.approx(mean / 1000.0)  # per-step: J per image
    start = summ[summ["phase"] == "process_startup"]  # once per run: no per-item figure
    assert start["energy_per_item_j"].isna().all() and (start["item_unit"] == "").all()
    share = device_share(ph)
    assert share.groupby(["storage"])["share"].sum().to_numpy() == pytest.approx([1.0, 1.0])
    assert share["share_repeat_lo"].notna().all()
    thr = throughput_summary(ph)
    assert (thr["n"] == 3).all() and (thr["throughput_repeat_lo"] < thr["throughput"]).all()


def test_a_repeat_without_a_phase_counts_zero_there():
    ph = _phases(0.0, 1.0, 3)
    ph = ph[~((ph["storage"] == "local") & (ph["repeat"] == 3) & (ph["phase"] == "stage_copy"))]
    summ = phase_summary(ph)
    stage = summ[(summ["phase"] == "stage_copy") & (summ["device_kind"] == "gpu")].iloc[0]
    assert stage["n"] == 3 and stage["energy_j"] == pytest.approx(2 / 3 * 24.0, abs=2)


def test_tokens_are_counted_per_thousand():
    ph = _phases(0.0, 0.0, 2)
    ph["throughput_unit"] = "tokens/s (all ranks)"
    summ = phase_summary(ph)
    fwd = summ[(summ["phase"] == "forward") & (summ["device_kind"] == "gpu")].iloc[0]
    assert fwd["item_unit"] == "J/1k tokens"
    assert fwd["energy_per_item_j"] == pytest.approx(80.0 / 1000 * 1000)


def test_figures_say_what_their_intervals_are(tmp_path):
    from wattlife.figures.lifecycle import effect_caption, fig_phase_energy, fig_storage_checkpoint

    one = storage_checkpoint_deltas(_phases(60.0, 5.0, 1))
    assert effect_caption(one).startswith("n = 1: no interval")
    three = storage_checkpoint_deltas(_phases(60.0, 5.0, 3))
    assert "within run-to-run noise" in effect_caption(three)
    assert "Welch 95 %" in effect_caption(three)
    for n, d in ((1, one), (3, three)):
        made = fig_storage_checkpoint(d, tmp_path / f"fig3-{n}")
        made += fig_phase_energy(phase_summary(_phases(60.0, 5.0, n)), tmp_path / f"fig1-{n}")
        assert all(p.stat().st_size > 5000 for p in made)


def test_repeat_priority_runs_earlier_repeats_first():
    assert [repeat_priority(r, 3) for r in (1, 2, 3)] == [2, 1, 0]
    assert repeat_priority(1, 1) == 0  # one repeat: every job's default priority


@pytest.mark.slow
def test_the_workflow_has_one_rule_per_kind_with_the_repeat_a_wildcard(tmp_path, env_path,
                                                                       workflow_dir):
    """Repeat r of every cell has priority over repeat r + 1 of any where Snakemake evaluates a
    priority function of the wildcards (9.27.1); one rule per workload kind, whatever the
    repeats (issue 40: one rule per repeat index dropped --exclusive and slowed the DAG)."""
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"results_dir": str(tmp_path / "res"),
                                    "execution": {"repeats": 3}}))
    code = ("import sys\nfrom pathlib import Path\nfrom snakemake.api import SnakemakeApi\n"
            "from snakemake.settings.types import ConfigSettings, OutputSettings, "
            "ResourceSettings, StorageSettings\n"
            "with SnakemakeApi(OutputSettings()) as api:\n"
            "    wf = api.workflow(resource_settings=ResourceSettings(cores=1), "
            "config_settings=ConfigSettings(configfiles=[Path('config/config.yaml'), "
            "Path(sys.argv[1])]), "
            "storage_settings=StorageSettings(), snakefile=Path('Snakefile'), workdir=Path.cwd())\n"
            "    for r in wf._workflow.rules:\n"
            "        if r.name.startswith('execute'):\n"
            "            p = r.priority\n"
            "            wc = __import__('types').SimpleNamespace\n"
            "            got = [p(wc(repeat=str(n))) for n in (1, 2, 3)] if callable(p) else p\n"
            "            print('RULE', r.name, repr(got).replace(' ', ''))\n")
    out = subprocess.run([sys.executable, "-c", code, str(conf)], cwd=workflow_dir, env=env_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rules = {line.split()[1]: line.split()[2] for line in out.stdout.splitlines()
             if line.startswith("RULE")}
    from snakemake.rules import Rule

    want = "[2,1,0]" if hasattr(Rule, "expand_priority") else "0"  # 9.14.8: numbers only
    assert rules == {"execute": want, "execute_tokenizer": want}, rules


def test_the_h200_run_executed_repeat_r_of_every_cell_before_repeat_r_plus_1():
    """results/reference/h200/workflow-repeats/snakemake.log: the order in which Snakemake started
    the 12 training cells on the H200 (4 cells x 3 repeats) is repeat-major."""
    log = (REPO / "results/reference/h200/workflow-repeats/snakemake.log").read_text()
    started = re.findall(r"^localrule (execute\w*):\n(?:    .*\n)*?    wildcards: workload=(\w+), "
                         r"storage=(\w+), checkpoint=(\w+), repeat=(\d+)", log, re.M)
    repeats = [int(r[-1]) for r in started]
    assert len(started) == 12 and repeats == sorted(repeats), repeats
    assert {(r[0], r[-1]) for r in started} == {("execute", "1"), ("execute_r2", "2"),
                                                 ("execute_r3", "3")}
    assert "snakemake rc=0" in log and "64 of 64 steps (100%) done" in log


def test_presets_that_compare_storage_or_checkpoint_repeat_each_cell_three_times():
    from wattlife.config import load_config

    for name in ("paper.yaml", "gpu1.yaml"):
        ex = load_config(REPO / "config" / name)["execution"]
        assert len(ex["storage"]) * len(ex["checkpoint"]) > 1 and ex["repeats"] >= 3, name
    for name in ("gpu1-repeats.yaml", "gpu1-repeats-storage.yaml"):  # overlays of gpu1.yaml
        assert yaml.safe_load((REPO / "config" / name).read_text())["execution"]["repeats"] >= 3
    demo = yaml.safe_load((REPO / "config/config.yaml").read_text())["execution"]
    assert demo["repeats"] == 1  # the demo's figures say "n = 1: no interval" (see above)
