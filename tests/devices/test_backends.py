import os

import pytest

from wattlife.config import SamplerSettings
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.cpu_estimate import CpuEstimateBackend
from wattlife.devices.rapl import RaplBackend
from wattlife.devices.simgpu import SimGpuBackend
from wattlife.sampler import build_backends
from wattlife.simgpu_model import SimGpuModel


def _zone(root, name, label, energy, rng=1000):
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{energy}\n")
    (z / "max_energy_range_uj").write_text(f"{rng}\n")
    return z


def test_rapl_reads_packages_and_dram_and_handles_wraparound(tmp_path):
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", 900)
    _zone(tmp_path, "intel-rapl:0:0", "core", 5)
    dram = _zone(tmp_path, "intel-rapl:0:1", "dram", 10)
    b = RaplBackend(tmp_path)
    assert [d for d, _, _ in b.zones] == ["cpu0", "dram0"]
    (pkg / "energy_uj").write_text("950\n")
    (dram / "energy_uj").write_text("20\n")
    rows = b.poll(1)
    assert rows == [(1, "cpu0", "energy_j", 50e-6, "rapl"), (1, "dram0", "energy_j", 10e-6, "rapl")]
    (pkg / "energy_uj").write_text("30\n")  # wrapped at 1000: +80 uJ
    rows = b.poll(2)
    assert rows[0][3] == pytest.approx(130e-6)


def test_rapl_absent_or_unreadable_says_why(tmp_path):
    with pytest.raises(SensorUnavailable, match="no powercap zones"):
        RaplBackend(tmp_path / "none")
    z = _zone(tmp_path, "intel-rapl:0", "package-0", 1)
    if os.geteuid() == 0:
        # root reads anything; emulate the Linux >= 5.10 root-only file with a directory in its
        # place
        (z / "energy_uj").unlink()
        (z / "energy_uj").mkdir()
        with pytest.raises((SensorUnavailable, IsADirectoryError)):
            RaplBackend(tmp_path)
    else:
        (z / "energy_uj").chmod(0)
        with pytest.raises(SensorUnavailable, match="not readable"):
            RaplBackend(tmp_path)


def test_rapl_permission_error_message(tmp_path, monkeypatch):
    _zone(tmp_path, "intel-rapl:0", "package-0", 1)

    def deny(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(RaplBackend, "_read", staticmethod(deny))
    with pytest.raises(SensorUnavailable, match="root-only since Linux 5.10"):
        RaplBackend(tmp_path)


def test_cpu_estimate_is_labelled_and_follows_its_model():
    b = CpuEstimateBackend(idle_w=40, max_w=140)
    rows = b.poll(5)
    power = [r for r in rows if r[2] == "power_w"][0]
    assert power[4] == "estimate" and 40 <= power[3] <= 140
    assert b.power_w(0.5) == 90
    with pytest.raises(ValueError, match="idle_w <= max_w"):
        CpuEstimateBackend(idle_w=200, max_w=100)


def test_sim_gpu_backend_idles_without_a_process_and_is_labelled():
    b = SimGpuBackend(n_gpus=2)
    rows = [r for r in b.poll(10) if r[2] == "power_w"]
    assert [r[1] for r in rows] == ["gpu0", "gpu1"]
    assert all(r[4] == "sim" and r[3] == pytest.approx(b.model.idle_w) for r in rows)


def test_sim_model_compute_bound_job_draws_tdp_and_caps_bind():
    m = SimGpuModel()
    assert m.power(1.0, 0.0) == pytest.approx(m.tdp_w)
    st = m.at_cap(400, 0.0)
    assert st["power_w"] <= 400 + 1e-6 and st["throughput_rel"] < 1


def test_auto_backends_without_gpu_or_rapl_fall_back_and_say_so(tmp_path):
    settings = SamplerSettings.from_dict({"gpu": "auto", "cpu": "auto",
                                          "rapl_root": str(tmp_path)})
    backends, notes = build_backends(settings, log=lambda m: None)
    names = [b.name for b in backends]
    assert "cpu-estimate" in names
    assert any("falls back to 'estimate'" in n for n in notes)
