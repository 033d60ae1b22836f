"""What waiting costs at scale, and what a lower power cap during the wait would have saved.

Pure functions on the tables of `analysis.waiting`:

- `waiting_facility(cells, jobs_per_year)`: a facility running a cell's job `jobs_per_year`
  times a year spends jobs x its measured waiting energy per job (an `estimate`, with its inputs
  in the table), like the download cache estimate (`analysis.downloads.facility_estimate`);
- `waiting_whatif(waiting, caps_w, model)`: per GPU waiting phase, its power under a lower cap
  from the simulated GPU model (`simgpu_model.SimGpuModel`, labelled `simulated`), beside the
  measured energy. Physics: power never above the cap, never below the device's measured idle
  floor, and a cap the GPU does not accept (below `min_cap_w`) is not evaluated. A wait whose
  measured power is already at or below the cap saves 0, and the row says so.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..simgpu_model import SimGpuModel

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
    g = waiting[waiting["device_kind"] == "gpu"]
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
