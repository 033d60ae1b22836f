"""Aligning the nodes of a multi-node run by the clock mappings each recorded (issue 41).

Each node's timestamps are its steady clock mapped to wall time once, at its start
(`contracts.clock`: epoch = steady + `offset_ns`, known to ± `uncertainty_ns`); meta.json's
`clock` records the mapping and every wall-clock step seen during the run (`wall_steps`). A
step is taken for what time synchronisation makes it, a correction of the node's wall clock
(NTP, a resumed VM catching up): the mapping, made before it, was off by it. So a node's
timestamps are moved by the steps it saw (their sum) less those the reference node saw (the
first host by name, whose files, and the merged meta.json of `launch-node --merge-meta`, stay
as written): every node lands on the reference's mapped clock, whatever each node's boot time
(its steady clock's origin) and wall steps. The uncertainty of that alignment is the two
mappings' uncertainties plus `WALL_STEP_TOL_NS` for each step (a step is seen to that).

A node without a recorded mapping (a run before issue 41, no meta.json beside its trace), or
beside a reference without one, is left as written (`aligned_by`: `as written`), its files byte
for byte those of the merge before issue 41. The step ends (`merge_nodes.clock_offsets`:
data-parallel ranks end each step together) are the check on every node, never a shift: after
alignment their median offset from the reference should lie within `warn_ms` (all-reduce skew)
plus the alignment's uncertainty; beyond it, a warning names the node and how it was aligned."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .contracts.clock import WALL_STEP_TOL_NS
from .errors import InputError


@dataclass(frozen=True)
class NodeClock:
    """One node's recorded mapping: its uncertainty and the wall steps it saw (sum, count)."""

    host: str
    uncertainty_ns: int
    steps_ns: int
    n_steps: int


def read_node_clock(meta: Path) -> NodeClock | None:
    """The mapping a node's meta.json records (`clock`), None where it has none (runs before
    issue 41). A meta.json that is not JSON, or whose `clock` is malformed, is an error naming
    the file."""
    try:
        doc = json.loads(meta.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{meta}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    clock = doc.get("clock")
    if not clock:
        return None
    try:
        steps = [int(s["step_ns"]) for s in clock.get("wall_steps", [])]
        return NodeClock(str(doc["host"]), int(clock["uncertainty_ns"]), sum(steps), len(steps))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{meta}: key clock: a mapping needs host, uncertainty_ns and "
                         f"wall_steps[].step_ns as integers ({type(exc).__name__}: {exc})"
                         ) from None


def node_metas(traces: list[str | Path], metas: list[str | Path] | None) -> list[Path | None]:
    """Each node's meta.json: the ones given, else the meta.json beside each trace if present."""
    if metas is not None:
        if len(metas) != len(traces):
            raise InputError(f"--metas: {len(metas)} file(s) for {len(traces)} trace(s): give "
                             "one meta.json per node, in the traces' order")
        return [Path(m) for m in metas]
    found = [Path(t).with_name("meta.json") for t in traces]
    return [m if m.exists() else None for m in found]


def alignment(events: pd.DataFrame, clocks: list[NodeClock]) -> pd.DataFrame:
    """Per host: `shift_ns` (added to its timestamps), `aligned_by` (reference, mapping, as
    written) and `uncertainty_ms` (NaN where not by mapping)."""
    hosts = sorted(events["host"].astype(str).unique())
    by_host = {c.host: c for c in clocks}
    ref = by_host.get(hosts[0]) if hosts else None
    rows: list[tuple[str, str, int, float]] = []
    for h in hosts:
        c = by_host.get(h)
        if h == hosts[0]:
            rows.append((h, "reference", 0, 0.0))
        elif c is not None and ref is not None:
            unc = (c.uncertainty_ns + ref.uncertainty_ns
                   + WALL_STEP_TOL_NS * (c.n_steps + ref.n_steps))
            rows.append((h, "mapping", c.steps_ns - ref.steps_ns, unc / 1e6))
        else:
            rows.append((h, "as written", 0, float("nan")))
    return pd.DataFrame(rows, columns=["host", "aligned_by", "shift_ns", "uncertainty_ms"])


def shift_hosts(df: pd.DataFrame, shifts: dict[str, int], columns: list[str]) -> pd.DataFrame:
    """`df` with each host's `columns` moved by its shift (ns; integers stay integers)."""
    if not any(shifts.values()):
        return df
    by = df["host"].astype(str).map(shifts).fillna(0).astype("int64")
    return df.assign(**{c: df[c] + by for c in columns})


def checked(align: pd.DataFrame, after: pd.DataFrame, warn_ms: float) -> pd.DataFrame:
    """The clock table (`clock_offsets.csv`): the alignment beside the step-end check after it
    (`offset_ms`, `iqr_ms`, `steps`); `warn` where the step ends still disagree by more than
    `warn_ms` plus the alignment's uncertainty, said in one warning."""
    out = align.merge(after.drop(columns=["warn"], errors="ignore"), on="host", how="left")
    out["shift_ms"] = out.pop("shift_ns") / 1e6
    allowed = warn_ms + out["uncertainty_ms"].fillna(0.0)
    out["warn"] = (out["offset_ms"].abs() > allowed).fillna(False).astype(bool)
    bad = out[out["warn"]]
    if len(bad):
        warnings.warn("node clocks disagree after alignment: " + ", ".join(
            f"{r.host} {r.offset_ms:+.1f} ms over {r.steps} steps (aligned by {r.aligned_by})"
            for r in bad.itertuples()) + f" vs {out['host'].iloc[0]} (allowed: {warn_ms} ms + "
            "the mappings' uncertainty): the nodes' wall clocks disagreed when each mapped its "
            "clock; synchronise them (chrony/PTP) or read cross-node phase energies with that "
            "uncertainty", stacklevel=3)
    return out[["host", "aligned_by", "shift_ms", "uncertainty_ms", "offset_ms", "iqr_ms",
                "steps", "warn"]]
