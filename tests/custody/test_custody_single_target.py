"""A single file asked for (a table, a cell's phases.csv) on results without Snakemake's
metadata (cells measured by orphans, copied from another machine, `.snakemake/` deleted) remakes
a measurement whose config slice changed, and never one whose slice did not (issue 39: "never
silently stale" for the commonest way users regenerate one table; the cell's check.txt too); a
dry run lists it and writes nothing into the results folder.
Local profile, one tiny CPU cell, on a copy of the workflow in a temporary folder
(test_custody_workflow.make_wf)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import test_custody_workflow as W
import yaml

from wattlife import custody as C

TARGETS = ("tables/phases.csv", "tables/phase_summary.csv", f"runs/{W.CELL}/phases.csv",
           f"runs/{W.CELL}/check.txt", f"runs/{W.CELL}/trace.csv")
#: the rule just below the measurement that each target reaches first
BELOW = {"check.txt": "check", "trace.csv": "link_cell"}


def snake(wf: dict, target: str, *args: str, conf: Path | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                          "--configfile", str(conf or wf["conf"]), *args, "--",
                          str(wf["res"] / target)],
                         cwd=wf["wf"], env=wf["env"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def forget_metadata(wf: dict) -> None:
    """What an orphan's measurement, or results copied from another machine, have: no metadata."""
    shutil.rmtree(wf["wf"] / ".snakemake/metadata", ignore_errors=True)


def listing(res: Path) -> dict[str, tuple[int, int]]:
    """Every path under the results folder: (size, mtime in ns)."""
    return {p.relative_to(res).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(res.rglob("*"))}


def changed_conf(wf: dict) -> Path:
    cfg = yaml.safe_load(yaml.safe_dump(wf["cfg"]))
    cfg["workloads"]["resnet"]["steps"] = 3
    conf = wf["tmp"] / "changed.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return conf


def new_slice(conf: Path) -> dict:
    from wattlife.config import load_config
    from wattlife.jobs import cell_slice

    return cell_slice(load_config(conf), "resnet", "local", "off", 1)


def test_wanted_names_a_request_only_where_the_current_pointer_is_missing(tmp_path):
    res = tmp_path / "res"
    pointer = res / "runs" / W.CELL / C.pointer_name("0123456789abcdef")
    assert C.wanted(res, pointer, {"steps": 2}) == []  # a fresh results folder: nothing to add
    res.mkdir()
    assert C.wanted(res, pointer, {"steps": 2}, write=False) == []  # not the main process
    scratch = tmp_path / "scratch"  # a dry run's: the request there, the results untouched
    (dry,) = C.wanted(res, pointer, {"steps": 2}, scratch=scratch)
    assert Path(dry) == scratch / "attempts" / W.CELL / "wanted-0123456789abcdef.json"
    assert json.loads(Path(dry).read_text())["slice"] == {"steps": 2}
    assert list(res.rglob("*")) == []
    (request,) = C.wanted(res, pointer, {"steps": 2})
    assert Path(request) == C.attempts_dir(res, W.CELL) / "wanted-0123456789abcdef.json"
    assert json.loads(Path(request).read_text())["slice"] == {"steps": 2}
    assert C.attempts_of(C.attempts_dir(res, W.CELL)) == []  # a request is no attempt
    assert C.wanted(res, pointer, {"steps": 2}, write=False) == [request]  # a job's own process
    cap = res / "pfi/tiny/cap-400" / C.pointer_name("fedcba9876543210")
    (other,) = C.wanted(res, cap, {})
    assert Path(other) == C.folders_of(res, "pfi/tiny/cap-400")[0] / "wanted-fedcba9876543210.json"
    pointer.parent.mkdir(parents=True)
    pointer.write_text("{}")
    made = Path(request).stat().st_mtime_ns
    # published: never measured again; the earlier request stays an input, unchanged (the input
    # set Snakemake recorded for the jobs it remade must not change: that would rerun them)
    assert C.wanted(res, pointer, {"steps": 2}) == [request]
    assert Path(request).stat().st_mtime_ns == made
    published = res / "runs" / "other" / C.pointer_name("0123456789abcdef")
    published.parent.mkdir(parents=True)
    published.write_text("{}")
    assert C.wanted(res, published, {"steps": 2}) == []  # never requested: nothing


@pytest.mark.slow
def test_a_single_target_remakes_a_stale_cell_without_snakemakes_metadata(tmp_path):
    wf = W.make_wf(tmp_path)
    snake(wf, "tables/phase_summary.csv")
    root = C.attempts_dir(wf["res"], W.CELL)
    assert len(C.attempts_of(root)) == 1
    forget_metadata(wf)
    for target in TARGETS:  # unchanged: never measured again, whichever file is asked for
        assert "Nothing to be done" in snake(wf, target, "-n"), target
    conf = changed_conf(wf)
    before = listing(wf["res"])
    for target in TARGETS:  # changed: the measurement and what follows it, for each target
        dry = snake(wf, target, "-n", conf=conf)
        assert re.search(r"^rule execute:", dry, re.M), f"{target}: {dry[-3000:]}"
        below = BELOW.get(target.rsplit("/", 1)[-1], "attribute")
        assert re.search(rf"^rule {below}:", dry, re.M), f"{target}: {dry[-3000:]}"
    assert listing(wf["res"]) == before  # a dry run writes nothing there (no request either)
    snake(wf, "tables/phases.csv", conf=conf)
    attempts = C.attempts_of(root)
    assert len(attempts) == 2 and sum(a.published for a in attempts) >= 1
    pointer, doc = C.published(wf["cell"])
    assert pointer.name == C.pointer_name(C.slice_hash(new_slice(conf)))
    assert doc["hashed_while_written"] == ["trace.csv"]  # the sampler's digest: not read back
    derived = json.loads((wf["cell"] / "phases.csv.seal.json").read_text())
    assert derived["from"] == pointer.name and derived["attempt"] == doc["attempt"]
    forget_metadata(wf)
    for target in TARGETS:  # now current: nothing again, metadata or not
        assert "Nothing to be done" in snake(wf, target, "-n", conf=conf), target
    assert len(C.attempts_of(root)) == 2
    retire = subprocess.run(["wattlife", "retire", str(wf["res"]), W.CELL], env=wf["env"],
                            capture_output=True, text=True, timeout=60)
    assert retire.returncode == 0, retire.stderr
    assert re.search(r"^rule execute:", snake(wf, "tables/phases.csv", "-n", conf=conf), re.M)
