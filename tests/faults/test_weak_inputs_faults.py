"""Inputs that used to pass silently or fail with a library's words (issue 41, item 7): each
ends in a correct result or one line naming the input and the rule it breaks."""

import errno
import json
import os
import socket

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import T0, events_frame, trace_frame
from wattlife.cli import main

MS = 1_000_000


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


@settings(max_examples=10, deadline=None)
@given(n_rows=st.integers(0, 1), device=st.sampled_from(["gpu0", "cpu0", "dram0"]))
def test_a_trace_too_short_to_integrate_is_named_by_device_and_count(n_rows, device):
    from wattlife.attribution import attribute_energy
    from wattlife.contracts import ContractError

    tr = trace_frame(T0 + np.arange(n_rows) * 10 * MS, np.full(n_rows, 100.0), device)
    if n_rows == 0:
        tr = pd.concat([tr, trace_frame(np.array([T0]), np.array([5.0]), device,
                                        metric="util_gpu")])
    ev = events_frame([("forward", T0, T0 + MS)])
    with pytest.raises(ContractError) as err:
        attribute_energy(tr, ev)
    msg = str(err.value)
    if n_rows:
        assert f"h/{device}: 1 reading(s)" in msg and "2 readings" in msg
    else:
        assert "no GPU, CPU or DRAM power/energy readings" in msg


@pytest.fixture
def curves(tmp_path):
    rows = [{"job": f"j{j}", "gpu_model": "H200", "n_gpus": 8, "cap_w": c,
             "throughput": 100 * (c / 700) ** (0.3 + 0.2 * j), "throughput_unit": "tokens/s",
             "power_w": 7.6 * c, "source": "sim", "dram_active": 0.2 + 0.1 * j,
             "util_mem": 30.0 + j, "tensor_active": 0.5} for j in range(4)
            for c in (200, 400, 700)]
    pd.DataFrame(rows).to_csv(tmp_path / "curves.csv", index=False)
    return tmp_path


@pytest.mark.parametrize("option", ["--grid", "--subgrid"])
@given(cap=st.sampled_from([250, 300, 450, 500, 650]))
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_grid_cap_not_in_the_data_is_named_not_dropped(curves, capsys, option, cap):
    grid = f"200,{cap},700"
    assert main(["pfi", str(curves / "curves.csv"), "-o", str(curves / "pfi.csv"), "--mc", "0",
                 option, grid]) == 2
    err = _one_line(capsys)
    assert f"{option} {grid}" in err and f"no valid point at {cap} W" in err and "j0" in err


def test_predict_names_a_pfi_file_without_gpu_model_and_a_negative_pfi(curves, capsys):
    d = curves
    pd.DataFrame({"job": ["j0", "j1", "j2", "j3"], "pfi": [1.2, 1.4, 1.6, 1.1]}).to_csv(
        d / "nogpu.csv", index=False)
    assert main(["predict", str(d / "curves.csv"), "--pfi", str(d / "nogpu.csv"), "-o",
                 str(d / "p.csv")]) == 2
    assert "missing column(s) ['gpu_model']" in _one_line(capsys)
    pd.DataFrame({"job": ["j0", "j1", "j2", "j3"], "gpu_model": "H200",
                  "pfi": [1.2, -0.4, 1.6, 1.1]}).to_csv(d / "neg.csv", index=False)
    assert main(["predict", str(d / "curves.csv"), "--pfi", str(d / "neg.csv"), "-o",
                 str(d / "p.csv")]) == 2
    err = _one_line(capsys)
    assert f"{d / 'neg.csv'}:3: job j1 has PFI -0.4 < 0" in err
    assert not (d / "p.csv").exists()


def test_powercap_restore_of_a_missing_state_is_an_error_unless_missing_ok(tmp_path, capsys):
    state = tmp_path / "nothere.json"
    assert main(["powercap", "restore", "--state", str(state)]) == 2
    assert f"--state {state}: no such file" in _one_line(capsys)
    assert main(["powercap", "restore", "--state", str(state), "--missing-ok"]) == 0


@pytest.mark.parametrize("limits,n", [({"0": 700.0, "5": 700.0}, None), ({"3": 500.0}, 2)])
def test_a_simulated_state_naming_a_gpu_that_does_not_exist_is_refused(tmp_path, capsys,
                                                                        limits, n):
    state = tmp_path / "s.json"
    doc = {"backend": "simulated", "limits_w": limits, **({"n_gpus": n} if n else {})}
    state.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["powercap", "restore", "--state", str(state)]) == 2
    assert "does not exist" in _one_line(capsys)
    assert state.exists()  # kept: nothing was restored


def test_a_full_disk_names_the_output_path(curves, capsys, monkeypatch):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    out = curves / "tables" / "pfi.csv"
    assert main(["pfi", str(curves / "curves.csv"), "-o", str(out), "--mc", "0"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"wattlife pfi: error: {out}: no space left") and "Errno" not in err
    assert not [p for p in out.parent.iterdir()]  # no temporary file left


def test_a_busy_run_folder_without_slurm_names_the_process_not_slurm(tmp_path, monkeypatch):
    from wattlife.runlock import ENV, LOCK_NAME, run_folder_lock

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv(ENV, raising=False)
    holder = {"job_id": None, "host": socket.gethostname(), "pid": os.getppid(), "started": 0}
    (tmp_path / LOCK_NAME).write_text(json.dumps(holder))
    with pytest.raises(RuntimeError) as err:
        with run_folder_lock(tmp_path):
            pass
    msg = str(err.value)
    assert f"kill {os.getppid()}" in msg and "slurm" not in msg.lower() and "\n" not in msg
