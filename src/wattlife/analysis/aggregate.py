"""Collect every cell's phases.csv (+ meta.json, summary.json) into run-level tables; a workflow
cell's files are verified against their seals first (wattlife.custody)."""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..contracts import (
    EVENTS_FILE,
    KINDS,
    META_FILE,
    PER_STEP_PHASES,
    PHASES_COLUMNS,
    RESIDUAL,
    SUMMARY_FILE,
    TABLE_FILES,
    WARMUP,
    RunMeta,
    node_part_kinds,
    read_events,
    read_meta,
    read_table,
    write_csv,
)
from ..errors import InputError
from .performance import (
    items_from_events,
    step_throughput_from_events,
    step_world,
    wall_throughput_from_events,
)
from .repeats import (
    EFFECT_INTERVAL,
    INTERVAL,
    interval_columns,
    item_unit,
    significant,
    welch_interval,
)
from .shares import node_source

CELL_KEYS = ["workload", "storage", "checkpoint", "repeat"]
CELLS = CELL_KEYS[:3]  # a cell of the matrix, over its repeats
NODE_KIND = KINDS["node"].name  # the whole node (issue 45): its rows name the cell's node source


CELL_DIR = re.compile(r"^(?P<workload>.+)-(?P<storage>shared|local)"
                      r"-ckpt(?P<checkpoint>on|off|sync|async)$")


def collect_phases(phase_files: list[str | Path], metas: list[str | Path] | None = None,
                   summaries: list[str | Path] | None = None,
                   events: list[str | Path] | None = None) -> pd.DataFrame:
    """All cells' phases rows, with the cell's keys (from its meta.json, or else from a folder named
    `<workload>-<storage>-ckpt<mode>` as the benchmarks write them, or else the run id of its
    meta.json: one's own run needs no matrix keys) and the run's items and throughput
    (`run_items`). `metas`, `summaries` and `events` name each cell's files in the order of
    `phase_files` (the workflow passes them); absent, they are looked for beside each phases.csv."""
    for name, given in (("metas", metas), ("summaries", summaries), ("events", events)):
        if given is not None and len(given) != len(phase_files):
            raise InputError(f"{name}: {len(given)} files for {len(phase_files)} phases.csv")
    verify_sources(phase_files)
    frames = []
    unnamed: list[str] = []  # files with neither meta.json's cell nor a cell folder name
    runs: dict[tuple[Any, ...], Path] = {}
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
        if not cell and meta.run_id:  # one's own run (`wattlife run -- CMD`): named by its id
            cell = {"workload": meta.run_id, "repeat": 1}
        if not cell:  # never merged with another run: its own run, named by its path
            unnamed.append(_unnamed_line(f, meta_p))
            cell = {"workload": str(f), "repeat": 1}
        key = tuple(str(cell.get(k, "")) for k in CELL_KEYS)
        if key in runs:
            raise InputError(f"{runs[key]} and {f} are the same run "
                             f"({dict(zip(CELL_KEYS, key, strict=True))}) by their meta.json or "
                             "folder; summing them would merge two runs: give each repeat its own "
                             "cell.repeat, and each phases.csv once")
        runs[key] = f
        for k in CELL_KEYS:
            df[k] = cell.get(k, "")
        df["gpu_model"] = meta.gpu_model or ""
        ev_p = Path(events[i]) if events is not None else f.with_name(EVENTS_FILE)
        for col, value in run_items(df, summ_p, ev_p).items():
            df[col] = value
        frames.append(df)
    if not frames:
        raise InputError("no phases.csv to aggregate")
    if unnamed:
        warnings.warn(f"no cell for {len(unnamed)} phases file(s) (neither meta.json's `cell` nor "
                      f"a <workload>-<storage>-ckpt<mode> folder): {'; '.join(unnamed)}; each is "
                      "kept as its own run, storage and checkpoint empty (record a cell with "
                      "`wattlife run --cell '{\"workload\": \"W\", \"storage\": \"shared\", "
                      "\"checkpoint\": \"off\", \"repeat\": 1}'`)", stacklevel=2)
    return pd.concat(frames, ignore_index=True)


