"""The rest of the node (issue 45): per phase, the whole node's energy minus its measured parts'.

A host whose trace has a `node` device (pm_counters, Redfish, IPMI DCMI, sstat) gets, for every
phase of its `node` rows, a `node_rest` row: node minus the host's rows of the node-part kinds
(`contracts.node_part_kinds`: GPU, CPU, DRAM) for the same phase name. The intervals of the node
and of the parts are not independent (one phase boundary moves energy in all of them alike), so
the difference takes the worst case, never a quadrature sum:
lo = node_lo - sum(parts_hi), hi = node_hi - sum(parts_lo).

Every node row's interval holds the reading's age (`node_age`: each reading at most one node
period old, the period as meta.json observed it, else the trace's spacing). A phase whose
instances are shorter on average than that period (`time_s / count < period`) is not resolved
by it: its node and node_rest rows carry `below_node_period` True and `identified` False, and the
node interval is widened further to what any power the node was seen drawing allows over that
time (lowest to highest reading x time_s). Without a node device nothing changes (no row, no
column).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..contracts import KINDS, RESIDUAL, node_part_kinds
from .node_age import widen_for_age
from .series import DeviceSeries
from .tree_spill import AnyTree

#: the whole node's kind (`contracts.kinds.NODE`)
NODE_KIND = KINDS["node"].name
#: the derived rows' device and kind name (not a sensor: no trace device is named so)
NODE_REST = "node_rest"
#: the flag column of node / node_rest rows whose phases the node sensor's period does not resolve
BELOW_PERIOD = "below_node_period"


@dataclass(frozen=True)
class NodeSensor:
    """What attribution needs of one host's node series: its reading period and power range."""

    period_s: float
    min_w: float
    max_w: float

    @classmethod
    def of(cls, s: DeviceSeries, period_s: float | None = None) -> NodeSensor:
        """From the series: `period_s` where meta.json observed one, else the trace's spacing."""
        if s.power_w is not None and len(s.power_w):
            lo, hi = s.p_min(), s.p_max()
        else:
            lo, hi = s.floor_w, s.upper_w
        p = period_s if period_s is not None and np.isfinite(period_s) else s.spacing_s
        return cls(float(p), lo, hi)


def node_periods(sampler: Mapping[str, Any] | None, host: str | None) -> dict[str, float]:
    """{host: the node sensor's observed reading period} from meta.json's `sampler.backends`
    (a backend whose devices include `node` and that recorded `reading_period_s`); empty when
    none did (attribution then takes the trace's spacing)."""
    backends = sampler.get("backends") if sampler is not None else None
    for b in backends if isinstance(backends, list) and host else []:
        p = b.get("reading_period_s") if isinstance(b, dict) else None
        if NODE_KIND in (b.get("devices") or []) and isinstance(p, (int, float)) and p > 0:
            return {str(host): float(p)}
    return {}


def node_rows(df: pd.DataFrame, s: DeviceSeries, tree: AnyTree,
              nodes: dict[str, NodeSensor], node_periods: Mapping[str, float] | None
              ) -> pd.DataFrame:
    """A node device's phases table with its intervals holding the reading's age (one node period,
    `node_age.widen_for_age`); the host's node sensor into `nodes` (for `add_node_rest`)."""
    sensor = nodes[s.host] = NodeSensor.of(s, (node_periods or {}).get(s.host))
    return widen_for_age(df, s, tree, sensor.period_s, sensor.max_w)


def _flag_short(node: pd.DataFrame, sensors: Mapping[str, NodeSensor]) -> pd.DataFrame:
    """The node rows with `below_node_period`, their interval widened where it is True."""
    node = node.copy()
    period = node["host"].map(lambda h: sensors[h].period_s if h in sensors else np.nan)
    per_instance = node["time_s"] / node["count"].clip(lower=1)
    short = (node["phase"] != RESIDUAL) & (node["time_s"] > 0) & (per_instance < period)
    node[BELOW_PERIOD] = short.astype("boolean")
    lo_w = node["host"].map(lambda h: sensors[h].min_w if h in sensors else np.nan)
    hi_w = node["host"].map(lambda h: sensors[h].max_w if h in sensors else np.nan)
    t = node["time_s"].clip(lower=0.0)
    node.loc[short, "energy_lo_j"] = np.fmin(node["energy_lo_j"], lo_w * t)[short]
    node.loc[short, "energy_hi_j"] = np.fmax(node["energy_hi_j"], hi_w * t)[short]
    if "identified" in node.columns:
        node.loc[short, "identified"] = False
    return node


def _joined(values: pd.Series) -> str:
    return ",".join(sorted({str(v) for v in values if isinstance(v, str) and v}))


def _rest_rows(node: pd.DataFrame, parts: pd.DataFrame) -> pd.DataFrame:
    """One node_rest row per node row: node minus the same host's parts of the same phase."""
    agg = parts.groupby(["host", "phase"], as_index=False).agg(
        p_j=("energy_j", "sum"), p_lo=("energy_lo_j", "sum"), p_hi=("energy_hi_j", "sum"),
        p_cov=("covered_fraction", "min"), p_method=("method", _joined),
        p_source=("source", _joined))
    m = node.merge(agg, on=["host", "phase"], how="left")
    rest = node.copy()
    rest["device"] = rest["device_kind"] = NODE_REST
    rest["energy_j"] = (m["energy_j"] - m["p_j"].fillna(0.0)).to_numpy()
    rest["energy_lo_j"] = (m["energy_lo_j"] - m["p_hi"].fillna(0.0)).to_numpy()
    rest["energy_hi_j"] = (m["energy_hi_j"] - m["p_lo"].fillna(0.0)).to_numpy()
    rest["covered_fraction"] = np.fmin(m["covered_fraction"], m["p_cov"]).to_numpy()
    rest["method"] = [",".join(sorted({a, *b.split(",")})) if isinstance(b, str) and b else a
                      for a, b in zip(m["method"], m["p_method"], strict=True)]
    rest["source"] = [f"{a}-minus-{b}" if isinstance(b, str) and b else f"{a}-minus-none"
                      for a, b in zip(m["source"], m["p_source"], strict=True)]
    for col in ("idle_power_w", "static_j", "dynamic_j", "window_ms", "identifiability"):
        if col in rest.columns:
            rest[col] = np.nan
    return rest


def add_node_rest(phases: pd.DataFrame, sensors: Mapping[str, NodeSensor]) -> pd.DataFrame:
    """`phases` with every node row flagged (`below_node_period`) and a `node_rest` row beside
    it; unchanged where no host has a node device. `sensors`: host -> its node sensor."""
    is_node = phases["device_kind"] == NODE_KIND
    if not is_node.any():
        return phases
    node = _flag_short(phases[is_node], sensors)
    host_of_node = set(node["host"])
    parts = phases[phases["device_kind"].isin(node_part_kinds())
                   & phases["host"].isin(host_of_node)]
    rest = _rest_rows(node, parts)
    others = phases[~is_node].assign(**{BELOW_PERIOD: pd.NA}).astype({BELOW_PERIOD: "boolean"})
    return pd.concat([others, node, rest], ignore_index=True)
