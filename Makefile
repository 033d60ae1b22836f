# Two set-up commands for a fresh machine (see README): `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

# Every dependency comes from one lock (requirements/lock.txt: exact versions, torch and Snakemake
# with its Slurm executor plugin included) that `make install`, CI (.ci/run) and the GPU host's
# wheel bundle (benchmarks/device_wheels.sh) all install from. `make lock` updates it.
LOCK := requirements/lock.txt
GPU_LOCK := requirements/gpu-lock.txt
UV_VERSION := 0.13.8
# the lock is resolved for the build machines: CPython 3.11 on manylinux x86_64 (the GPU host's
# bundle takes the same versions for its Python, benchmarks/device_wheels.sh)
LOCK_TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28

.PHONY: install lock demo test test-fast lint figures-from-cache bench clean

install: $(VENV)/.installed

# pip's own progress bars show each download (torch and its CUDA libraries are ~4 GB of the ~6.5 GB)
$(VENV)/.installed: pyproject.toml $(LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install --progress-bar on "$$(grep '^pip==' $(LOCK))"
	$(PY) -m pip install --progress-bar on -r $(LOCK)
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	touch $@

# Resolve the lock again from pyproject.toml's extras train, fetch, workflow, dev (and gpu-decode
# for the GPU host's bundle) under requirements/pins.txt, with uv $(UV_VERSION) in its own venv.
lock:
	python3 -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q uv==$(UV_VERSION)
	.lock-venv/bin/uv pip compile --quiet pyproject.toml requirements/tools.in --extra train \
	  --extra fetch --extra workflow --extra dev -c requirements/pins.txt $(LOCK_TARGET) \
	  --custom-compile-command "make lock" -o $(LOCK)
	.lock-venv/bin/uv pip compile --quiet pyproject.toml --extra gpu-decode --extra dev \
	  -c $(LOCK) --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
	  --custom-compile-command "make lock" -o $(GPU_LOCK)

demo: install
	snakemake --profile profiles/local

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

# ruff, mypy and snakefmt with the pyproject settings (versions pinned in the `dev` extra), and
# Snakemake's own linter over the workflow; .ci/run runs it before `make test`.
lint: install
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy
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
