"""Real-hardware tests: run where an NVIDIA GPU is visible (the lent H200), skipped elsewhere.
They read only; nothing here changes a GPU setting."""

import time

import pytest

pytestmark = pytest.mark.gpu


def test_nvml_backend_reads_driver_power_samples_counter_and_telemetry():
    from wattlife.devices.nvml import NvmlBackend

    b = NvmlBackend(interval_s=0.05)
    rows = []
    t_end = time.time() + 3.0
    while time.time() < t_end:
        rows += b.poll(time.time_ns())
        time.sleep(0.05)
    rows += b.final_poll(time.time_ns())
    info = b.info()
    b.close()
    power = [r for r in rows if r[1] == "gpu0" and r[2] == "power_w"]
    assert len(power) > 50  # ~20 ms driver samples over 3 s
    assert {r[4] for r in power} == {info["devices"]["gpu0"]["power_source"]}
    assert all(30 < r[3] < 1500 for r in power)
    ts = [r[0] for r in power]
    assert ts == sorted(ts) and abs(ts[-1] - time.time_ns()) < 5e9  # epoch ns, same clock
    energy = [r[3] for r in rows if r[1] == "gpu0" and r[2] == "energy_j"]
    assert len(energy) >= 2 and energy == sorted(energy)
    metrics = {r[2] for r in rows if r[1] == "gpu0"}
    assert {"util_gpu", "util_mem", "sm_clock_mhz", "power_limit_w", "temp_c"} <= metrics
    if info["devices"]["gpu0"]["gpm"]:
        assert {"dram_active", "sm_active", "tensor_active"} <= metrics
    assert info["driver"] and info["gpu_model"]


def test_powercap_nvml_reads_real_limits_without_changing_them(tmp_path):
    from wattlife.devices.powercap import PowerCapController, PowerCapError

    ctl = PowerCapController("nvml", state_file=tmp_path / "s.json")
    d = ctl.describe()["gpus"][0]
    assert 0 < d["min_w"] <= d["limit_w"] <= d["max_w"]
    with pytest.raises(PowerCapError, match="allow_real"):
        ctl.set_cap(d["min_w"])
    assert ctl.describe()["gpus"][0]["limit_w"] == d["limit_w"]
    assert not (tmp_path / "s.json").exists()
