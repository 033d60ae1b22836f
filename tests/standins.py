"""Stand-in measurements for workflow tests that need a finished measuring job (a training cell
waits for its dataset's download) without measuring it: the files, sealed and published as the
workflow's own jobs do (wattlife.custody), under the pointer of the slice the workflow computes
for the same config, so that the workflow sees a current measurement and never remakes it (a
stand-in without its pointer is stale: its link rule would take a request and rerun the job)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from snakemake.cli import parse_config
from snakemake.utils import update_config

from wattlife import custody as C
from wattlife.config import load_config
from wattlife.custody.attempts import new_attempt
from wattlife.custody.seal import seal_attempt
from wattlife.jobs import measurement_slices

#: what a finished transfer's link rule declares (rules/prepare.smk, link_transfer)
TRANSFER_FILES = ("config.json", "trace.csv", "events.csv", "meta.json", "record.json",
                  "run.log")


def workflow_slice(configfile: Path, entries: Sequence[str], ident: str, scratch: Path,
                   transfers: int = 1) -> dict[str, Any]:
    """The slice the workflow computes for measurement `ident` (`transfers/<artefact>`, a cell
    id, `pfi/<cell>/cap-<W>`) from `configfile` and the `--config` entries, merged as Snakemake
    merges them, defaults filled (`scratch`: a folder for the merged file)."""
    cfg = yaml.safe_load(Path(configfile).read_text())
    update_config(cfg, parse_config(list(entries)))
    scratch.mkdir(parents=True, exist_ok=True)
    merged = scratch / "standin-config.yaml"
    merged.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return measurement_slices(load_config(merged), transfers)[ident][1]


def publish_standin(res: Path, ident: str, slice_doc: dict[str, Any],
                    names: Iterable[str] = TRANSFER_FILES) -> Path:
    """Empty files `names` as a sealed attempt of `ident` under `res`, published (its folder's
    hard links and pointer, as `wattlife attempt` leaves them); the pointer's path."""
    root, folder = C.folders_of(res, ident)
    attempt = new_attempt(root)
    for name in names:
        (attempt / name).write_text("")
    now = time.time()
    seal_attempt(attempt, ident, slice_doc, now, now, 0)
    return C.publish(res, attempt, folder)
