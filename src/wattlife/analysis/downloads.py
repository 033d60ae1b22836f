"""Preparation and post-execution tables: download/upload rows, the linear fit of energy and time
against size, the facility-scale cost a shared cache would avoid, and the staging break-even.

Pure functions on tables (`download_rows` joins each transfer's record with its attributed phases;
`prepare_tables` makes every table of `wattlife prepare-tables`); `prepare_tables_files` is the
file-level entry (records, phases and cell files in, the tables' CSVs out).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..contracts import KINDS, TRANSFER_PHASES, node_part_kinds
from ..errors import InputError
from .shares import node_source

GB = 1e9
NODE_KIND = KINDS["node"].name  # the whole node (issue 45), where a node source was read


def overlapping(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each interval, how many of the others overlap it (NaN where its window is unknown)."""
    s, e = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    hit = (s[None, :] < e[:, None]) & (e[None, :] > s[:, None])
    np.fill_diagonal(hit, False)
    out: np.ndarray = hit.sum(axis=1).astype(float)
    out[np.isnan(s) | np.isnan(e)] = np.nan
    return out


def download_rows(records: list[dict[str, Any]], phases: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per transfer x device kind: artefact, kind, client, bytes, seconds, network bytes,
    energy of its phase on that device kind with the 95% interval, and the source of each number;
    `node_share`: that energy's share of the whole node's (NaN without a node source, whose
    name `node_source` gives, or `none`).

    `records[i]` is what `wattlife fetch/upload --record` wrote; `phases[i]` the attributed
    phases.csv of the same run."""
    over = overlapping(np.array([r.get("start_ns", np.nan) for r in records], dtype=float),
                       np.array([r.get("end_ns", np.nan) for r in records], dtype=float))
    rows = []
    for i, (rec, ph) in enumerate(zip(records, phases, strict=True)):
        ph = ph[ph["phase"].isin(TRANSFER_PHASES)]
        node = ph[ph["device_kind"] == NODE_KIND]
        node_j = float(node["energy_j"].sum()) if len(node) else np.nan
        node_src = node_source(node["source"])
        for kind, g in ph.groupby("device_kind"):
            rows.append({
                "artefact": rec["name"], "kind": rec.get("kind", ""),
                "direction": rec.get("direction", "download"),
                "client": rec.get("client", ""), "server": rec.get("server", "remote"),
                "size_bytes": rec.get("size_bytes", rec.get("bytes")), "bytes": rec.get("bytes"),
                "seconds": rec.get("seconds"), "net_recv_bytes": rec.get("net_recv_bytes"),
                "net_sent_bytes": rec.get("net_sent_bytes"), "skipped": rec.get("skipped", False),
                "device_kind": kind, "energy_j": g["energy_j"].sum(),
                "energy_lo_j": g["energy_lo_j"].sum(), "energy_hi_j": g["energy_hi_j"].sum(),
                "phase_time_s": g["time_s"].max(), "method": ",".join(sorted(set(g["method"]))),
                "source": ",".join(sorted(set(g["source"]))),
                "bytes_source": "measured (client)", "net_source": "measured (psutil, all "
                                                                   "interfaces)",
                "transfers_at_once": rec.get("transfers_at_once"),
                "overlapping_transfers": over[i],
                # issue 45: the kind's share of the whole node's energy, and which source read it
                "node_share": g["energy_j"].sum() / node_j, "node_source": node_src,
            })
    return pd.DataFrame(rows)


def download_fit(rows: pd.DataFrame) -> pd.DataFrame:
    """Per direction x device kind: energy = a + b * GB and time = c + d * GB by least squares,
    with R^2 (scipy.stats.linregress). Skipped transfers (already present) are left out."""
    out = []
    d = rows[~rows["skipped"].astype(bool)]
    for (direction, kind), g in d.groupby(["direction", "device_kind"]):
        x = g["bytes"].to_numpy(float) / GB
        rec = {"direction": direction, "device_kind": kind, "n": len(g),
               "source": ",".join(sorted(set(g["source"])))}
        if len(g) >= 3 and np.ptp(x) > 0:
            e = stats.linregress(x, g["energy_j"].to_numpy(float))
            t = stats.linregress(x, g["seconds"].to_numpy(float))
            rec.update(j_per_gb=e.slope, j_intercept=e.intercept, r2_energy=e.rvalue ** 2,
                       s_per_gb=t.slope, s_intercept=t.intercept, r2_time=t.rvalue ** 2)
        else:
            rec.update(j_per_gb=np.nan, j_intercept=np.nan, r2_energy=np.nan, s_per_gb=np.nan,
                       s_intercept=np.nan, r2_time=np.nan)
        out.append(rec)
    return pd.DataFrame(out)


def facility_estimate(catalogue: pd.DataFrame, fit: pd.DataFrame, users_per_artefact: float,
                      downloads_per_user_per_month: float) -> pd.DataFrame:
    """Per catalogue artefact: energy per download predicted by the fit (all device kinds summed),
    and per month the energy of every user fetching it vs a shared read-only cache fetching it
    once: avoided = (users x downloads per user - 1) x energy per download. The numbers are
    `estimate`s (a fit applied to public sizes), and say which fit they came from. The per-download
    energy sums the node's parts; a node fit adds the whole node's (`_facility_node`)."""
    f = fit[fit["direction"] == "download"]
    sec_per_gb = float(f["s_per_gb"].mean())
    per_month = users_per_artefact * downloads_per_user_per_month
    out = catalogue[["name", "kind", "size_bytes"]].copy()
    gb = out["size_bytes"].astype(float) / GB
    for r in f.itertuples(index=False):  # per device kind, so a GPU-less login node can drop GPU
        out[f"energy_per_download_j_{r.device_kind}"] = np.maximum(
            r.j_intercept + r.j_per_gb * gb, 0.0)
    # the parts' sum (GPU + CPU + DRAM): node and node_rest hold the parts, so they are apart
    per_kind = [f"energy_per_download_j_{k}" for k in f["device_kind"] if k in node_part_kinds()]
    out["energy_per_download_j"] = out[per_kind].sum(axis=1)
    out["seconds_per_download"] = sec_per_gb * gb
    out["downloads_per_month"] = per_month
    out["energy_no_cache_kwh_per_month"] = out["energy_per_download_j"] * per_month / 3.6e6
    out["energy_with_cache_kwh_per_month"] = out["energy_per_download_j"] / 3.6e6
    out["avoided_kwh_per_month"] = (out["energy_no_cache_kwh_per_month"]
                                    - out["energy_with_cache_kwh_per_month"])
    out["source"] = "estimate (fit: " + ",".join(sorted(set(f["source"]))) + ")"
    return _facility_node(out, f, per_month)


def _facility_node(out: pd.DataFrame, fit: pd.DataFrame, per_month: float) -> pd.DataFrame:
    """The facility estimate on the whole node's energy where a node source was read (the
    node's per-download energy, the parts' share of it, the node's avoided kWh per month), and
    `node_source` (its fit's source, or `none`)."""
    col = f"energy_per_download_j_{NODE_KIND}"
    node = fit[fit["device_kind"] == NODE_KIND]
    out["node_source"] = node_source(node["source"])
    if col in out.columns:
        out["node_share"] = out["energy_per_download_j"] / out[col].where(out[col] > 0)
        out["avoided_node_kwh_per_month"] = out[col] * (per_month - 1.0) / 3.6e6
    return out


def staging_breakeven(summary: pd.DataFrame, dataset_bytes: dict[str, float],
                      epochs_run: dict[str, float], sizes_bytes: list[float]) -> pd.DataFrame:
    """Epochs after which copying a dataset to node-local disk has paid for itself.

    From the execution matrix (checkpoint-off cells where there are any; energy summed over
    devices): the copy costs the `local` cell's stage_copy energy for `dataset_bytes[w]`; reading
    from local disk saves, per epoch, (data_load energy of `shared` - of `local`) /
    `epochs_run[w]`. Both scale with the dataset's size, so the break-even `copy / saving` is the
    same at every size; the table evaluates it (and the copy's energy) at `sizes_bytes` for the
    figure. A saving <= 0 (local no faster, as when both paths are one disk) is `inf`: never.
    Energies are the node's parts'; where the summary has node rows, `_staging_node`'s columns
    give the whole node's copy energy and the parts' share of it (`node_source`, else `none`)."""
    s = summary[summary["checkpoint"] == "off"] if "off" in set(summary["checkpoint"]) else summary
    node = _staging_node(s)
    if "device_kind" in s.columns:  # the parts only: node and node_rest rows hold them again
        s = s[s["device_kind"].isin(node_part_kinds())]
    e = s.groupby(["workload", "storage", "phase"])["energy_j"].sum()
    src = s.groupby("workload")["source"].agg(
        lambda v: ",".join(sorted(set(",".join(v).split(",")))))
    out = []
    for w, nbytes in dataset_bytes.items():
        if (not nbytes or (w, "local", "stage_copy") not in e.index
                or (w, "shared", "data_load") not in e.index):
            continue
        copy_per_gb = e[(w, "local", "stage_copy")] / (nbytes / GB)
        saving = ((e[(w, "shared", "data_load")] - e.get((w, "local", "data_load"), 0.0))
                  / epochs_run[w])
        saving_per_gb = saving / (nbytes / GB)
        epochs = copy_per_gb / saving_per_gb if saving_per_gb > 0 else np.inf
        for size in sizes_bytes:
            out.append({"workload": w, "dataset_bytes": float(size), "copy_j_per_gb": copy_per_gb,
                        "saving_j_per_gb_epoch": saving_per_gb,
                        "copy_energy_j": copy_per_gb * size / GB,
                        "breakeven_epochs": epochs, "measured_dataset_bytes": float(nbytes),
                        "source": src.get(w, ""), **node.get(w, {"node_source": "none"})})
    return pd.DataFrame(out)


def _staging_node(summary: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per workload with node rows (issue 45): the node source, and the parts' share of the
    whole node's energy in the `local` cell's stage_copy (`copy_node_share`) with the copy's
    node energy (`copy_node_j`); workloads without node rows are absent (`none`)."""
    if "device_kind" not in summary.columns:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for w, g in summary[summary["device_kind"] == NODE_KIND].groupby("workload"):
        copy = g[(g["storage"] == "local") & (g["phase"] == "stage_copy")]["energy_j"].sum()
        parts = summary[(summary["workload"] == w) & (summary["storage"] == "local")
                        & (summary["phase"] == "stage_copy")
                        & summary["device_kind"].isin(node_part_kinds())]["energy_j"].sum()
        out[str(w)] = {"node_source": node_source(g["source"]),
                       "copy_node_j": float(copy),
                       "copy_node_share": float(parts / copy) if copy > 0 else np.nan}
    return out


def staging_inputs(summaries: list[dict[str, Any]], cells: list[dict[str, Any]]
                   ) -> tuple[dict[str, float], dict[str, float]]:
    """From the cells' work/summary.json and their matrix keys (meta.json `cell`): each
    workload's staged dataset size (its `local` cell) and epochs run (its `shared` cell)."""
    nbytes: dict[str, float] = {}
    epochs: dict[str, float] = {}
    for s, cell in zip(summaries, cells, strict=True):
        w, storage = cell.get("workload"), cell.get("storage")
        if w is None:  # not a matrix cell
            continue
        if storage == "local" and s.get("dataset_bytes"):
            nbytes[w] = s["dataset_bytes"]
        if storage == "shared" and s.get("epochs_run"):
            epochs[w] = s["epochs_run"]
    return nbytes, epochs


def prepare_tables(records: list[dict[str, Any]], phases: list[pd.DataFrame],
                   catalogue: pd.DataFrame, users_per_artefact: float,
                   downloads_per_user_per_month: float,
                   phase_summary: pd.DataFrame | None = None,
                   summaries: list[dict[str, Any]] | None = None,
                   cells: list[dict[str, Any]] | None = None) -> dict[str, pd.DataFrame]:
    """Every preparation table by file name: downloads, their fit, the facility-scale cache
    estimate and, given the execution matrix's phase summary and cells, the staging break-even
    (evaluated at the catalogue's dataset sizes)."""
    rows = download_rows(records, phases)
    fit = download_fit(rows)
    fac = facility_estimate(catalogue, fit, users_per_artefact, downloads_per_user_per_month)
    tables = {"downloads.csv": rows, "download_fit.csv": fit, "facility_cache.csv": fac}
    if phase_summary is not None:
        nbytes, epochs = staging_inputs(summaries or [], cells or [])
        sizes = sorted(catalogue.loc[catalogue["kind"] == "dataset", "size_bytes"].astype(float))
        tables["staging_breakeven.csv"] = staging_breakeven(
            phase_summary, {w: b for w, b in nbytes.items() if w in epochs}, epochs, sizes)
    return tables


def read_records(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Transfer records (JSON); a malformed one is an error naming file, line and column."""
    recs = []
    for r in paths:
        try:
            recs.append(json.loads(Path(r).read_text()))
        except json.JSONDecodeError as exc:
            raise InputError(f"{r}:{exc.lineno}:{exc.colno}: not a valid JSON record "
                             f"({exc.msg})") from None
    return recs


def prepare_tables_files(catalogue: list[dict[str, Any]], users_per_artefact: float,
                         downloads_per_user_per_month: float,
                         records: list[str | Path], out: str | Path,
                         phases: list[str | Path] | None = None,
                         phase_summary: str | Path | None = None,
                         cell_summaries: list[str | Path] | None = None,
                         cell_metas: list[str | Path] | None = None) -> list[Path]:
    """`wattlife prepare-tables`: read the records (each one's phases.csv beside it unless
    `phases` lists them), the phase summary and the cells' summary.json / meta.json (default
    `<cell>/meta.json`, two folders above the summary), write the tables into `out`; their paths.
    No phase summary file: no staging break-even table."""
    from ..contracts import PHASES_COLUMNS, read_meta, read_table, write_csv
    from ..custody import require_sound

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    phase_files = phases or [Path(r).with_name("phases.csv") for r in records]
    # transfers and cells under custody: as sealed (a transfer's phases.csv against its own seal)
    require_sound(list(records), derived=False)
    require_sound(list(phase_files))
    recs = read_records(records)
    if len(phase_files) != len(recs):
        raise InputError(f"--phases: {len(phase_files)} files for {len(recs)} --records")
    summary = summaries = cells = None
    if phase_summary and Path(phase_summary).exists():
        summary = pd.read_csv(phase_summary)
        cell_summaries = list(cell_summaries or [])
        metas = cell_metas or [Path(f).parents[1] / "meta.json" for f in cell_summaries]
        if len(metas) != len(cell_summaries):
            raise InputError(f"--cell-metas: {len(metas)} files for {len(cell_summaries)} "
                             "--cell-summaries")
        require_sound(list(metas), derived=False)  # each cell whole: its work/summary.json too
        cells = [read_meta(m).cell or {} for m in metas]
        summaries = [json.loads(Path(f).read_text()) for f in cell_summaries]
    tables = prepare_tables(recs, [read_table(Path(p), PHASES_COLUMNS) for p in phase_files],
                            pd.DataFrame(catalogue), users_per_artefact,
                            downloads_per_user_per_month, summary, summaries, cells)
    paths = []
    for name, df in tables.items():
        write_csv(df, out / name)
        paths.append(out / name)
    return paths
