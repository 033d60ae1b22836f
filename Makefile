# Two set-up commands for a fresh machine (see README): `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install demo test test-fast lint figures-from-cache bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch + torchvision: local wheels on the build machines; a CUDA build from PyPI elsewhere
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e ".[train,fetch,workflow,dev]"
	touch $@

demo: install
	snakemake --profile profiles/local

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow"

# ruff and mypy with the pyproject settings (versions pinned in the `dev` extra); .ci/run runs it
# before `make test`.
lint: install
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/mypy

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
