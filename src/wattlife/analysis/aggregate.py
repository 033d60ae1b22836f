"""Collect every cell's phases.csv (+ meta.json, summary.json) into run-level tables."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import (
    META_FILE,
    PHASES_COLUMNS,
    RESIDUAL,
    SUMMARY_FILE,
    TABLE_FILES,
    RunMeta,
    read_meta,
    read_table,
    write_csv,
)

CELL_KEYS = ["workload", "storage", "checkpoint", "repeat"]


CELL_DIR = re.compile(r"^(?P<workload>.+)-(?P<storage>shared|local)-ckpt(?P<checkpoint>on|off)$")


def collect_phases(phase_files: list[str | Path], metas: list[str | Path] | None = None,
                   summaries: list[str | Path] | None = None) -> pd.DataFrame:
    """All cells' phases rows, with the cell's keys (from its meta.json, or else from a folder named
    `<workload>-<storage>-ckpt<on|off>` as the benchmarks write them) and the run's throughput
    with its basis (`throughput` on `throughput_basis`, and `throughput_wall`, from its
    summary.json). `metas` and `summaries` name each cell's files in the order of `phase_files`
    (the workflow passes them); absent, they are looked for beside each phases.csv."""
    for name, given in (("metas", metas), ("summaries", summaries)):
        if given is not None and len(given) != len(phase_files):
            raise ValueError(f"{name}: {len(given)} files for {len(phase_files)} phases.csv")
    frames = []
    unnamed: list[str] = []  # files with neither meta.json's cell nor a cell folder name
    runs: dict[tuple, Path] = {}
    for i, f in enumerate(phase_files):
        f = Path(f)
        df = read_table(f, PHASES_COLUMNS)
        meta_p = Path(metas[i]) if metas is not None else f.with_name(META_FILE)
        summ_p = Path(summaries[i]) if summaries is not None else f.parent / SUMMARY_FILE
        meta = read_meta(meta_p) if meta_p.exists() else RunMeta()
        cell = meta.cell
        named = CELL_DIR.match(f.parent.name)
        if not cell and named:
            cell = {**named.groupdict(), "repeat": 1}
        if not cell:  # never merged with another run: its own run, named by its path
            unnamed.append(str(meta_p))
            cell = {"workload": str(f), "repeat": 1}
        key = tuple(str(cell.get(k, "")) for k in CELL_KEYS)
        if key in runs:
            raise ValueError(f"{runs[key]} and {f} are the same run "
                             f"({dict(zip(CELL_KEYS, key, strict=True))}) by their meta.json or "
                             "folder; summing them would merge two runs: give each repeat its own "
                             "cell.repeat, and each phases.csv once")
        runs[key] = f
        for k in CELL_KEYS:
            df[k] = cell.get(k, "")
        df["gpu_model"] = meta.gpu_model or ""
        if summ_p.exists():
            s = json.loads(summ_p.read_text())
            df["throughput"] = s.get("throughput")
            df["throughput_unit"] = s.get("throughput_unit")
            # `step`: training steps only (summaries before the basis was recorded: see
            # wattlife.analysis.performance); `throughput_wall`: pauses included
            df["throughput_basis"] = s.get("throughput_basis", "unrecorded")
            df["throughput_wall"] = s.get("throughput_wall")
        frames.append(df)
    if not frames:
        raise ValueError("no phases.csv to aggregate")
    if unnamed:
        warnings.warn(f"no meta.json (and no <workload>-<storage>-ckpt<on|off> folder) for "
                      f"{len(unnamed)} phases file(s): {', '.join(unnamed)} missing; each is kept "
                      "as its own run, its workload named by its path", stacklevel=2)
    return pd.concat(frames, ignore_index=True)


def phase_summary(phases: pd.DataFrame) -> pd.DataFrame:
    """Per workload x storage x checkpoint x phase x device kind: mean over repeats of the energy
    and time summed over devices, with the 95% interval carried (summed) and the sources."""
    p = phases[phases["phase"] != RESIDUAL]
    # covered_fraction: the least covered device and repeat (a phase outside the trace, or a
    # device with too few readings, is flagged with its share instead of counting as 0 J)
    cov = {"covered_fraction": ("covered_fraction", "min")} if "covered_fraction" in p else {}
    per_run = p.groupby(CELL_KEYS + ["phase", "device_kind"], as_index=False).agg(
        energy_j=("energy_j", "sum"), energy_lo_j=("energy_lo_j", "sum"),
        energy_hi_j=("energy_hi_j", "sum"), time_s=("time_s", "max"),
        method=("method", lambda s: ",".join(sorted(set(s)))),
        source=("source", lambda s: ",".join(sorted(set(s)))), **cov)
    keys = [k for k in CELL_KEYS if k != "repeat"] + ["phase", "device_kind"]
    out = per_run.groupby(keys, as_index=False).agg(
        energy_j=("energy_j", "mean"), energy_lo_j=("energy_lo_j", "mean"),
        energy_hi_j=("energy_hi_j", "mean"), time_s=("time_s", "mean"),
        energy_sd_j=("energy_j", "std"), repeats=("energy_j", "size"),
        method=("method", "first"), source=("source", "first"), **cov)
    return out


def device_share(summary: pd.DataFrame) -> pd.DataFrame:
    """CPU/GPU share of each cell's energy (the study: ResNet-50 16/84, Qwen3-8B 8/92)."""
    keys = [k for k in CELL_KEYS if k != "repeat"]
    tot = summary.groupby(keys + ["device_kind"], as_index=False).agg(
        energy_j=("energy_j", "sum"), source=("source", "first"))
    tot["share"] = tot["energy_j"] / tot.groupby(keys)["energy_j"].transform("sum")
    return tot


def storage_checkpoint_deltas(summary: pd.DataFrame) -> pd.DataFrame:
    """Per workload x phase: time and energy of each (storage, checkpoint) cell minus the
    shared / checkpoint-off baseline (the study's Table of deltas)."""
    s = summary.groupby(["workload", "storage", "checkpoint", "phase"], as_index=False).agg(
        energy_j=("energy_j", "sum"), time_s=("time_s", "max"),
        source=("source", lambda v: ",".join(sorted(set(",".join(v).split(","))))))
    base = s[(s["storage"] == "shared") & (s["checkpoint"] == "off")]
    base = base.set_index(["workload", "phase"])
    key = pd.MultiIndex.from_frame(s[["workload", "phase"]])
    s["d_energy_j"] = s["energy_j"].to_numpy() - base["energy_j"].reindex(key).fillna(0).to_numpy()
    s["d_time_s"] = s["time_s"].to_numpy() - base["time_s"].reindex(key).fillna(0).to_numpy()
    s["d_energy_j"] = np.where(s.set_index(["workload", "phase"]).index.isin(base.index) |
                               (s["energy_j"] != 0), s["d_energy_j"], np.nan)
    return s


def write_phase_tables(phase_files: list[str | Path], out_dir: str | Path,
                       metas: list[str | Path] | None = None,
                       summaries: list[str | Path] | None = None) -> list[Path]:
    """phases.csv files -> tables/{phases, phase_summary, device_share, storage_checkpoint}.csv"""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    phases = collect_phases(phase_files, metas, summaries)
    summary = phase_summary(phases)
    tables = {TABLE_FILES["phases"]: phases, TABLE_FILES["phase_summary"]: summary,
              TABLE_FILES["device_share"]: device_share(summary),
              TABLE_FILES["storage_checkpoint"]: storage_checkpoint_deltas(summary)}
    paths = []
    for name, df in tables.items():
        write_csv(df, out_dir / name)
        paths.append(out_dir / name)
    return paths