def run_items(phases: pd.DataFrame, summary: Path, events: Path) -> dict[str, object]:
    """One run's `items` (all ranks) with `items_basis`, and its throughput (`throughput` on
    `throughput_basis`, `throughput_wall`, `throughput_unit`). Items come from the events' `step`
    rows (`step(items=...)`): the post-warm-up steps where the phase table has `warmup` rows (its
    per-step phases cover only those), else all steps; without events, from the suite's
    summary.json (`epochs_run x train_items`, all steps). Throughput is the summary's where there
    is one (the suite's workloads), else the events' (`analysis.performance`, items/s)."""
    s = json.loads(summary.read_text()) if summary.exists() else {}
    ev = read_events(events) if events.exists() else None
    post_warmup = WARMUP in set(phases["phase"])
    items = items_from_events(ev, post_warmup) if ev is not None else None
    out: dict[str, object] = {}
    if s:  # `step`: training steps only; `throughput_wall`: pauses included
        out = {"throughput": s.get("throughput"), "throughput_unit": s.get("throughput_unit"),
               "throughput_basis": s.get("throughput_basis", "unrecorded"),
               "throughput_wall": s.get("throughput_wall")}
    elif items is not None and ev is not None:
        world = step_world(ev)
        out = {"throughput": step_throughput_from_events(ev, world),
               "throughput_unit": "items/s (all ranks)", "throughput_basis": "step",
               "throughput_wall": wall_throughput_from_events(ev, world)}
    if items is not None:
        out.update(items=items, items_basis=f"events: {'steady' if post_warmup else 'all'} steps")
    elif s.get("epochs_run") and s.get("train_items"):
        out.update(items=s["epochs_run"] * s["train_items"], items_basis="summary: all steps")
    elif s:
        out.update(items=np.nan, items_basis="")
    return out


def verify_sources(phase_files: list[str | Path]) -> None:
    """Tables use sealed, verified results only: a phases.csv of a workflow cell (a published
    pointer or a derived seal beside it) is refused, with the cell's measured files, if any was
    cut, edited, replaced or is stale (ValueError: the first file, its problem and what
    re-derives it). A phases.csv outside any cell under custody is used (logged)."""
    from ..custody import require_sound

    loose = require_sound(list(phase_files))
    if loose:
        logging.getLogger(__name__).debug(
            "%d phases file(s) not under custody (no sealed cell beside them), used unverified: "
            "%s", len(loose), ", ".join(loose[:3]))


def _unnamed_line(phases: Path, meta: Path) -> str:
    """What names no cell for `phases`: its meta.json missing, or present without a `cell`."""
    lack = f"{meta} has no `cell` key, or an empty one" if meta.exists() else f"{meta} missing"
    return f"{phases} ({lack}): its workload is named '{phases}'"


def per_run(phases: pd.DataFrame) -> pd.DataFrame:
    """One row per run x phase x device kind (energy and intervals summed over devices, time the
    longest device's), with the run's `items` and `throughput_unit`. A phase that some repeats of
    a cell have and others lack counts 0 J and 0 s in those (so every cell's n is its repeats)."""
    p = phases[phases["phase"] != RESIDUAL].copy()
    for col in ("items", "throughput_unit", "covered_fraction", "gap_s"):
        if col not in p.columns:
            p[col] = np.nan
    # covered_fraction: the least covered device (a phase partly outside the trace, in a sensor
    # gap, or a device with too few readings, is flagged with its share instead of counting as
    # 0 J); gap_s: the most seconds any device of the kind did not read during the phase
    # below_node_period (node rows, issue 45): any run's phase the node sensor did not resolve
    short = ({"below_node_period": ("below_node_period", _any_true)}
             if "below_node_period" in p.columns else {})
    rows = p.groupby(CELL_KEYS + ["phase", "device_kind"], as_index=False, dropna=False).agg(
        energy_j=("energy_j", "sum"), energy_lo_j=("energy_lo_j", "sum"),
        energy_hi_j=("energy_hi_j", "sum"), time_s=("time_s", "max"),
        covered_fraction=("covered_fraction", "min"), gap_s=("gap_s", "max"),
        method=("method", lambda s: ",".join(sorted(set(s)))),
        source=("source", lambda s: ",".join(sorted(set(s)))), **short)
    runs = p.groupby(CELL_KEYS, as_index=False, dropna=False).agg(
        items=("items", "first"), throughput_unit=("throughput_unit", "first"))
    names = rows[CELLS + ["phase", "device_kind", "method", "source"]].drop_duplicates(
        CELLS + ["phase", "device_kind"])
    full = runs.merge(names, on=CELLS)
    out = full.merge(rows.drop(columns=["method", "source"]), how="left",
                     on=CELL_KEYS + ["phase", "device_kind"])
    zero = ["energy_j", "energy_lo_j", "energy_hi_j", "time_s"]
    out[zero] = out[zero].fillna(0.0)
    unit = out["throughput_unit"].map(item_unit)
    out["item_unit"] = [u for u, _ in unit]
    per_step = out["phase"].isin(PER_STEP_PHASES)
    scale = np.array([k for _, k in unit], dtype=float)
    out["energy_per_item_j"] = np.where(per_step, out["energy_j"] / out["items"] * scale, np.nan)
    out.loc[~per_step, "item_unit"] = ""
    return out


