"""Conda environment files of the workflow (`envs/analysis.yaml`, `envs/training.yaml`), written
from the lock by `make lock`: conda gives Python, pip installs every package at the lock's version.

Why pip inside conda: the lock (requirements/lock.txt) holds PyPI names and versions, the ones
`make install`, CI and the GPU bundle use; conda-forge builds of the same releases may not exist,
so conda provides only the interpreter. The suite itself is no pip line (`-e ..` would point into
`.snakemake/conda/` once Snakemake copies the file): each env's post-deploy script installs
`wattlife==<version>` from a wheel (`make wheel`), so an env is bound to a version."""

from __future__ import annotations

import logging
import re
import sys
import textwrap
from pathlib import Path

from .errors import InputError

log = logging.getLogger(__name__)

PURPOSES = {
    "analysis": "the rules that read measurements (check, attribute, tables, figures, PFI, "
                "predictor, allocation): the suite's own dependencies, no torch",
    "training": "the rules that measure (training cells, power-cap runs, downloads, uploads, "
                "generated data): the suite's dependencies with its train and fetch extras "
                "(the CUDA build of torch)",
}
PYTHON = "3.11"  # the lock's target (Makefile: LOCK_TARGET)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def read_pins(text: str) -> list[str]:
    """`name==version` lines of a uv-compiled requirements text, comments and blanks left out;
    any other line is an error naming it (an env holds exact pins only)."""
    pins = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not _PIN.match(line):
            raise InputError(f"line {n}: {line!r} is not an exact pin (name==version)")
        pins.append(line)
    return pins


def render(name: str, pins: list[str]) -> str:
    """The env file's text: a header saying what it is for and how it is made, then the env."""
    if name not in PURPOSES:
        raise InputError(f"env {name!r}: not one of {sorted(PURPOSES)}")
    head = (f"Conda environment `{name}` of the workflow (`snakemake --sdm conda`): "
            f"{PURPOSES[name]}. Written by `make lock` (wattlife.condaenv) from "
            f"requirements/lock.txt: do not edit. envs/{name}.post-deploy.sh installs the suite "
            "itself, pinned by version, from a wheel (`make wheel`).")
    lines = textwrap.wrap(head, 98, initial_indent="# ", subsequent_indent="# ")
    lines += [
        f"name: wattlife-{name}",
        "channels:",
        "  - conda-forge",
        "  - nodefaults",
        "dependencies:",
        f"  - python={PYTHON}",
        "  - pip",
        "  - pip:",
    ]
    lines += [f"      - {pin}" for pin in pins]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m wattlife.condaenv NAME PINS_FILE`: the env file on stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        log.error("usage: python -m wattlife.condaenv {analysis|training} PINS_FILE")
        return 2
    name, path = args
    try:
        sys.stdout.write(render(name, read_pins(Path(path).read_text())))
    except (OSError, ValueError) as exc:
        log.error(f"wattlife.condaenv: {path}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
