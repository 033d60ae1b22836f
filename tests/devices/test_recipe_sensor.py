"""CONTRIBUTING.md's sensor recipe, tried (issue 44): an AMD SMI GPU backend added to a copy of
the package by the recipe's two edits alone (its module in `devices/`, one `SensorBackendSpec`
row in `contracts/sources.py`), then `wattlife run --gpu amdsmi` → `check` → `attribute`.

No AMD GPU exists here: `amdsmi` is a STAND-IN module written by this test (two GPUs at 300 W
and 310 W), named as such; the backend calls the AMD SMI Python API's functions
(`amdsmi_init`, `amdsmi_get_processor_handles`, `amdsmi_get_power_info`). The test counts the
files of the copy that differ from `src/wattlife`: the recipe's count, recomputed at every run.
"""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, package_with_rows

SRC = REPO / "src" / "wattlife"

STAND_IN = '''"""STAND-IN for AMD SMI's Python module (test_recipe_sensor.py): no AMD GPU."""
WATTS = (300, 310)
def amdsmi_init():
    pass
def amdsmi_shut_down():
    pass
def amdsmi_get_processor_handles():
    return list(range(len(WATTS)))
def amdsmi_get_power_info(handle):
    return {"socket_power": WATTS[handle], "power_limit": 750}
'''

BACKEND = '''"""AMD GPUs through AMD SMI (`amdsmi`): each GPU's socket power, polled."""

from __future__ import annotations

from typing import Any

from .base import Row, SensorBackend


class AmdSmiBackend(SensorBackend):
    """Socket power of every AMD GPU AMD SMI sees, as `gpu<i>` rows, source `amdsmi-poll`."""

    name = "amdsmi"

    def __init__(self, interval_s: float) -> None:
        import amdsmi

        amdsmi.amdsmi_init()
        self._smi = amdsmi
        self._gpus = list(amdsmi.amdsmi_get_processor_handles())
        self.interval_s = interval_s

    def poll(self, now_ns: int) -> list[Row]:
        return [(now_ns, f"gpu{i}", "power_w",
                 float(self._smi.amdsmi_get_power_info(h)["socket_power"]), "amdsmi-poll")
                for i, h in enumerate(self._gpus)]

    def close(self) -> None:
        self._smi.amdsmi_shut_down()


def amdsmi_backends(s: Any, interval_s: float) -> tuple[list[SensorBackend], list[str]]:
    """The registry's factory."""
    return [AmdSmiBackend(interval_s)], []
'''

ROW = '''    SensorBackendSpec("amdsmi", GPU_ROLE, (), (_ms("amdsmi-poll", "measured (AMD SMI)"),),
                      (GPU.name,), "wattlife.devices.amd:amdsmi_backends",
                      about="AMD GPUs through AMD SMI"),
'''


def _changed(a: Path, b: Path, rel: str = "") -> set[str]:
    """The files that differ between the trees `a` and `b`, or exist in one only."""
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = {f"{rel}{n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files}
    for sub in cmp.common_dirs:
        out |= _changed(a / sub, b / sub, f"{rel}{sub}/")
    return out


@pytest.mark.slow
def test_the_sensor_recipe_adds_an_amd_backend_in_two_files(tmp_path, env_path):
    copy = package_with_rows(tmp_path / "src", "contracts/sources.py", "_BUILT_IN_BACKENDS", ROW)
    (copy / "wattlife" / "devices" / "amd.py").write_text(BACKEND)
    assert _changed(SRC, copy / "wattlife") == {"devices/amd.py", "contracts/sources.py"}
    standins = tmp_path / "standins"
    standins.mkdir()
    (standins / "amdsmi.py").write_text(STAND_IN)
    env = {**env_path, "PYTHONPATH": f"{copy}:{standins}"}

    def wattlife(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wattlife.cli", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)

    run = tmp_path / "run"
    out = wattlife("run", "-o", str(run), "--gpu", "amdsmi", "--cpu", "estimate", "--idle-s",
                   "0.3", "--", sys.executable, "-c", "import time; time.sleep(1)")
    assert out.returncode == 0, out.stderr[-3000:]
    trace = pd.read_csv(run / "trace.csv")
    gpu = trace[trace["device"].str.startswith("gpu")]
    assert set(gpu["source"]) == {"amdsmi-poll"} and set(gpu["device"]) == {"gpu0", "gpu1"}
    check = wattlife("check", "--json", str(run))
    assert "trace.source" not in check.stdout, check.stdout  # a known, declared source
    att = wattlife("attribute", str(run))
    assert att.returncode == 0, att.stderr[-3000:]
    ph = pd.read_csv(run / "phases.csv")
    ph = ph[ph["device_kind"] == "gpu"]
    assert set(ph["source"]) == {"amdsmi-poll"}
    for device, watts in (("gpu0", 300.0), ("gpu1", 310.0)):
        rows = ph[ph["device"] == device]
        assert rows["energy_j"].sum() / rows["time_s"].sum() == pytest.approx(watts, rel=1e-6)
    assert "amdsmi" in wattlife("run", "-h").stdout  # the --gpu choices come from the rows
    label = subprocess.run([sys.executable, "-c", "from wattlife.contracts.sources import "
                            "source_basis; print(source_basis('amdsmi-poll'))"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert label.stdout.strip() == "measured", label.stderr
