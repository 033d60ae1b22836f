import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _no_events_env(monkeypatch):
    """Tests never inherit an events path from an outer `wattlife run`."""
    monkeypatch.delenv("WATTLIFE_EVENTS", raising=False)
    monkeypatch.delenv("WATTLIFE_RUN_ID", raising=False)
    from wattlife import markers

    markers.reset()
    yield
    markers.reset()


@pytest.fixture
def env_path():
    """Environment whose PATH finds this interpreter's `wattlife` and `snakemake`."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if not has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU here")
        for it in items:
            if "gpu" in it.keywords:
                it.add_marker(skip)
    if shutil.which("slurmctld") is None:
        skip = pytest.mark.skip(reason="no Slurm installed here")
        for it in items:
            if "slurm" in it.keywords:
                it.add_marker(skip)
