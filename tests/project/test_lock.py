"""One lock for every dependency: requirements/lock.txt (make, CI) and requirements/gpu-lock.txt
(the GPU host's bundle) pin every package exactly, agree with each other, with pyproject.toml's
ranges, with requirements/pins.txt (torch, torchvision, Snakemake) and with the Snakefile's
min_version; make and benchmarks/device_wheels.sh install from them and from nothing else."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
EXTRAS = ("train", "fetch", "workflow", "dev")  # what `make install` installs


def _pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line (names normalised)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"{path.name}: not an exact pin: {line!r}"
            out[re.sub(r"[-_.]+", "-", name.lower())] = version
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower())


def test_every_dependency_of_the_installed_extras_is_locked_within_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = _pins(REPO / "requirements/lock.txt")
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for e in EXTRAS for r in project["optional-dependencies"][e]]
    for r in reqs:
        assert _norm(r.name) in lock, f"{r.name} is not in the lock"
        assert r.specifier.contains(lock[_norm(r.name)], prereleases=True), (r, lock[_norm(r.name)])
    assert {"pip", "setuptools", "snakemake-executor-plugin-slurm"} <= set(lock)


def test_the_locks_agree_with_the_pins_each_other_and_the_snakefile():
    lock = _pins(REPO / "requirements/lock.txt")
    gpu = _pins(REPO / "requirements/gpu-lock.txt")
    pins = _pins(REPO / "requirements/pins.txt")
    assert pins == {"torch": "2.14.1", "torchvision": "0.29.1", "snakemake": "9.14.8"}
    assert all(lock[k] == v for k, v in pins.items()), {k: lock.get(k) for k in pins}
    assert {k: v for k, v in gpu.items() if k in lock and lock[k] != v} == {}
    assert {"nvidia-nvimgcodec-cu13", "nvidia-nvjpeg", "pytest"} <= set(gpu)
    snakefile = (REPO / "Snakefile").read_text()
    assert re.search(r'min_version\("([^"]+)"\)', snakefile)[1] == lock["snakemake"]


def test_make_and_the_gpu_bundle_install_from_the_lock_only():
    make = (REPO / "Makefile").read_text()
    installs = [ln.strip() for ln in make.splitlines() if "pip install" in ln]
    assert "$(PY) -m pip install --progress-bar on -r $(LOCK)" in installs, installs
    for ln in installs:  # no other package by name: the lock's pip, the lock, wattlife itself
        assert ("-r $(LOCK)" in ln or "grep '^pip==' $(LOCK)" in ln or "--no-deps" in ln
                or "uv==$(UV_VERSION)" in ln), ln
        assert " -q" not in ln or "uv==" in ln, f"an install without progress: {ln}"
    assert "$(VENV)/.installed: pyproject.toml $(LOCK)" in make  # a new lock reinstalls
    wheels = (REPO / "benchmarks/device_wheels.sh").read_text()
    fetches = [ln for ln in wheels.splitlines()
               if re.search(r"pip (wheel|download)", ln) and not ln.startswith("#")]
    assert fetches and all('"${LOCKS[@]}"' in ln or '"$dist==$version"' in ln for ln in fetches)
    assert not re.search(r"[a-z]==\d", wheels), "device_wheels.sh names a version of its own"


CUDA_PREFIXES = ("nvidia-", "cuda-", "triton")


def _cuda(name: str) -> bool:
    """A CUDA package of the CUDA torch (nvidia-ml-py, NVML's pure-Python binding, is not one)."""
    return name.startswith(CUDA_PREFIXES) and name != "nvidia-ml-py"


def test_the_cpu_lock_is_the_main_lock_less_cuda_with_the_cpu_torch():
    # requirements/cpu-lock.txt (`WATTLIFE_CPU=1 make install`): every package the main lock has,
    # at its version, but torch (the CPU build of requirements/cpu-pins.txt), torchvision (PyPI's
    # needs the CUDA torch) and the CUDA packages, none of which it may hold
    lock = _pins(REPO / "requirements/lock.txt")
    cpu = _pins(REPO / "requirements/cpu-lock.txt")
    pins = _pins(REPO / "requirements/cpu-pins.txt")
    assert cpu["torch"] == pins["torch"] + "+cpu"
    assert not [k for k in cpu if _cuda(k) or k == "torchvision"]
    assert {k: (v, lock.get(k)) for k, v in cpu.items() if k != "torch" and lock.get(k) != v} == {}
    left_out = set(lock) - set(cpu)
    assert left_out == {k for k in lock if _cuda(k)} | {"torchvision"}


def _make_n(*args: str) -> str:
    import subprocess

    done = subprocess.run(["make", "-n", "-B", *args], cwd=REPO, capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin"})
    return done.stdout


def test_wattlife_cpu_installs_its_own_venv_from_the_cpu_lock_and_checks_it():
    cpu = _make_n("install", "WATTLIFE_CPU=1")
    assert "python3 -m venv .venv-cpu" in cpu
    assert (".venv-cpu/bin/python -m pip install --progress-bar on -r requirements/cpu-lock.txt"
            in cpu)
    assert "requirements/lock.txt" not in cpu
    assert "the CPU set-up holds the CUDA packages above" in cpu  # the check after installing
    full = _make_n("install")
    assert ".venv/bin/python -m pip install --progress-bar on -r requirements/lock.txt" in full
    assert "cpu-lock" not in full and ".venv-cpu" not in full
