"""The lifecycle study's shares of one cell, over its post-warm-up training (pure: a phases table
in, numbers out).

Training phases: every phase of the cell except what `wattlife run` adds (`idle_baseline`,
`process_startup`, `process_exit`), `unattributed`, the deconvolution residual, the `step`
rows' own gaps, and `compile` and `warmup`, which are reported as their own rows (phases.csv
from `attribute_files` names them; see `attribution.warmup`). So a compiled cell's shares are
those of its post-warm-up work, comparable with an uncompiled one's, and what compilation and
warm-up cost is beside them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..contracts import COMPILE, DATA_LOAD, NOT_TRAINING_PHASES, STAGE_COPY, WARMUP, processor_kinds
from ..contracts.kinds import GPU

NOT_TRAINING = NOT_TRAINING_PHASES
COPY_AND_LOAD = (STAGE_COPY, DATA_LOAD)


def training_shares(phases: pd.DataFrame) -> dict[str, Any]:
    """`gpu_share_of_training` (GPU energy over GPU + CPU energy of the training phases),
    `copy_plus_data_load_{time,energy}_share` (stage_copy + data_load over the training phases:
    GPU time, CPU + GPU energy), and per device kind the energy and GPU time of `compile` and
    `warmup` (`compile_gpu_j`, `compile_cpu_j`, `compile_s`, ...). The kinds are the
    processors of the registry (`contracts.kinds`: GPU and CPU)."""
    kinds = processor_kinds()
    ph = phases[phases["device_kind"].isin(kinds)]
    train = ph[~ph["phase"].isin(NOT_TRAINING)]
    e = train.groupby("device_kind")["energy_j"].sum()
    gpu_t = train[train["device_kind"] == GPU.name].groupby("phase")["time_s"].sum()
    io = train[train["phase"].isin(COPY_AND_LOAD)]
    out: dict[str, Any] = {
        "gpu_share_of_training": float(e.get("gpu", 0.0) / e.sum()) if e.sum() > 0 else None,
        "copy_plus_data_load_time_share":
            float(gpu_t.reindex(list(COPY_AND_LOAD)).fillna(0).sum() / gpu_t.sum())
            if gpu_t.sum() > 0 else None,
        "copy_plus_data_load_energy_share":
            float(io["energy_j"].sum() / e.sum()) if e.sum() > 0 else None,
    }
    for name in (COMPILE, WARMUP):
        rows = ph[ph["phase"] == name]
        for kind in kinds:
            out[f"{name}_{kind}_j"] = float(rows.loc[rows["device_kind"] == kind,
                                                     "energy_j"].sum())
        out[f"{name}_s"] = float(rows.loc[rows["device_kind"] == GPU.name, "time_s"].sum())
    return out


def node_source(sources: pd.Series) -> str:
    """The whole-node source(s) of some `node` rows, from their `source` column (`pm_counters`,
    `redfish`, `ipmi`, `sstat`; several comma-joined, each once), or `none` where there are
    none: what every table with a `node_source` column says."""
    names = set(",".join(sources.astype(str)).split(",")) - {""}
    return ",".join(sorted(names)) or "none"
