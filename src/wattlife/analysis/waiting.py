"""Waiting energy: the part of a run's GPU and CPU energy spent while the GPU waits.

Pure functions, tables in, tables out (see docs/FORMULAS.md, "Waiting energy"):

- `context_floor(trace, ...)`: a GPU's idle power while a process holds a CUDA context, read from
  the run's own trace (the lowest steady one-second median while the GPU's memory is held);
- `waiting_table(phases, floors)`: per run x device x waiting phase, the phase's energy at the
  device's idle floor (floor power x phase time) and above it, and each one's share of the
  device's energy in the run. Energy is conserved: at floor + above = the phase's energy, and
  waiting + work = the device's energy in the run;
- `cell_summary(waiting)`: per cell x device kind over its repeats: waiting energy and share,
  the biggest waiting phase.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contracts import (
    GRAD_SYNC,
    IDLE_BASELINE,
    PROCESS_STARTUP,
    WAITING_PHASES,
    source_basis,
)

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
    span the `power_w` readings are cut into `bin_s` bins; a bin is steady when it has at least 5
    readings and its p90 - p10 spread is at most max(5 W, 5 % of its median); the floor is the
    lowest steady bin's median (`context_bins`: how many steady bins there were). A GPU whose
    trace has no memory readings, or no steady bin, gets NaN (the bare idle floor stands in)."""
    out = []
    gpu = trace[trace["device"].astype(str).str.startswith("gpu")]
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
                steady = stats[(stats["n"] >= 5) & (stats["p90"] - stats["p10"]
                                                    <= np.maximum(5.0, 0.05 * stats["med"]))]
                if len(steady):
                    rec.update(context_idle_w=float(steady["med"].min()),
                               context_bins=len(steady))
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
    g = phases[(phases["phase"] == GRAD_SYNC) & (phases["device_kind"] == "gpu")].copy()
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
    ctx_ok = (w["device_kind"] == "gpu") & w["context_idle_w"].notna() & ~w["phase"].isin(
        BEFORE_CONTEXT)
    w["floor_w"] = np.where(ctx_ok, w["context_idle_w"], w["idle_w"])
    w["floor_kind"] = np.where(ctx_ok, "idle with CUDA context",
                               np.where(w["device_kind"] == "gpu",
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

