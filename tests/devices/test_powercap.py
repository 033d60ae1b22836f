import json
import signal
import subprocess
import sys

import pytest

from wattlife.devices.powercap import PowerCapController, PowerCapError, restore_from_state


def test_simulated_caps_are_validated_saved_and_restored(tmp_path):
    state = tmp_path / "state.json"
    with PowerCapController("simulated", state_file=state, n_sim=2) as ctl:
        ctl.set_cap(300)
        assert [ctl.dev.get(i) for i in (0, 1)] == [300, 300]
        assert json.loads(state.read_text())["limits_w"] == {"0": 700.0, "1": 700.0}
        with pytest.raises(PowerCapError, match="outside GPU 0's range"):
            ctl.set_cap(150)
    assert [ctl.dev.get(i) for i in (0, 1)] == [700, 700]
    assert not state.exists()


def test_restored_on_exception(tmp_path):
    ctl = PowerCapController("simulated", state_file=tmp_path / "s.json")
    with pytest.raises(RuntimeError):
        with ctl:
            ctl.set_cap(250)
            raise RuntimeError("workload crashed")
    assert ctl.dev.get(0) == 700


def test_real_backends_need_explicit_opt_in(tmp_path):
    ctl = PowerCapController.__new__(PowerCapController)  # no NVML needed to check the guard
    ctl.backend, ctl.allow_real, ctl.gpus = "nvml", False, [0]
    with pytest.raises(PowerCapError, match="allow_real"):
        ctl.set_cap(300)


def test_sigterm_restores_and_state_file_survives_sigkill(tmp_path, children):
    state = tmp_path / "s.json"
    code = ("import time\nfrom wattlife.devices.powercap import PowerCapController\n"
            f"ctl = PowerCapController('simulated', state_file={str(state)!r})\n"
            "with ctl:\n    ctl.set_cap(400)\n    print('set', flush=True)\n    time.sleep(60)\n")
    p = children.spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "set"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 128 + signal.SIGTERM
    assert not state.exists()  # restored, state removed
    p = children.spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "set"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert state.exists()  # what the Slurm epilog's `wattlife powercap restore` reads
    assert restore_from_state(state) == {0: 700.0}
    assert not state.exists()
