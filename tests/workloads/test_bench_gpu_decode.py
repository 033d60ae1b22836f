"""benchmarks/decode_rates.py's summary over repeats (`--repeats`): intervals per setting and
each GPU setting against `cpu`, from a hand-made table with a known answer."""

import sys

import pandas as pd
import pytest
from scipy import stats

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def _table(rates: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for setting, values in rates.items():
        for r, v in enumerate(values, 1):
            rows.append({"setting": setting, "repeat": r, "images_per_s_step": v,
                         "share_of_synthetic": v / 400.0, "gpu_data_load_j": 1.0,
                         "share_of_eager_synthetic": v / 500.0})
    return pd.DataFrame(rows)


def test_settings_summary_intervals_and_readings():
    from gpu_decode_table import settings_summary

    s = settings_summary(_table({"cpu": [100, 110, 90], "gpu": [200, 210, 190],
                                 "gpu-b": [95, 115, 92], "gpu-one": [300]})).set_index("setting")
    half = stats.t.ppf(0.975, 2) * 10 / 3 ** 0.5  # sd 10, n 3
    assert s.loc["cpu", "n"] == 3 and s.loc["cpu", "images_per_s_step"] == pytest.approx(100)
    assert s.loc["cpu", "rate_lo"] == pytest.approx(100 - half)
    assert s.loc["gpu", "share_of_synthetic"] == pytest.approx(0.5)
    assert s.loc["gpu", "share_of_eager_synthetic"] == pytest.approx(0.4)
    assert s.loc["gpu", "eager_share_hi"] - 0.4 == pytest.approx(half / 500)
    assert s.loc["gpu", "vs_cpu"] == pytest.approx(100)
    assert s.loc["gpu", "vs_cpu_reading"] == "differs"
    assert s.loc["gpu-b", "vs_cpu_reading"] == "within noise"
    assert s.loc["gpu-one", "vs_cpu_reading"] == "n = 1" and s.loc["gpu-one", "n"] == 1
    assert pd.isna(s.loc["cpu", "vs_cpu"])  # the baseline is not compared with itself


def test_cell_names_compose_their_settings():
    from decode_rates import TOKENS, cell_settings

    assert cell_settings("cpu") == ("cpu", 0, "", False)
    decode, more, prelude, graphs = cell_settings("gpu-no-helpers-graphs-priority-in-flight")
    assert (decode, more, graphs) == ("gpu", 0, True)
    assert prelude == (TOKENS["no-helpers"][1] + TOKENS["priority"][1]
                       + TOKENS["in-flight"][1])
    assert cell_settings("gpu-more-helpers-batched")[1:] == (2, TOKENS["batched"][1], False)
    # the committed calls' names still read as they ran
    assert "g.PACK = False" in cell_settings("gpu-graphs-bytes")[2]
    assert "a.augment(" in cell_settings("gpu-per-image")[2]
    with pytest.raises(ValueError, match="'turbo' does not start with a setting"):
        cell_settings("gpu-graphs-turbo")
    with pytest.raises(ValueError, match="starts with cpu or gpu"):
        cell_settings("tpu-graphs")


def test_select_best_takes_the_highest_mean_share_of_a_gpu_setting():
    from gpu_decode_table import select_best

    # cpu screens highest by rate but is not a candidate; gpu-b has the best mean share
    t = _table({"cpu": [900], "gpu": [200, 240], "gpu-b": [230, 230], "gpu-fail": [float("nan")]})
    choice = select_best(t)
    assert choice["setting"] == "gpu-b" and choice["basis"] == "share_of_synthetic"
    assert choice["value"] == pytest.approx(230 / 400)
    assert choice["by_setting"] == pytest.approx({"gpu": 220 / 400, "gpu-b": 230 / 400})
    # a CPU rehearsal has no synthetic rate: the step rate decides, and says so
    t["share_of_synthetic"] = None
    assert select_best(t)["basis"] == "images_per_s_step"
    assert select_best(_table({"cpu": [100]})) is None
    assert select_best(pd.DataFrame([{"setting": "gpu", "error": "died"}])) is None


def _fake_call(monkeypatch, tmp_path, rates: dict[str, list[float]], argv: list[str]):
    """Run decode_rates.main with its runs replaced by hand-made rates (a cell's n-th run
    gives rates[setting][n]; synthetic 400 eager, 500 with graphs); returns (table, summary)."""
    import json

    import decode_rates as bench

    runs: dict[str, int] = {}

    def fake_cell(work, run, cfg, *args, **kwargs):
        setting = run.rsplit("-r", 1)[0]
        runs[setting] = runs.get(setting, -1) + 1
        return {"cell": run, "throughput": rates[setting][runs[setting]]}

    def fake_row(out, run, r, synthetic):
        return {"cell": run, "images_per_s_step": r["throughput"], "gpu_data_load_j": 1.0,
                "share_of_synthetic": r["throughput"] / synthetic}

    def fake_synthetic(call, key, graphs=False):
        call.res[key] = {"images_per_s": 500.0 if graphs else 400.0}
        return call.res[key]["images_per_s"]

    monkeypatch.setattr(bench, "cell", fake_cell)
    monkeypatch.setattr(bench, "phase_row", fake_row)
    monkeypatch.setattr(bench, "synthetic_rate", fake_synthetic)
    monkeypatch.setattr(bench, "make_tree", lambda *a: {"images": 0})
    monkeypatch.setattr(bench, "DRY", True)  # no decoder probe
    monkeypatch.setattr(sys, "argv", ["decode_rates.py", "--out", str(tmp_path / "o"),
                                      "--work", str(tmp_path / "w"), *argv])
    bench.main()
    out = tmp_path / "o"
    summary = out / "gpu_decode_summary.csv"
    return (pd.read_csv(out / "gpu_decode.csv"),
            pd.read_csv(summary) if summary.exists() else None,
            json.loads((out / "summary.json").read_text()))


def test_confirming_rounds_run_the_best_screened_gpu_cell_and_only_they_are_summarised(
        monkeypatch, tmp_path):
    # screening: gpu-graphs 400/500 = 0.8 beats gpu 300/400 = 0.75; cpu is no candidate
    rates = {"cpu": [390, 200, 210, 190], "gpu": [300], "gpu-graphs": [400, 450, 460, 440]}
    table, summary, res = _fake_call(
        monkeypatch, tmp_path, rates, ["--cells", "cpu,gpu,gpu-graphs", "--confirm", "3",
                                       "--confirm-with", "cpu"])
    assert res["selection"]["setting"] == "gpu-graphs"
    assert res["selection"]["value"] == pytest.approx(0.8)
    screen = table[table["stage"] == "screen"]
    confirm = table[table["stage"] == "confirm"]
    assert list(screen["cell"]) == ["cpu-r1", "gpu-r1", "gpu-graphs-r1"]
    assert sorted(confirm["repeat"].unique()) == [2, 3, 4]
    assert set(confirm["setting"]) == {"gpu-graphs", "cpu"}
    # confirming rounds need no eager synthetic rate unless an eager cell runs (cpu does)
    assert "synthetic-r2" in res and "synthetic-r2-graphs" in res
    s = summary.set_index("setting")
    assert s.loc["gpu-graphs", "n"] == 3  # the screening run (400) is not in the interval
    assert s.loc["gpu-graphs", "share_of_synthetic"] == pytest.approx(450 / 500)
    assert s.loc["gpu-graphs", "vs_cpu"] == pytest.approx(450 - 200)


def test_screening_keeps_room_for_the_confirming_rounds(monkeypatch, tmp_path):
    import decode_rates as bench

    a = bench.argparse.Namespace(work=str(tmp_path), repeats=1, confirm=2, budget_s=150.0,
                                 cells="cpu,gpu-graphs,gpu-graphs-batched", confirm_with="",
                                 ladder="")
    call = bench.Call(a, tmp_path)
    call.t0 -= 100  # 100 s used
    call.longest = {"gpu": 20.0, "cpu": 40.0, "synthetic": 5.0}
    assert call.fits("one more cell", gpu=1)  # 100 + 20 <= 150
    assert not call.fits("a cpu cell", cpu=2)  # 100 + 80 > 150
    # the confirming rounds: 2 gpu cells and their synthetic rate with graphs, 2 x 25 s
    call.reserve = bench.confirm_reserve(a)
    assert call.reserve == {"gpu": 2, "synthetic": 2}
    assert not call.fits("cell gpu of round 1", gpu=1)  # 100 + 20 + 50 > 150
    why = bench.json.loads((tmp_path / "summary.json").read_text())["stopped"]
    assert why[-1].startswith("cell gpu of round 1 not started: 100 s used, ~70 s needed")
    assert "reserve" in why[-1]
    a.budget_s = 0  # no limit
    assert call.fits("anything", gpu=100)


def test_a_cell_kind_not_run_yet_is_estimated_as_the_longest_cell_and_reserves_count_kinds(
        tmp_path):
    import decode_rates as bench

    a = bench.argparse.Namespace(work="/nonexistent", repeats=1, confirm=3, budget_s=0.0,
                                 cells="cpu,gpu,gpu-graphs", confirm_with="cpu", ladder="")
    call = bench.Call(a, tmp_path)
    assert call.estimate("gpu") == 0.0  # nothing run yet
    call.longest = {"cpu": 40.0, "synthetic": 25.0}
    assert call.estimate("gpu") == 40.0 and call.estimate("synthetic") == 25.0
    # cpu beside the chosen cell; eager for cpu, and graphs if a graph cell is chosen: 2 a round
    assert bench.confirm_reserve(a) == {"cpu": 3, "gpu": 3, "synthetic": 6}
    a.cells = "cpu,gpu"  # no graph candidate: the eager rate serves both
    assert bench.confirm_reserve(a) == {"cpu": 3, "gpu": 3, "synthetic": 3}
    a.ladder = "batched,graphs"  # unless a ladder step adds graphs
    assert bench.confirm_reserve(a)["synthetic"] == 6


def test_the_ladder_adds_each_step_to_the_best_cell_so_far(monkeypatch, tmp_path):
    rates = {"cpu": [200], "gpu": [300], "gpu-priority": [320], "gpu-priority-batched": [310],
             "gpu-priority-nice": [340, 330, 350]}
    table, summary, res = _fake_call(
        monkeypatch, tmp_path, rates, ["--cells", "cpu,gpu", "--ladder", "priority,batched,nice",
                                       "--confirm", "2"])
    screen = table[table["stage"] == "screen"]
    # batched did not beat gpu-priority, so nice was added to gpu-priority
    assert list(screen["setting"]) == ["cpu", "gpu", "gpu-priority", "gpu-priority-batched",
                                       "gpu-priority-nice"]
    assert (screen["repeat"] == 1).all() and screen["cell"].str.endswith("-r1").all()
    assert list(screen["ladder_step"].fillna("")) == ["", "", "priority", "batched", "nice"]
    assert res["selection"]["setting"] == "gpu-priority-nice"
    assert list(table.loc[table["stage"] == "confirm", "cell"]) == [
        "gpu-priority-nice-r2", "gpu-priority-nice-r3"]
    assert summary.set_index("setting").loc["gpu-priority-nice", "n"] == 2


def test_steps_rate_is_the_batch_over_the_summed_step_times(tmp_path):
    """A synthetic run's rate from its per-step record (train_loop.py --steps-csv)."""
    from gpu_decode_table import steps_rate

    (tmp_path / "s.csv").write_text("step,gpu_ms\n0,30.0\n1,28.0\n2,26.0\n")
    assert steps_rate(tmp_path / "s.csv") == pytest.approx(3 * 128 / 0.084)
