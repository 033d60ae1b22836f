# Two set-up commands for a fresh machine (see README): `make demo` and `make test`.
# WATTLIFE_CPU=1 (any target): the CPU-only set-up, .venv-cpu from requirements/cpu-lock.txt: the
# CPU build of torch, no CUDA package, no torchvision (so no image workload; docs/MEASUREMENTS.md)
ifeq ($(WATTLIFE_CPU),1)
VENV ?= .venv-cpu
else
VENV ?= .venv
endif
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

# Every dependency comes from one lock (requirements/lock.txt: exact versions, torch and Snakemake
# with its Slurm executor plugin included) that `make install`, CI (.ci/run) and the GPU host's
# wheel bundle (benchmarks/device_wheels.sh) all install from. `make lock` updates it.
MAIN_LOCK := requirements/lock.txt
GPU_LOCK := requirements/gpu-lock.txt
CPU_LOCK := requirements/cpu-lock.txt
LOCK := $(if $(filter 1,$(WATTLIFE_CPU)),$(CPU_LOCK),$(MAIN_LOCK))
# what the CUDA build of torch (PyPI's only Linux x86_64 build) and torchvision pull in: left out of
# the CPU lock, whose torch is the CPU build (`+cpu`, not on PyPI: see docs/MEASUREMENTS.md)
CUDA_PKGS := torchvision triton cuda-bindings cuda-pathfinder cuda-toolkit nvidia-cublas \
  nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft \
  nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 \
  nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx
UV_VERSION := 0.13.8
# the lock is resolved for the build machines: CPython 3.11 on manylinux x86_64 (the GPU host's
# bundle takes the same versions for its Python, benchmarks/device_wheels.sh)
empty :=
space := $(empty) $(empty)
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28

.PHONY: install lock cpu-lock env-files wheel demo test test-fast lint figures-from-cache bench clean

install: $(VENV)/.installed

# pip's own progress bars show each download (torch and its CUDA libraries are ~4 GB of the ~6.5 GB)
$(VENV)/.installed: pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install --progress-bar on "$$(grep '^pip==' $(LOCK))"
	$(PY) -m pip install --progress-bar on -r $(LOCK)
	$(PY) -m pip install --no-deps --no-build-isolation -e .
ifeq ($(WATTLIFE_CPU),1)
	@if $(PY) -m pip list --format=freeze | grep -iE '^(nvidia-|cuda-|triton|torchvision)' \
	  | grep -iv '^nvidia-ml-py=='; then \
	  echo "$(VENV): the CPU set-up holds the CUDA packages above" >&2; exit 1; fi
endif
	touch $@

# Resolve the lock again from pyproject.toml's extras train, fetch, workflow, dev (and gpu-decode
# for the GPU host's bundle) under requirements/pins.txt, with uv $(UV_VERSION) in its own venv.
lock:
	python3 -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q uv==$(UV_VERSION)
	.lock-venv/bin/uv pip compile --quiet pyproject.toml requirements/tools.in --extra train \
	  --extra fetch --extra workflow --extra dev -c requirements/pins.txt $(LOCK_TARGET) \
	  --custom-compile-command "make lock" -o $(MAIN_LOCK)
	.lock-venv/bin/uv pip compile --quiet pyproject.toml --extra gpu-decode --extra dev \
	  -c $(MAIN_LOCK) --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
	  --custom-compile-command "make lock" -o $(GPU_LOCK)
	$(MAKE) cpu-lock
	$(MAKE) env-files

# The workflow's conda envs (`--sdm conda`) from the main lock: envs/analysis.yaml (the suite's own
# dependencies, no torch) and envs/training.yaml (with the train and fetch extras); see condaenv.py.
env-files:
	python3 -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q uv==$(UV_VERSION)
	.lock-venv/bin/uv pip compile --quiet pyproject.toml -c $(MAIN_LOCK) $(LOCK_TARGET) \
	  --no-header --no-annotate -o .lock-venv/analysis.txt
	.lock-venv/bin/uv pip compile --quiet pyproject.toml --extra train --extra fetch -c $(MAIN_LOCK) \
	  $(LOCK_TARGET) --no-header --no-annotate -o .lock-venv/training.txt
	for env in analysis training; do \
	  PYTHONPATH=src .lock-venv/bin/python -m wattlife.condaenv $$env .lock-venv/$$env.txt \
	    > envs/$$env.yaml || exit 1; done

# The suite as a wheel in dist/, which the conda envs' post-deploy scripts install by version.
wheel: install
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

# The CPU lock alone: the main lock's versions (less torch and the CUDA packages) under
# requirements/cpu-pins.txt, with no torchvision (PyPI's needs the CUDA build of torch).
cpu-lock:
	python3 -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q uv==$(UV_VERSION)
	grep -vE '^(torch|$(subst $(space),|,$(strip $(CUDA_PKGS))))==' $(MAIN_LOCK) > .lock-venv/cpu-constraints.txt
	.lock-venv/bin/uv pip compile --quiet pyproject.toml requirements/tools.in --extra train \
	  --extra fetch --extra workflow --extra dev -c requirements/cpu-pins.txt \
	  -c .lock-venv/cpu-constraints.txt $(addprefix --no-emit-package ,$(CUDA_PKGS)) \
	  $(LOCK_TARGET) --custom-compile-command "make lock" -o $(CPU_LOCK)
	sed -i -E 's/^torch==([0-9.]+)$$/torch==\1+cpu/' $(CPU_LOCK)

demo: install
	snakemake --profile profiles/local

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

# ruff, mypy (strict, on src/, benchmarks/ and scripts/), the import contracts (lint-imports) and
# snakefmt with the pyproject settings (versions pinned in the `dev` extra), and Snakemake's own
# linter over the workflow; .ci/run runs it before `make test`.
lint: install
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/snakefmt --check Snakefile rules/
	$(VENV)/bin/snakemake --lint

# every figure of the committed GPU/reference results, from their CSVs (no GPU, no training),
# and the demo's again where a demo run left its tables
figures-from-cache: install
	wattlife figures --reference results/reference -o results/reference-figures
	wattlife figures results/reference/h200/workflow/tables -o results/reference-figures/h200-workflow
	wattlife figures results/reference/h200/workflow-repeats/tables -o results/reference-figures/h200-workflow-repeats
	wattlife figures results/reference/h200/workflow-waiting/tables -o results/reference-figures/h200-workflow-waiting
	@if [ -d results/demo/tables ]; then \
	  wattlife figures results/demo/tables -o results/demo/figures; \
	else echo "results/demo/tables: no demo run here (make demo); its figures skipped"; fi

bench: install
	wattlife bench all

clean:
	rm -rf results/demo data/demo .snakemake
