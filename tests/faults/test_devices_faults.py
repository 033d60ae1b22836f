"""NVML backend and power caps on a FAKE NVML (tests/fake_nvml.py), so they run without a GPU:
sampling, draining, error counting, CUDA_VISIBLE_DEVICES mapping, power-cap set/restore, nesting.
One test per case of issue #18."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fake_nvml import FakeNvml, NVMLError_GpuIsLost, NVMLError_NotSupported, NVMLError_Unknown
from wattlife.config import SamplerSettings
from wattlife.devices.base import SensorUnavailable
from wattlife.devices.nvidia import resolve_visible_devices
from wattlife.devices.nvml import NvmlBackend
from wattlife.devices.powercap import PowerCapController, PowerCapError, restore_from_state


@pytest.fixture
def fake(monkeypatch):
    nv = FakeNvml(n=4)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


def _backend(**kw):
    kw.setdefault("visible", None)
    return NvmlBackend(interval_s=0.01, drain_s=0.01, counter_s=0.01, telemetry_s=0.01, **kw)


def _fill(g, t0_us, n, mw=300_000):
    g.samples += [(t0_us + 20_000 * k, mw + k) for k in range(n)]


def test_sampling_reads_buffer_counter_and_telemetry(fake):
    b = _backend()
    t0 = b.gpus[0].last_ts_us
    _fill(fake.gpus[0], t0 + 1, 5)
    fake.gpus[0].energy_mj += 2500
    rows = b.poll(time.time_ns())
    power = [r for r in rows if r[1] == "gpu0" and r[2] == "power_w"]
    assert [r[3] for r in power] == [300.0, 300.001, 300.002, 300.003, 300.004]
    assert {r[4] for r in power} == {"nvml-samples"}
    assert [r[3] for r in rows if r[1] == "gpu0" and r[2] == "energy_j"] == [2.5]
    assert {"util_gpu", "sm_clock_mhz", "temp_c", "power_limit_w"} <= {r[2] for r in rows}
    assert b.info()["nvml_errors"] == []
    assert b.poll(time.time_ns() + 10**9) and not [  # the same samples are never read twice
        r for r in b.poll(time.time_ns() + 2 * 10**9) if r[2] == "power_w"]


def test_a_failing_counter_read_loses_no_drained_sample(fake):
    b = _backend(indices=[0])
    t0 = b.gpus[0].last_ts_us
    _fill(fake.gpus[0], t0 + 1, 10)
    fake.fail("nvmlDeviceGetTotalEnergyConsumption", 0, times=1)
    rows = b.poll(time.time_ns())
    assert len([r for r in rows if r[2] == "power_w"]) == 10  # kept despite the counter error
    assert not [r for r in rows if r[2] == "energy_j"]
    assert b.info()["nvml_errors"] == [{"call": "energy_counter", "device": "gpu0",
                                        "error": "NVMLError_Unknown: Unknown", "count": 1}]


def test_a_failing_drain_is_retried_from_the_same_point(fake):
    b = _backend(indices=[0])
    t0 = b.gpus[0].last_ts_us
    _fill(fake.gpus[0], t0 + 1, 4)
    fake.fail("nvmlDeviceGetSamples", 0, times=1)
    assert not [r for r in b.poll(time.time_ns()) if r[2] == "power_w"]
    rows = [r for r in b.poll(time.time_ns() + 10**9) if r[2] == "power_w"]
    assert len(rows) == 4
    assert b.errors[("power_samples", "gpu0", "NVMLError_Unknown: Unknown")] == 1


def test_nvml_errors_are_counted_per_call_site_and_device(fake, capsys):
    b = _backend(indices=[0, 1])
    fake.fail("nvmlDeviceGetTemperature", 1, error=NVMLError_GpuIsLost)
    fake.fail("nvmlDeviceGetUtilizationRates", 0, error=NVMLError_NotSupported)
    for k in range(3):
        b.poll(time.time_ns() + k * 10**9)
    errs = {(e["call"], e["device"]): e for e in b.info()["nvml_errors"]}
    assert errs[("temp_c", "gpu1")]["count"] == 3
    assert errs[("temp_c", "gpu1")]["error"].startswith("NVMLError_GpuIsLost")
    assert errs[("utilization", "gpu0")]["count"] == 3
    assert ("temp_c", "gpu0") not in errs
    err = capsys.readouterr().err
    assert err.count("gpu1 temp_c") == 1  # printed once, counted every time


def test_power_poll_fallback_errors_are_counted(fake):
    fake.fail("nvmlDeviceGetSamples", 0, error=NVMLError_NotSupported)
    fake.fail("nvmlDeviceGetPowerUsage", 0, times=2)
    b = _backend(indices=[0])
    assert b.gpus[0].power_mode == "nvml-poll"
    for k in range(3):
        b.poll(time.time_ns() + k * 10**9)
    errs = {e["call"]: e["count"] for e in b.info()["nvml_errors"]}
    assert errs["power_usage"] == 2 and errs["power_samples_probe"] >= 1


@pytest.mark.parametrize("value, nvml, ordinals_note", [
    ("2,3", [2, 3], None),
    ("GPU-fake3-0000-1111-2222-000000000003,0", [3, 0], None),
    ("GPU-fake1", [1], None),  # a unique prefix, as CUDA accepts
    ("1,7,2", [1], "entry '7' is invalid"),
    ("GPU-fake,1", [], "matches 4 GPUs' UUIDs"),
    ("0,banana,1", [0], "expected an index"),
])
def test_cuda_visible_devices_map_to_nvml_indices(fake, value, nvml, ordinals_note):
    idx, notes = resolve_visible_devices(value, fake)
    assert idx == nvml
    if ordinals_note:
        assert any(ordinals_note in n for n in notes)
    else:
        assert notes == []


def test_mig_instances_map_to_their_gpu_with_a_note(monkeypatch):
    fake = FakeNvml(n=2, mig={1: ["MIG-aaaa-bbbb"]})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    idx, notes = resolve_visible_devices("MIG-aaaa-bbbb", fake)
    assert idx == [1] and "whole GPU" in notes[0]
    idx, notes = resolve_visible_devices(f"MIG-{fake.gpus[0].uuid}/1/0", fake)
    assert idx == [0] and "MIG instance of GPU 0" in notes[0]
    idx, notes = resolve_visible_devices("MIG-zzzz", fake)
    assert idx == [] and "no GPU here has this MIG instance" in notes[0]


def test_backend_samples_only_visible_gpus_named_by_cuda_ordinal(fake, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake3,GPU-fake1")
    b = NvmlBackend(interval_s=0.01)
    info = b.info()
    assert [(g["device"], g["nvml_index"], g["local_rank"]) for g in info["gpus"]] == [
        ("gpu0", 3, 0), ("gpu1", 1, 1)]
    assert info["gpus"][0]["uuid"] == fake.gpus[3].uuid
    assert info["cuda_visible_devices"] == "GPU-fake3,GPU-fake1"
    _fill(fake.gpus[3], b.gpus[0].last_ts_us + 1, 2)
    devs = {r[1] for r in b.poll(time.time_ns()) if r[2] == "power_w"}
    assert devs == {"gpu0"}  # NVML GPU 3's power appears as the workload's cuda:0


def test_empty_cuda_visible_devices_means_no_gpu_sensor(fake):
    with pytest.raises(SensorUnavailable, match="sees no GPU"):
        NvmlBackend(visible="")


def test_run_records_the_gpu_mapping_in_meta(fake, tmp_path, monkeypatch):
    """`wattlife run` in-process on the fake NVML: meta.json has the mapping and error counts."""
    from wattlife.run import run_under_sampler

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    fake.fail("nvmlDeviceGetTemperature", 2)
    rc = run_under_sampler([sys.executable, "-c", "import time; time.sleep(0.3)"],
                           tmp_path / "trace.csv", tmp_path / "events.csv",
                           settings=SamplerSettings.from_dict(
                               {"gpu": "nvml", "cpu": "none",
                                "nvml": {"telemetry_ms": 50, "gpm": False}}))
    assert rc == 0
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["cuda_visible_devices"] == "2"
    assert [(g["device"], g["nvml_index"]) for g in meta["gpus"]] == [("gpu0", 2)]
    errs = meta["sampler"]["backends"][0]["nvml_errors"]
    assert errs[0]["call"] == "temp_c" and errs[0]["device"] == "gpu0" and errs[0]["count"] >= 1


def test_powercap_set_and_restore_through_nvml(fake, tmp_path):
    state = tmp_path / "s.json"
    with PowerCapController("nvml", state_file=state, allow_real=True, gpus=[0, 2]) as ctl:
        ctl.set_cap(400)
        assert [g.limit_mw for g in fake.gpus] == [400_000, 700_000, 400_000, 700_000]
        assert json.loads(state.read_text())["limits_w"] == {"0": 700.0, "2": 700.0}
    assert [g.limit_mw for g in fake.gpus] == [700_000] * 4
    assert not state.exists()


def test_nested_controller_restores_once_and_leaks_no_handler(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    before_int = signal.getsignal(signal.SIGINT)  # SIG_IGN when the suite runs in the background
    ctl = PowerCapController("simulated", state_file=tmp_path / "s.json")
    with ctl:
        ctl.set_cap(500)
        with ctl:  # entered twice
            ctl.set_cap(300)
        assert ctl.dev.get(0) == 300  # the inner exit restored nothing: the outer owns it
        assert signal.getsignal(signal.SIGTERM) is not before
    assert ctl.dev.get(0) == 700  # the original, not the 500 W of the first cap
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGINT) is before_int


def test_two_controllers_nested_restore_the_right_originals(fake, tmp_path):
    state = tmp_path / "s.json"
    with PowerCapController("nvml", state_file=state, allow_real=True, gpus=[0]) as a:
        a.set_cap(500)
        with PowerCapController("nvml", state_file=state, allow_real=True, gpus=[0]) as b:
            b.set_cap(300)
            # the state file keeps the oldest originals (what an epilog must put back)
            assert json.loads(state.read_text())["limits_w"] == {"0": 700.0}
        assert fake.gpus[0].limit_mw == 500_000 and state.exists()
    assert fake.gpus[0].limit_mw == 700_000 and not state.exists()


def test_restore_parses_a_simulated_state_before_deleting_it(tmp_path):
    state = tmp_path / "s.json"
    state.write_text('{"backend": "simulated", "limits_w": {"0": "seven hundred"}}')
    with pytest.raises(PowerCapError, match=r"s.json: bad .*expected JSON"):
        restore_from_state(state)
    assert state.exists()


@pytest.mark.parametrize("text, match", [
    ("{not json", "not JSON"),
    ('{"limits_w": {"0": 300}}', "missing key 'backend'"),
    ('{"backend": "gpu-magic", "limits_w": {"0": 300}}', "bad backend"),
    ('{"backend": "nvml", "limits_w": {"0": -5}}', "bad limits"),
    ('[1, 2]', "expected JSON"),
])
def test_powercap_restore_malformed_state_is_one_line(tmp_path, env_path, text, match):
    state = tmp_path / "s.json"
    state.write_text(text)
    out = subprocess.run([sys.executable, "-m", "wattlife.cli", "powercap", "restore", "--state",
                          str(state)], env=env_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and match in out.stderr
    assert str(state) in out.stderr and state.read_text() == text  # kept, untouched


def test_powercap_restore_without_nvml_keeps_the_state(tmp_path, monkeypatch):
    class NoDriver(FakeNvml):
        def nvmlInit(self):
            raise self.NVMLError_Unknown()

    monkeypatch.setitem(sys.modules, "pynvml", NoDriver())
    state = tmp_path / "s.json"
    state.write_text('{"backend": "nvml", "limits_w": {"0": 300}}')
    with pytest.raises(PowerCapError, match="NVML is not available.*s.json is kept"):
        restore_from_state(state)
    assert state.exists()


# pynvml stand-ins for a child process (put first on its PYTHONPATH): the package missing, or
# present with no NVIDIA driver. Either way the child never touches a real GPU's limit.
NO_PYNVML = 'raise ImportError("No module named pynvml")\n'
NO_DRIVER = ("class NVMLError(Exception):\n    pass\n\n\n"
             "def nvmlInit():\n    raise NVMLError('Driver Not Loaded')\n")


@pytest.mark.parametrize("shim,why", [(NO_PYNVML, "not installed"),
                                      (NO_DRIVER, "Driver Not Loaded")],
                         ids=["no-pynvml", "no-driver"])
def test_powercap_restore_cli_without_nvml_is_one_line_and_keeps_the_state(
        tmp_path, env_path, children, shim, why):
    """The real `wattlife powercap restore` process where NVML cannot be had: exit 2, exactly one
    stderr line naming the state file, no traceback, the state file kept byte for byte."""
    (tmp_path / "shim").mkdir()
    (tmp_path / "shim" / "pynvml.py").write_text(shim)
    env = dict(env_path, PYTHONPATH=os.pathsep.join(
        [str(tmp_path / "shim")] + [p for p in [env_path.get("PYTHONPATH")] if p]))
    state = tmp_path / "s.json"
    text = '{"backend": "nvml", "limits_w": {"0": 300}}'
    state.write_text(text)
    out = children.run([sys.executable, "-m", "wattlife.cli", "powercap", "restore", "--state",
                        str(state)], timeout=120, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("wattlife powercap: error: NVML is not available")
    assert why in lines[0] and f"{state} is kept" in lines[0]
    assert state.read_text() == text


def test_powercap_restore_sets_real_limits_then_removes_state(fake, tmp_path):
    fake.gpus[1].limit_mw = 250_000  # a killed sweep left GPU 1 capped
    state = tmp_path / "s.json"
    state.write_text('{"backend": "nvml", "pid": 1, "limits_w": {"1": 700.0}}')
    assert restore_from_state(state) == {1: 700.0}
    assert fake.gpus[1].limit_mw == 700_000 and not state.exists()


def test_powercap_restore_failing_set_keeps_the_state(fake, tmp_path):
    fake.fail("nvmlDeviceSetPowerManagementLimit", 0, error=NVMLError_Unknown)
    state = tmp_path / "s.json"
    state.write_text('{"backend": "nvml", "limits_w": {"0": 700.0}}')
    with pytest.raises(PowerCapError, match="GPU 0: NVML cannot set the power limit"):
        restore_from_state(state)
    assert state.exists()


def test_visible_devices_parser_property():
    """Any CUDA_VISIBLE_DEVICES text: the result is the valid entries before the first invalid
    one, each once, in order, all real NVML indices; anything cut or merged is in a note."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    nv = FakeNvml(n=3)
    token = st.one_of(st.integers(0, 5).map(str), st.sampled_from(
        ["GPU-fake0", "GPU-fake2", "GPU-fake", "GPU-zz", "MIG-x", "", " 1", "abc", "-1"]))

    @settings(max_examples=100, deadline=None)
    @given(st.lists(token, max_size=6))
    def check(tokens):
        value = ",".join(tokens)
        idx, notes = resolve_visible_devices(value, nv)
        assert all(0 <= i < 3 for i in idx) and len(set(idx)) == len(idx)
        expect = []
        for t in (value.split(",") if value.strip() else []):
            t = t.strip()
            i = (int(t) if t.isdigit() and int(t) < 3 else
                 {"GPU-fake0": 0, "GPU-fake2": 2}.get(t))
            if i is None:
                assert any("invalid" in n for n in notes)
                break
            if i not in expect:
                expect.append(i)
        assert idx == expect
        if not idx:
            assert any("sees no GPU" in n for n in notes)

    check()
