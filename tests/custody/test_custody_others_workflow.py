"""Staleness of a PFI cap and of a transfer from their seal (issue 39), through the workflow,
local profile, on a copy of the workflow in a temporary folder: a one-cap PFI matrix on the
simulated cap backend (CPU training), and a one-artefact loopback download.

The targets: the job's downstream files and the rule `measurements` (every measurement's pointer
for its current slice, as `all` has them). Each is measured, then Snakemake's metadata is
removed (what a job measured by an orphan of a killed controller, or results copied from
another machine, have: none), then:
- an unchanged config reruns nothing, and `wattlife cells` says current;
- a changed slice of that job reruns it (measures it again), and `wattlife cells` said stale;
  so does a file below it asked for alone (a PFI cell's curves.csv; a transfer's phases.csv and
  tables/downloads.csv), and a dry run lists it and writes nothing into the results folder;
- a change in how the command line is built (the rule's shell text) measures nothing again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_custody_single_target import listing

from conftest import REPO, copy_workflow
from wattlife import custody as C

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def setup(tmp: Path, kind: str) -> dict:
    w = copy_workflow(tmp / "wf")
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp / "res")
    cfg["storage"] = {"shared": str(tmp / "shared"), "local": str(tmp / "local")}
    cfg["sampler"]["idle_baseline_s"] = 0.2
    if kind == "pfi":
        cfg["data"]["text"]["words"] = 5_000
        cfg["powercap"].pop("jobs")
        cfg["powercap"]["hardware"] = "h200"
        cell = {"model_config": "qwen3-tiny", "task": "pretrain", "gpus": 1, "seq_len": 32,
                "batch_size": 2, "device": "cpu", "caps": [400, 700]}
        cfg["pfi_matrix"] = {"dataset": "wikitext-mini", "duration_s": 2, "eval_at_s": 1,
                             "ckpt_at_s": 1, "tokenizer_vocab": 300, "cells": {"tiny-1g": cell}}
        ident, target = "pfi/tiny-1g/cap-400", tmp / "res/pfi/tiny-1g/curves.csv"
        singles = [target]
    else:
        cfg["prepare"]["catalogue"] = [{"name": "gen-s", "kind": "dataset",
                                        "source": "generated", "size_bytes": 8_000_000}]
        cfg["prepare"]["loopback"]["rate_mbps"] = 64  # a second: the sampler reads it through
        cfg["prepare"].pop("upload")
        # `measurements` holds the cells' pointers too: one tiny CPU cell
        cfg["data"]["images"].update(classes=2, train_per_class=4, val_per_class=1, size=24)
        cfg["workloads"]["resnet"].update(steps=2, val_every=2, ckpt_every=2, image_size=16,
                                          batch_size=4, workers=0)
        cfg["execution"].update(workloads=["resnet"], storage=["local"], checkpoint=["off"],
                                repeats=1)
        ident, target = "transfers/gen-s", tmp / "res/transfers/gen-s/phases.csv"
        singles = [target, tmp / "res/tables/downloads.csv"]
    conf = tmp / "conf.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return {"wf": w, "conf": conf, "cfg": cfg, "res": tmp / "res", "env": env, "tmp": tmp,
            "target": str(target), "ident": ident, "singles": [str(t) for t in singles]}


def snake(w: dict, *args: str, conf: Path | None = None, targets: list[str] | None = None
          ) -> subprocess.CompletedProcess:
    """Snakemake on `targets` (default: `measurements` and every single target)."""
    targets = ["measurements", *w["singles"]] if targets is None else targets
    out = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                          "--configfile", str(conf or w["conf"]), *args, "--", *targets],
                         cwd=w["wf"], env=w["env"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def measured(w: dict) -> list:
    return C.attempts_of(C.folders_of(w["res"], w["ident"])[0])


def state(w: dict, conf: Path | None = None) -> str:
    out = subprocess.run(["wattlife", "cells", "--config", str(conf or w["conf"])],
                         env=w["env"], capture_output=True, text=True, timeout=120)
    rows = dict(line.split("\t")[:2] for line in out.stdout.splitlines() if "\t" in line)
    return rows[w["ident"]]


def changed(w: dict, kind: str) -> Path:
    cfg = yaml.safe_load(yaml.safe_dump(w["cfg"]))
    if kind == "pfi":
        cfg["pfi_matrix"]["cells"]["tiny-1g"]["batch_size"] = 3
    else:
        cfg["prepare"]["loopback"]["rate_mbps"] = 80
    conf = w["tmp"] / "changed.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return conf


@pytest.mark.parametrize("kind", ["pfi", "transfer"])
def test_a_pfi_cap_or_transfer_is_stale_by_its_seal_not_by_snakemakes_metadata(tmp_path, kind):
    w = setup(tmp_path, kind)
    snake(w)
    assert len(measured(w)) == 1 and state(w) == "current"
    shutil.rmtree(w["wf"] / ".snakemake/metadata")  # as after an orphan's measurement
    assert "Nothing to be done" in snake(w, "-n").stdout  # unchanged: never rerun
    for single in w["singles"]:  # each file alone, as a user remakes one table: nothing either
        assert "Nothing to be done" in snake(w, "-n", targets=[single]).stdout, single
    conf = changed(w, kind)
    assert state(w, conf) == "stale"
    rule = "pfi_cap" if kind == "pfi" else "download"
    before = listing(w["res"])
    for targets in (None, *([t] for t in w["singles"])):  # changed: measured again, each target
        dry = snake(w, "-n", conf=conf, targets=targets).stdout
        assert re.search(rf"^rule {rule}:", dry, re.M), f"{targets}: {dry[-3000:]}"
    assert listing(w["res"]) == before  # the dry runs wrote nothing there (no request either)
    snake(w, conf=conf)  # the changed slice measured: a second attempt, published
    got = measured(w)
    assert len(got) == 2 and state(w, conf) == "current" and state(w) == "stale"
    # a change in how the command line is built (the rule's shell text): nothing measured again
    smk = w["wf"] / ("rules/powercap.smk" if kind == "pfi" else "rules/prepare.smk")
    text = smk.read_text()
    smk.write_text(text.replace("wattlife attempt --results", "wattlife  attempt --results"))
    snake(w, conf=conf)
    assert len(measured(w)) == 2
    print(f"{kind}: measured {len(measured(w))}, published "
          f"{sum(a.published for a in measured(w))} (one now), spares "
          f"{sum(a.state == 'sealed' for a in measured(w)) - 1}, tables: {counted(w)}")


def counted(w: dict) -> str:
    """What the downstream file counts: one curve point per cap (the published attempt's), or
    the transfer's phases derived from the published attempt."""
    pointer, doc = C.published(C.folders_of(w["res"], w["ident"])[1])
    if w["ident"].startswith("pfi/"):
        cur = pd.read_csv(w["target"])
        assert len(cur) == 2 and (cur["cap_w"] == 400).sum() == 1, cur
        return f"{len(cur)} curve points, 1 at 400 W"
    seal = json.loads(Path(w["target"] + ".seal.json").read_text())
    assert seal.get("from") == pointer.name and seal.get("attempt") == doc["attempt"], seal
    return "phases.csv derived from the published attempt"
