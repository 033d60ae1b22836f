"""The container definitions for a cluster (issue 42): containers/Dockerfile and
containers/wattlife.def (Apptainer) install from the one lock and from nothing else, on the
lock's Python, and copy only files that exist. Neither is built here (no Docker engine, no
Apptainer on the build machines): hadolint and spython's parser were run by hand (docs)."""

from __future__ import annotations

import re
import tomllib

import pytest

from conftest import REPO

DOCKERFILE = REPO / "containers" / "Dockerfile"
DEF = REPO / "containers" / "wattlife.def"


def _installs(text: str) -> list[str]:
    """Every pip install command of a definition (continued lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [c.strip() for line in joined.splitlines() if not line.lstrip().startswith("#")
            for c in line.split("&&") if "pip install" in c]


@pytest.mark.parametrize("path", [DOCKERFILE, DEF], ids=["Dockerfile", "apptainer"])
def test_container_installs_from_the_lock_only(path):
    installs = _installs(path.read_text())
    assert any(c.endswith("-r requirements/lock.txt") for c in installs), installs
    for c in installs:  # the lock's pip, the lock, the suite itself without dependencies
        assert (c.endswith("-r requirements/lock.txt") or "grep '^pip==' requirements/lock.txt"
                in c or re.search(r"--no-deps --no-build-isolation \.$", c)), c


def test_both_definitions_use_one_base_on_the_lock_s_python():
    docker = re.search(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)[1]
    apptainer = re.search(r"^From: (\S+)", DEF.read_text(), re.M)[1]
    assert docker == apptainer
    target = re.search(r"--python-version (\S+)", (REPO / "Makefile").read_text())[1]
    assert re.fullmatch(rf"python:{re.escape(target)}(\.\d+)?-slim-\w+", docker), docker


def test_copied_files_exist_and_the_label_is_the_version():
    text = DEF.read_text()
    files = re.search(r"^%files\n(.*?)^%", text, re.M | re.S)[1]
    sources = [ln.split()[0] for ln in files.splitlines() if ln.strip()]
    sources += [w for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("COPY ")
                for w in ln.split()[1:-1]]
    assert sources and all((REPO / s).exists() for s in sources), sources
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"org.opencontainers.image.version {version}" in text
