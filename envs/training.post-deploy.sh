#!/usr/bin/env bash
# Snakemake (--sdm conda) runs this once in the new env, from its working directory (the repository
# root): the suite itself, pinned by version, from the wheel `make wheel` left in dist/ (or the
# folder WATTLIFE_WHEELHOUSE names), nothing from an index. A new version is a new script, so a new
# env (Snakemake hashes this file with the env's). tests/test_condaenv.py keeps the pin equal to
# pyproject.toml's version.
set -euo pipefail
python -m pip install --no-deps --no-index --find-links "${WATTLIFE_WHEELHOUSE:-dist}" "wattlife==0.1.0"
