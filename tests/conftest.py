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


@pytest.fixture(scope="session")
def finished_demo(tmp_path_factory):
    """The embedded demo's pipeline, run once per test session on a smaller copy of the demo config
    (`snakemake --profile profiles/local`): tests/test_pipeline.py checks its tables and figures,
    tests/test_workflow.py what config edits rerun and that one cell reruns alone."""
    import subprocess

    import yaml

    tmp = tmp_path_factory.mktemp("demo")
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp / "res")
    cfg["storage"] = {"shared": str(tmp / "shared"), "local": str(tmp / "local")}
    cfg["data"]["images"].update(classes=3, train_per_class=8, val_per_class=2)
    cfg["workloads"]["resnet"].update(steps=4, val_every=2, ckpt_every=2, image_size=32)
    cfg["workloads"]["qwen"].update(steps=4, val_every=2, ckpt_every=2)
    cfg["data"]["text"]["words"] = 10_000
    cfg["analysis"].update(allocation_workloads=5, allocation_jobs=6, pfi_mc=50)
    cfg["sampler"]["idle_baseline_s"] = 0.3
    for e, size in zip(cfg["prepare"]["catalogue"], (1e6, 3e6, 6e6, 2e6, 4e6)):
        e["size_bytes"] = int(size)
    conf = tmp / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                          "--configfile", str(conf)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {"tmp": tmp, "cfg": cfg, "conf": conf, "env": env, "res": tmp / "res"}
