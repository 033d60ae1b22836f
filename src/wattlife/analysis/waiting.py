"""Waiting energy: the part of a run's GPU and CPU energy spent while the GPU waits.

Pure functions, tables in, tables out (see docs/FORMULAS.md, "Waiting energy"):

- `context_floor(trace, ...)`: a GPU's idle power while a process holds a CUDA context, read from
  the run's own trace (the lowest flat one-second median while the GPU's memory is held);
- `waiting_table(phases, floors)`: per run x device x waiting phase, the phase's energy at the
  device's idle floor (floor power x phase time) and above it, and each one's share of the
  device's energy in the run. Energy is conserved: at floor + above = the phase's energy, and
  waiting + work = the device's energy in the run;
- `cell_summary(waiting)`: per cell x device kind over its repeats: waiting energy and share,
  the biggest waiting phase;
- `waiting_facility(cells, jobs_per_year)`: a facility running a cell's job `jobs_per_year`
  times a year spends jobs x its measured waiting energy per job (an `estimate`, with its inputs
  in the table), like the download cache estimate (`analysis.downloads.facility_estimate`);
- `waiting_whatif(waiting, caps_w, model)`: per GPU waiting phase, its power under a lower cap
  from the simulated GPU model (`simgpu_model.SimGpuModel`, labelled `simulated`), beside the
  measured energy. Physics: power never above the cap, never below the device's measured idle
  floor, and a cap the GPU does not accept (below `min_cap_w`) is not evaluated. A wait whose
  measured power is already at or below the cap saves 0, and the row says so;
- `waiting_tables` / `write_waiting_tables`: the file-level entry (rule `waiting`, `wattlife
  waiting`): the run-level phases table and each cell's trace + meta.json in, waiting.csv,
  waiting_runs.csv, waiting_facility.csv and waiting_whatif.csv out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import (
    GRAD_SYNC,
    IDLE_BASELINE,
    PHASES_COLUMNS,
    PROCESS_STARTUP,
    WAITING_PHASES,
    is_per_rank,
    per_rank_kinds,
    read_meta,
    read_table,
    read_trace,
    source_basis,
    write_csv,
)
from ..contracts.kinds import GPU
from ..errors import InputError
from ..simgpu_model import SimGpuModel

#: phases before the process can hold a CUDA context (their floor is the bare idle power)
BEFORE_CONTEXT = (PROCESS_STARTUP,)
CELL_KEYS = ["workload", "storage", "checkpoint", "repeat"]
CONTEXT_RULE = ("lowest median of 1 s bins of power_w while mem_used_b exceeds its idle-baseline "
                "value by >= 256 MiB; bins with >= 5 readings and p90-p10 <= max(5 W, 5 %)")
MIB = 2**20


def basis(source: str) -> str:
    """'measured', 'estimated' or 'simulated' for a phases `source` ('nvml-samples', 'estimate',
    'sim', or several joined by commas: the least measured one wins), as the source registry
    (`contracts.sources`) classes each; an unregistered source is never called measured."""
    return source_basis(source)


def context_floor(trace: pd.DataFrame, idle_start_ns: int | None = None,
                  idle_end_ns: int | None = None, held_mib: float = 256.0,
                  bin_s: float = 1.0) -> pd.DataFrame:
    """Per GPU of a trace: `context_idle_w`, its idle power while a process holds a CUDA context.

    Held: `mem_used_b` above its value in the idle baseline [idle_start_ns, idle_end_ns] (else its
    lowest reading) by at least `held_mib`, from the first such reading to the last. Within that
    span the `power_w` readings are cut into `bin_s` bins; a bin is flat when it has at least 5
    readings and its p90 - p10 spread is at most max(5 W, 5 % of its median); the floor is the
    lowest flat bin's median (`context_bins`: how many flat bins there were). A GPU whose
    trace has no memory readings, or no flat bin, gets NaN (the bare idle floor stands in)."""
    out = []
    devices = trace["device"].astype(str)
    gpu = trace[devices.isin([d for d in devices.unique() if is_per_rank(d)])]
    for (host, dev), g in gpu.groupby(["host", "device"], sort=True):
        mem = g[g["metric"] == "mem_used_b"].sort_values("t_ns")
        pw = g[g["metric"] == "power_w"].sort_values("t_ns")
        rec = {"host": host, "device": dev, "context_idle_w": np.nan, "context_bins": 0,
               "context_rule": CONTEXT_RULE}
        if len(mem) and len(pw):
            idle = mem
            if idle_start_ns is not None and idle_end_ns is not None:
                idle = mem[(mem["t_ns"] >= idle_start_ns) & (mem["t_ns"] <= idle_end_ns)]
            base = float(idle["value"].median()) if len(idle) else float(mem["value"].min())
            held = mem[mem["value"] >= base + held_mib * MIB]
            if len(held):
                lo, hi = int(held["t_ns"].iloc[0]), int(held["t_ns"].iloc[-1])
                p = pw[(pw["t_ns"] >= lo) & (pw["t_ns"] <= hi)]
                bins = ((p["t_ns"] - lo) // int(bin_s * 1e9)).to_numpy()
                stats = p.groupby(bins)["value"].agg(
                    n="size", med="median", p10=lambda v: v.quantile(0.1),
                    p90=lambda v: v.quantile(0.9))
                flat = stats[(stats["n"] >= 5) & (stats["p90"] - stats["p10"]
                                                    <= np.maximum(5.0, 0.05 * stats["med"]))]
                if len(flat):
                    rec.update(context_idle_w=float(flat["med"].min()),
                               context_bins=len(flat))
        out.append(rec)
    return pd.DataFrame(out, columns=["host", "device", "context_idle_w", "context_bins",
                                      "context_rule"])


DEVICE_KEYS = ["run_id", "host", "device"]  # one device of one run (hosts: merged multi-node)


def _floors(phases: pd.DataFrame, floors: pd.DataFrame | None) -> pd.DataFrame:
    """Per run x host x device: the bare idle floor (`idle_w`, the idle baseline's mean power,
    from the phases' `idle_baseline` row, else their `idle_power_w` column) and the context
    floor (matched by host too where both tables name it)."""
    keys = DEVICE_KEYS
    base = phases[phases["phase"] == IDLE_BASELINE].groupby(keys)["mean_power_w"].mean()
    if "idle_power_w" in phases.columns:
        fill = phases.groupby(keys)["idle_power_w"].first()
        base = base.reindex(base.index.union(fill.index)).fillna(fill)
    out = base.rename("idle_w").reset_index()
    if floors is not None and len(floors):
        f = floors.copy()
        if "host" not in f.columns or (phases["host"] == "").all():
            f["host"] = ""
        f = f.groupby(keys, as_index=False)["context_idle_w"].min()
        out = out.merge(f, on=keys, how="left")
    else:
        out["context_idle_w"] = np.nan
    return out


def grad_sync_waits(phases: pd.DataFrame) -> pd.DataFrame:
    """The idle-rank part of `grad_sync`: per run, each GPU's grad_sync time beyond the shortest
    GPU's (the wait for the slowest rank), at that row's mean power. One GPU: nothing."""
    g = phases[(phases["phase"] == GRAD_SYNC) & phases["device_kind"].isin(per_rank_kinds())].copy()
    if g.empty:
        return g
    g["time_s"] = g["time_s"] - g.groupby("run_id")["time_s"].transform("min")
    g["energy_j"] = g["mean_power_w"].fillna(0.0) * g["time_s"]
    g["phase"] = "grad_sync (idle rank)"
    return g[g["time_s"] > 0]


def waiting_table(phases: pd.DataFrame, floors: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run x device x waiting phase: `energy_j`, `time_s`, the floor applied (`floor_w`,
    `floor_kind`: the bare idle power for phases before a CUDA context can exist, the context
    floor for the others where the trace gave one), `at_floor_j = min(floor_w x time_s,
    energy_j)`, `above_floor_j = energy_j - at_floor_j`, and their shares of the device's energy
    in the run (`device_energy_j`: every phase but the idle baseline, the deconvolution residual
    included). `source` is the phases' source, `basis` measured / estimated / simulated.

    `floors` (optional): `context_floor` rows with `run_id` (a CPU never has a context floor)."""
    p = phases.copy()
    for k in CELL_KEYS + ["host"]:
        if k not in p.columns:
            p[k] = ""
    p["host"] = p["host"].fillna("").astype(str)
    run = p[p["phase"] != IDLE_BASELINE]
    dev_keys = DEVICE_KEYS
    total = run.groupby(dev_keys)["energy_j"].sum().rename("device_energy_j")
    w = run[run["phase"].isin(WAITING_PHASES)]
    w = pd.concat([w, grad_sync_waits(run)], ignore_index=True)
    fl = _floors(p, floors)
    w = w.merge(fl, on=dev_keys, how="left").merge(total.reset_index(), on=dev_keys, how="left")
    ranked = w["device_kind"].isin(per_rank_kinds())  # the accelerators: a context floor
    ctx_ok = ranked & w["context_idle_w"].notna() & ~w["phase"].isin(BEFORE_CONTEXT)
    w["floor_w"] = np.where(ctx_ok, w["context_idle_w"], w["idle_w"])
    w["floor_kind"] = np.where(ctx_ok, "idle with CUDA context",
                               np.where(ranked,
                                        "idle without CUDA context (idle baseline)",
                                        "idle baseline"))
    e = w["energy_j"].astype(float)
    w["at_floor_j"] = np.clip(w["floor_w"].fillna(0.0) * w["time_s"], 0.0, np.maximum(e, 0.0))
    w["above_floor_j"] = e - w["at_floor_j"]
    for col, share in (("energy_j", "share"), ("at_floor_j", "at_floor_share"),
                       ("above_floor_j", "above_floor_share")):
        w[share] = w[col] / w["device_energy_j"]
    w["basis"] = w["source"].map(basis)
    cols = (["run_id"] + CELL_KEYS + ["device_kind", "host", "device", "phase", "time_s",
             "energy_j", "mean_power_w", "idle_w", "context_idle_w", "floor_w", "floor_kind",
             "at_floor_j", "above_floor_j", "device_energy_j", "share", "at_floor_share",
             "above_floor_share", "source", "basis"])
    return w[cols].sort_values(["run_id", "host", "device", "phase"]).reset_index(drop=True)


def run_summary(waiting: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """Per run x device kind: the run's energy split into `work_j` and `waiting_j` (= at floor +
    above floor), `waiting_share`, and the biggest waiting phase. Runs whose device kind waited in
    no phase have waiting 0."""
    run = phases[phases["phase"] != IDLE_BASELINE].copy()
    for k in CELL_KEYS:
        if k not in run.columns:
            run[k] = ""
    keys = ["run_id"] + CELL_KEYS + ["device_kind"]
    tot = run.groupby(keys, as_index=False, dropna=False).agg(
        energy_j=("energy_j", "sum"), source=("source", lambda s: ",".join(sorted(set(s)))))
    by_phase = waiting.groupby(keys + ["phase"], as_index=False, dropna=False)[
        ["energy_j", "at_floor_j", "above_floor_j"]].sum()
    agg = by_phase.groupby(keys, as_index=False, dropna=False).agg(
        waiting_j=("energy_j", "sum"), at_floor_j=("at_floor_j", "sum"),
        above_floor_j=("above_floor_j", "sum"))
    top = by_phase.sort_values("energy_j").groupby(keys, dropna=False).tail(1)[
        keys + ["phase", "energy_j"]].rename(columns={"phase": "biggest_phase",
                                                      "energy_j": "biggest_phase_j"})
    out = tot.merge(agg, on=keys, how="left").merge(top, on=keys, how="left")
    out[["waiting_j", "at_floor_j", "above_floor_j"]] = out[
        ["waiting_j", "at_floor_j", "above_floor_j"]].fillna(0.0)
    out["work_j"] = out["energy_j"] - out["waiting_j"]
    out["waiting_share"] = out["waiting_j"] / out["energy_j"]
    out["basis"] = out["source"].map(basis)
    return out


def cell_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per cell (workload x storage x checkpoint) x device kind, over its repeats (`run_summary`
    rows): n and the means of energy, waiting, at floor, above floor, work and waiting share; the
    biggest waiting phase (the most frequent one), source and basis."""
    keys = CELL_KEYS[:3] + ["device_kind"]
    num = ["energy_j", "waiting_j", "at_floor_j", "above_floor_j", "work_j", "waiting_share"]
    out = runs.groupby(keys, as_index=False, dropna=False).agg(
        n=("run_id", "nunique"), **{c: (c, "mean") for c in num},
        waiting_share_min=("waiting_share", "min"), waiting_share_max=("waiting_share", "max"),
        biggest_phase=("biggest_phase", lambda s: s.mode().iloc[0] if s.notna().any() else ""),
        source=("source", lambda s: ",".join(sorted(set(",".join(s).split(","))))))
    out["basis"] = out["source"].map(basis)
    return out


J_PER_KWH = 3.6e6
SIM_SOURCE = "simulated (simgpu_model: cap on the wait only, wait time unchanged)"


def waiting_facility(cells: pd.DataFrame, jobs_per_year: float) -> pd.DataFrame:
    """Per cell x device kind (`waiting.cell_summary` rows): per job the measured waiting energy
    (at the idle floor and above it) and, for `jobs_per_year` such jobs, the energy a year in kWh.
    `source` says `estimate (jobs_per_year x waiting per job: <basis>)`."""
    out = cells[["workload", "storage", "checkpoint", "device_kind", "n", "energy_j",
                 "waiting_j", "at_floor_j", "above_floor_j", "waiting_share",
                 "biggest_phase"]].rename(columns={
                     "energy_j": "energy_per_job_j", "waiting_j": "waiting_per_job_j",
                     "at_floor_j": "at_floor_per_job_j",
                     "above_floor_j": "above_floor_per_job_j"}).copy()
    out["jobs_per_year"] = float(jobs_per_year)
    for col, per_job in (("waiting_kwh_per_year", "waiting_per_job_j"),
                         ("at_floor_kwh_per_year", "at_floor_per_job_j"),
                         ("above_floor_kwh_per_year", "above_floor_per_job_j"),
                         ("energy_kwh_per_year", "energy_per_job_j")):
        out[col] = out[per_job] * out["jobs_per_year"] / J_PER_KWH
    out["source"] = ("estimate (jobs_per_year x waiting per job, "
                     + cells["basis"].astype(str) + ")")
    return out


def capped_wait_power(power_w: float, floor_w: float, cap_w: float, model: SimGpuModel,
                      mem_share: float = 0.0) -> float:
    """The simulated power of a wait measured at `power_w` with the cap `cap_w` on: the wait's
    activity above the floor is `(power_w - floor_w) / (P(1) - floor_w)` of the model's full-load
    power P(1) (the model's idle power set to the measured floor); the cap lowers the SM clock to
    the highest f with P(f) <= cap. Never above the cap (nor above `power_w`), never below the
    floor (a cap below the floor leaves the floor: the one case where the cap is not met)."""
    if not np.isfinite(power_w) or power_w <= cap_w:
        return float(power_w)
    if floor_w >= cap_w:  # a cap at or below the idle floor cannot be met: the floor stays
        return float(floor_w)
    m = replace(model, idle_w=float(floor_w))
    full = float(m.power(1.0, mem_share))
    act = float(np.clip((power_w - floor_w) / max(full - floor_w, 1e-9), 0.0, 1.0))
    grid = np.linspace(m.f_min, 1.0, 2001)
    p = m.power(grid, mem_share, activity=act)
    ok = p <= cap_w + 1e-9
    sim = float(p[ok].max()) if ok.any() else float(cap_w)  # below f_min: the cap still holds
    return float(min(max(sim, floor_w), cap_w))


def waiting_whatif(waiting: pd.DataFrame, caps_w: list[float] | None = None,
                   model: SimGpuModel | None = None, mem_share: float = 0.0) -> pd.DataFrame:
    """Per GPU waiting row (`waiting.waiting_table`) and cap: `sim_power_w`
    (`capped_wait_power`), `sim_energy_j` = sim power x the measured time (the wait does no GPU
    work, so its length is taken as unchanged), `saving_j` = measured - simulated energy,
    `saving_share` of the phase's measured energy, and `note`. Caps default to the model's lowest
    accepted cap; `mem_share` (the memory-bound share of what activity the wait has) is an
    assumption recorded in the table."""
    model = model or SimGpuModel()
    lo, hi = model.cap_range_w
    caps = list(caps_w) if caps_w else [lo]
    g = waiting[waiting["device_kind"] == GPU.name]  # the simulated GPU model's caps
    rows = []
    for r in g.itertuples(index=False):
        power = r.energy_j / r.time_s if r.time_s > 0 else np.nan
        for cap in caps:
            rec = {"run_id": r.run_id, "workload": r.workload, "storage": r.storage,
                   "checkpoint": r.checkpoint, "repeat": r.repeat, "device": r.device,
                   "phase": r.phase, "time_s": r.time_s, "measured_energy_j": r.energy_j,
                   "measured_power_w": power, "measured_basis": r.basis, "floor_w": r.floor_w,
                   "cap_w": float(cap), "min_cap_w": lo, "mem_share_assumed": mem_share}
            if cap < lo or cap > hi:
                rec.update(sim_power_w=np.nan, sim_energy_j=np.nan, saving_j=np.nan,
                           note=f"cap {cap:g} W outside the caps the GPU accepts "
                                f"[{lo:g}, {hi:g}] W: not evaluated")
            else:
                sim = capped_wait_power(power, r.floor_w, cap, model, mem_share)
                rec.update(sim_power_w=sim, sim_energy_j=sim * r.time_s,
                           saving_j=(power - sim) * r.time_s if np.isfinite(power) else 0.0)
                if not np.isfinite(power):
                    rec["note"] = "no time in the phase"
                elif power <= cap:
                    rec["note"] = (f"measured wait power {power:.0f} W already at or below the "
                                   f"cap: saving 0")
                elif r.floor_w >= cap:
                    rec["note"] = ("cap at or below the idle floor: power cannot go below the "
                                   "floor")
                elif sim <= r.floor_w + 1e-9:
                    rec["note"] = "capped power reaches the idle floor: a cap cannot go below it"
                else:
                    rec["note"] = "cap binds: power lowered to the cap's clock"
            rows.append(rec)
    out = pd.DataFrame(rows, columns=[
        "run_id", "workload", "storage", "checkpoint", "repeat", "device", "phase", "time_s",
        "measured_energy_j", "measured_power_w", "measured_basis", "floor_w", "cap_w",
        "min_cap_w", "mem_share_assumed", "sim_power_w", "sim_energy_j", "saving_j", "note"])
    out["saving_share"] = out["saving_j"] / out["measured_energy_j"]
    out["source"] = f"{SIM_SOURCE}; {model.name}"
    return out


WAITING_FILES = {"waiting": "waiting.csv", "runs": "waiting_runs.csv",
                 "facility": "waiting_facility.csv", "whatif": "waiting_whatif.csv"}


def context_floors(traces: list[str | Path], metas: list[str | Path]) -> pd.DataFrame:
    """`waiting.context_floor` of every run (trace i with meta i), with its `run_id`."""
    if len(traces) != len(metas):
        raise InputError(f"metas: {len(metas)} files for {len(traces)} traces")
    frames = []
    for t, m in zip(traces, metas, strict=True):
        meta = read_meta(m)
        idle = meta.idle_baseline or {}
        f = context_floor(read_trace(t), idle.get("start_ns"), idle.get("end_ns"))
        f["run_id"] = meta.run_id or Path(m).parent.name
        frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def waiting_tables(phases: pd.DataFrame, floors: pd.DataFrame | None, jobs_per_year: float,
                   caps_w: list[float] | None = None) -> dict[str, pd.DataFrame]:
    """Every waiting table by file name (pure)."""
    w = waiting_table(phases, floors)
    runs = run_summary(w, phases)
    return {WAITING_FILES["waiting"]: w, WAITING_FILES["runs"]: runs,
            WAITING_FILES["facility"]: waiting_facility(cell_summary(runs), jobs_per_year),
            WAITING_FILES["whatif"]: waiting_whatif(w, caps_w)}


def write_waiting_tables(phases: str | Path, out_dir: str | Path, jobs_per_year: float,
                         traces: list[str | Path] | None = None,
                         metas: list[str | Path] | None = None,
                         caps_w: list[float] | None = None) -> list[Path]:
    """Read the run-level phases table (`results/tables/phases.csv`) and, when given, each cell's
    trace and meta.json (the context floors), write the waiting tables into `out_dir`. Cells under
    custody are verified against their seals first (wattlife.custody)."""
    from ..custody import require_sound

    require_sound(list(traces or []) + list(metas or []), derived=False)  # cells as sealed
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    floors = context_floors(list(traces), list(metas or [])) if traces else None
    paths = []
    table = read_table(Path(phases), PHASES_COLUMNS)  # a missing column: one line naming it
    for name, df in waiting_tables(table, floors, jobs_per_year, caps_w).items():
        paths.append(write_csv(df, out / name))
    return paths
