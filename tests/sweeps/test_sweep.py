import sys

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.curves import steady_state_se
from wattlife.config import SamplerSettings
from wattlife.devices.powercap import PowerCapController
from wattlife.simgpu_model import SimGpuModel, SimJob
from wattlife.sweeps import real
from wattlife.sweeps.real import sweep_command
from wattlife.sweeps.simulated import simulate_window, sweep_simulated

STEPS = ("import sys, time\nfrom wattlife.markers import phase, step\n"
         "for i in range(25):\n"
         "    with step(items=32):\n"
         "        with phase('forward'):\n            sum(range(300000))\n"
         "        with phase('backward'):\n            time.sleep(0.01)\n")


@pytest.mark.slow
def test_sweep_runs_each_cap_under_the_sampler_and_records_failures(tmp_path, monkeypatch):
    ctl = PowerCapController("simulated", state_file=tmp_path / "state.json")
    cfg = SamplerSettings.from_dict({"gpu": "sim", "cpu": "estimate", "idle_baseline_s": 0.0,
                                     "sim_gpu": {"mem_share": 0.1}})
    df = sweep_command("cpu-job", [sys.executable, "-c", STEPS], [250, 450, 700], ctl,
                       tmp_path / "sweep", cfg, warmup_frac=0.2, unit="images/s")
    assert list(df["cap_w"]) == [700, 450, 250]
    assert (df["status"] == "ok").all()
    assert (df["source"] == "sim").all() and (df["throughput"] > 0).all()
    # the simulated GPU obeys the cap: realised per-GPU power at or under it
    assert df.set_index("cap_w").loc[250, "power_w"] <= 250 + 1e-6
    assert df["power_w"].is_monotonic_decreasing
    assert ctl.dev.get(0) == 700 and not (tmp_path / "state.json").exists()

    bad = "import sys\nsys.exit(3)\n"
    df = sweep_command("broken", [sys.executable, "-c", bad], [300, 700], ctl, tmp_path / "s2", cfg)
    assert df["status"].str.startswith("failed").all() and df["throughput"].isna().all()


def _series(n: int, seed: int) -> np.ndarray:
    return 100 + np.random.default_rng(seed).normal(0, 5, n)


@pytest.mark.parametrize("rule,n_eff", [("top10", lambda n: max(0.1 * n, 1)),
                                        ("mean", float), ("median", lambda n: 2 * n / np.pi)])
def test_steady_state_se_is_the_post_warmup_sd_over_the_rules_sample_count(rule, n_eff):
    v = _series(50, 1)
    kept = v[10:]  # warm-up 0.2 of 50
    assert steady_state_se(v, rule, 0.2) == pytest.approx(np.std(kept) / np.sqrt(n_eff(40)))
    with pytest.raises(ValueError, match="steady-state rule"):
        steady_state_se(v, "max")


def test_real_sweep_point_carries_the_standard_error_not_the_per_step_sd(monkeypatch):
    """A synthetic per-step series through the real sweep's aggregation: throughput_sd and
    power_sd are sd / sqrt(n_eff) of the post-warm-up steps, like the simulated sweep's."""
    thr, pwr = _series(60, 2), 5 * _series(60, 3)
    steps = pd.DataFrame({"throughput": thr, "power_w": pwr})
    steps.attrs.update(source="sim", telemetry={}, n_gpus=1)
    monkeypatch.setattr(real, "_steps_from_run", lambda trace, events: steps)
    pt = real.curve_point("trace.csv", "events.csv", "top10", 0.2)
    assert pt["throughput_sd"] == pytest.approx(np.std(thr[12:]) / np.sqrt(4.8))
    assert pt["power_sd"] == pytest.approx(np.std(pwr[12:]) / np.sqrt(4.8))
    assert pt["throughput_sd"] < np.std(thr[12:], ddof=1) / 2  # not the per-step sd


def test_simulated_sweep_writes_the_same_quantity():
    """The simulated sweep's sd columns are steady_state_se of the very series it simulated."""
    model, job = SimGpuModel(), SimJob("j", 0.4, noise=0.02)
    df = sweep_simulated([job], [400.0, 700.0], model, n_steps=60, seed=7)
    rng = np.random.default_rng(7)
    for cap, row in zip([400.0, 700.0], df.itertuples(), strict=True):
        thr, pwr, _ = simulate_window(model, job, cap, 60, rng)
        assert row.throughput_sd == pytest.approx(steady_state_se(thr, "top10", 0.2))
        assert row.power_sd == pytest.approx(steady_state_se(pwr, "top10", 0.2))


def test_simulated_sweep_records_a_cap_outside_the_models_range():
    df = sweep_simulated([SimJob("j", 0.4)], [100.0, 700.0])
    bad = df.set_index("cap_w").loc[100.0]
    assert bad["status"] == "failed: cap 100 W outside GPU 0's range [200, 700] W"
    assert np.isnan(bad["throughput"]) and df.set_index("cap_w").loc[700.0, "status"] == "ok"
