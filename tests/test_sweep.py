import sys

import pytest

from wattlife.devices.powercap import PowerCapController
from wattlife.sweeps.real import sweep_command

STEPS = ("import sys, time\nfrom wattlife.markers import phase, step\n"
         "for i in range(25):\n"
         "    with step(items=32):\n"
         "        with phase('forward'):\n            sum(range(300000))\n"
         "        with phase('backward'):\n            time.sleep(0.01)\n")


@pytest.mark.slow
def test_sweep_runs_each_cap_under_the_sampler_and_records_failures(tmp_path, monkeypatch):
    ctl = PowerCapController("simulated", state_file=tmp_path / "state.json")
    cfg = {"gpu": "sim", "cpu": "estimate", "idle_baseline_s": 0.0, "sim_gpu": {"mem_share": 0.1}}
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