def _any_true(values: pd.Series) -> object:
    """True where any value is true (`True`/`"True"`), NaN where none is known (not a node row)."""
    known = values.dropna().astype(str)
    return bool((known == "True").any()) if len(known) else np.nan


def _cell_stats(groups: pd.core.groupby.DataFrameGroupBy,
                columns: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """n and `repeats.interval_columns` of each column {name: (prefix, unit)} per group."""
    recs = []
    for key, g in groups:
        rec = dict(zip(groups.keys, key, strict=True))
        rec["n"] = len(g)
        for col, (prefix, unit) in columns.items():
            rec.update(interval_columns(g[col], prefix, unit))
        recs.append(rec)
    return pd.DataFrame(recs)


def phase_summary(phases: pd.DataFrame) -> pd.DataFrame:
    """Per workload x storage x checkpoint x phase x device kind, over the cell's repeats: n, the
    mean energy and time with their 95 % t intervals across repeats (`energy_repeat_lo_j` …,
    `interval`), the mean per-run attribution interval (`energy_lo_j`, `energy_hi_j`: measurement,
    not run-to-run spread), and for per-step phases the energy per item (`energy_per_item_j` in
    `item_unit`, J/image or J/1k tokens) with its interval; sources and methods; `node_source`
    (issue 45), and `below_node_period` where there are node rows."""
    runs = per_run(phases)
    keys = CELLS + ["phase", "device_kind"]
    stats_ = _cell_stats(runs.groupby(keys, sort=True), {
        "energy_j": ("energy", "_j"), "time_s": ("time", "_s"),
        "energy_per_item_j": ("energy_per_item", "_j")})
    rest = runs.groupby(keys, as_index=False, sort=True).agg(
        energy_lo_j=("energy_lo_j", "mean"), energy_hi_j=("energy_hi_j", "mean"),
        items=("items", "mean"), item_unit=("item_unit", "first"),
        covered_fraction=("covered_fraction", "min"), gap_s=("gap_s", "max"),
        method=("method", "first"), source=("source", "first"),
        **({"below_node_period": ("below_node_period", _any_true)}
           if "below_node_period" in runs.columns else {}))
    out = stats_.merge(rest, on=keys)
    out["interval"] = INTERVAL
    return with_node_source(out, runs)


def with_node_source(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """`table` with `node_source`: each cell's whole-node source(s) (`pm_counters`, `redfish`,
    `ipmi`, `sstat`; its `node` rows' source), or `none` where the cell has no node rows."""
    node = runs[runs["device_kind"] == NODE_KIND]
    src = node.groupby(CELLS)["source"].agg(node_source).rename("node_source")
    out = table.merge(src.reset_index(), on=CELLS, how="left") if len(src) else table.copy()
    out["node_source"] = out["node_source"].fillna("none") if len(src) else "none"
    return out


def device_share(phases: pd.DataFrame) -> pd.DataFrame:
    """CPU/GPU share of each cell's energy (the study: ResNet-50 16/84, Qwen3-8B 8/92): per run,
    then n, mean and 95 % t interval across the cell's repeats (`share_repeat_lo` …). The share
    is of the node's parts (`contracts.node_part_kinds`: GPU + CPU + DRAM); a whole-node row
    (`node`) is no part of that sum and has no share (NaN), only its energy; where a cell has
    one, `node_share` is each kind's share of the whole node's energy (node_rest: the rest of
    it). `node_source` names the node source, or `none`."""
    runs = per_run(phases)
    tot = runs.groupby(CELL_KEYS + ["device_kind"], as_index=False).agg(
        energy_j=("energy_j", "sum"), source=("source", "first"))
    part = tot["device_kind"].isin(node_part_kinds())
    parts_j = tot["energy_j"].where(part, 0.0).groupby(
        [tot[k] for k in CELL_KEYS]).transform("sum")
    tot["share"] = (tot["energy_j"] / parts_j).where(part)
    columns = {"energy_j": ("energy", "_j"), "share": ("share", "")}
    if (tot["device_kind"] == NODE_KIND).any():  # each kind's share of the whole node's energy
        node_j = tot["energy_j"].where(tot["device_kind"] == NODE_KIND).groupby(
            [tot[k] for k in CELL_KEYS]).transform("max")
        tot["node_share"] = tot["energy_j"] / node_j
        columns["node_share"] = ("node_share", "")
    keys = CELLS + ["device_kind"]
    out = _cell_stats(tot.groupby(keys, sort=True), columns)
    out = out.merge(tot.groupby(keys, as_index=False)["source"].first(), on=keys)
    out["interval"] = INTERVAL
    return with_node_source(out, runs)


def storage_checkpoint_deltas(phases: pd.DataFrame) -> pd.DataFrame:
    """Per workload x storage x checkpoint x phase (GPU + CPU): the effect of the cell against the
    shared / checkpoint-off baseline of its workload (the study's table of deltas) as a difference
    of means over repeats with Welch's 95 % interval (`d_energy_lo_j` …, `effect_interval`), and
    `significant` (the energy interval excludes 0; empty with one repeat). A phase the baseline
    lacks (staging, checkpoint) counts 0 J there."""
    runs = per_run(phases)
    r = runs.groupby(CELL_KEYS + ["phase"], as_index=False).agg(
        energy_j=("energy_j", "sum"), time_s=("time_s", "max"),
        energy_per_item_j=("energy_per_item_j", "sum"), item_unit=("item_unit", "first"),
        source=("source", lambda v: ",".join(sorted(set(",".join(v).split(","))))))
    r.loc[r["item_unit"] == "", "energy_per_item_j"] = np.nan
    recs = []
    for (w, st, ck, ph), g in r.groupby(CELLS + ["phase"], sort=True):
        base_runs = r[(r["workload"] == w) & (r["storage"] == "shared")
                      & (r["checkpoint"] == "off")]
        base = base_runs[base_runs["phase"] == ph]
        n_base = base_runs["repeat"].nunique()
        is_base = st == "shared" and ck == "off"
        rec = {"workload": w, "storage": st, "checkpoint": ck, "phase": ph, "n": len(g),
               "energy_j": g["energy_j"].mean(), "time_s": g["time_s"].mean(),
               "energy_per_item_j": g["energy_per_item_j"].mean(),
               "item_unit": g["item_unit"].iloc[0],
               "source": ",".join(sorted(set(",".join(g["source"]).split(",")))),
               "n_base": n_base}
        for col, d, unit in (("energy_j", "d_energy", "_j"), ("time_s", "d_time", "_s"),
                             ("energy_per_item_j", "d_energy_per_item", "_j")):
            if is_base:
                diff, lo, hi = 0.0, np.nan, np.nan
            elif n_base == 0:
                diff, lo, hi = np.nan, np.nan, np.nan
            else:  # the baseline's runs without this phase spent 0 on it
                b = base[col].to_numpy(float)
                b = np.concatenate([b, np.zeros(n_base - len(b))])
                diff, lo, hi = welch_interval(g[col].to_numpy(float), b)
            rec.update({f"{d}{unit}": diff, f"{d}_lo{unit}": lo, f"{d}_hi{unit}": hi})
        rec["significant"] = significant(rec["d_energy_lo_j"], rec["d_energy_hi_j"])
        rec["significant_time"] = significant(rec["d_time_lo_s"], rec["d_time_hi_s"])
        recs.append(rec)
    out = pd.DataFrame(recs)
    out["effect_interval"] = EFFECT_INTERVAL
    return out


def throughput_summary(phases: pd.DataFrame) -> pd.DataFrame:
    """Per workload x storage x checkpoint: n, mean and 95 % t interval across repeats of the
    training throughput on both bases (`throughput` on `throughput_basis`, `throughput_wall`)."""
    cols = [c for c in ("throughput", "throughput_wall") if c in phases.columns]
    if not cols:
        return pd.DataFrame(columns=CELLS + ["n"])
    runs = phases.groupby(CELL_KEYS, as_index=False).agg(
        **{c: (c, "first") for c in cols + ["throughput_unit", "throughput_basis"]
           if c in phases.columns})
    out = _cell_stats(runs.groupby(CELLS, sort=True), {c: (c, "") for c in cols})
    extra = [c for c in ("throughput_unit", "throughput_basis") if c in runs.columns]
    if extra:
        out = out.merge(runs.groupby(CELLS, as_index=False)[extra].first(), on=CELLS)
    out["interval"] = INTERVAL
    return out


def write_phase_tables(phase_files: list[str | Path], out_dir: str | Path,
                       metas: list[str | Path] | None = None,
                       summaries: list[str | Path] | None = None,
                       events: list[str | Path] | None = None) -> list[Path]:
    """phases.csv files -> tables/{phases, phase_summary, device_share, storage_checkpoint,
    throughput}.csv"""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    phases = collect_phases(phase_files, metas, summaries, events)
    tables = {TABLE_FILES["phases"]: phases, TABLE_FILES["phase_summary"]: phase_summary(phases),
              TABLE_FILES["device_share"]: device_share(phases),
              TABLE_FILES["storage_checkpoint"]: storage_checkpoint_deltas(phases),
              TABLE_FILES["throughput"]: throughput_summary(phases)}
    paths = []
    for name, df in tables.items():
        write_csv(df, out_dir / name)
        paths.append(out_dir / name)
    return paths
