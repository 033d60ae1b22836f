"""Every rule's `log:` is written (issue 42): the three `script:` rules (aggregate_phases, waiting,
figures) declared a log they never wrote; wattlife.diagnostics sends what they print there."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_workflow
from wattlife.diagnostics import log_to

SCRIPT_RULES = {"aggregate_phases", "waiting", "figures"}


PROBE = """
import os, sys, warnings
from wattlife.diagnostics import log_to
with log_to(sys.argv[1], "rule x"):
    print("from print")
    warnings.warn("from warnings", UserWarning, stacklevel=1)
    os.write(2, b"from fd 2\\n")
print("after")
"""


def test_log_to_catches_prints_warnings_fd_writes_and_tracebacks(tmp_path):
    log = tmp_path / "logs" / "x.log"
    done = subprocess.run([sys.executable, "-c", PROBE, str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "after\n", done.stdout + done.stderr
    text = log.read_text()
    assert text.startswith("wattlife: rule x started ") and "rule x finished" in text
    assert all(s in text for s in ("from print", "from warnings", "from fd 2")), text

    with pytest.raises(ZeroDivisionError), log_to(log, "rule y"):
        raise ZeroDivisionError("division by zero")
    text = log.read_text()
    assert "Traceback" in text and "ZeroDivisionError" in text and "rule y failed" in text


def test_every_script_rule_writes_its_log():
    rules = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    blocks = re.split(r"^rule ", rules, flags=re.M)[1:]
    found = {}
    for block in blocks:
        name = block.split(":", 1)[0].strip()
        script = re.search(r'script:\s*\n\s*"\.\./(scripts/[^"]+)"', block)
        if script:
            assert "log:" in block, name
            found[name] = script.group(1)
    assert set(found) == SCRIPT_RULES, found
    for name, path in found.items():
        assert "with script_log(snakemake):" in (REPO / path).read_text(), (name, path)


@pytest.mark.slow
def test_the_test_config_run_writes_every_log_and_its_report(tmp_path, env_path):
    """The catalogue's .test config end to end (13 jobs, CPU, about a minute): every log file the
    rules declare exists and is non-empty; the script rules' name their rule, start and finish.
    Then `snakemake --report report.zip` packs every figure and every table of the run."""
    work = copy_workflow(tmp_path / "wf")
    (work / ".test" / "config").mkdir(parents=True)
    (work / ".test" / "config" / "config.yaml").write_text(
        (REPO / ".test" / "config" / "config.yaml").read_text())
    done = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--configfile",
                           ".test/config/config.yaml"], cwd=work, env=env_path,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logs = sorted((work / "results" / "test").rglob("*.log"))
    assert {p.stem for p in logs} >= SCRIPT_RULES | {"powercap_sweep", "pfi", "gen_images"}
    empty = [str(p.relative_to(work)) for p in logs if p.stat().st_size == 0]
    assert not empty, empty
    for rule in SCRIPT_RULES:
        text = (work / "results" / "test" / "logs" / f"{rule}.log").read_text()
        assert text.startswith(f"wattlife: rule {rule} started") and \
            f"rule {rule} finished" in text, text

    import zipfile

    report = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile",
                             ".test/config/config.yaml", "--report", "report.zip"], cwd=work,
                            env=env_path, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    names = zipfile.ZipFile(work / "report.zip").namelist()
    drawn = {p.name for p in (work / "results" / "test" / "figures").glob("*.png")}
    tables = {p.name for p in (work / "results" / "test" / "tables").glob("*.csv")}
    packed = {Path(n).name for n in names}
    assert drawn and drawn <= packed, drawn - packed
    assert tables and tables <= packed, tables - packed
