"""The events contract's checks (`events.csv`, `events.rank<N>.csv`): clock, end >= start, the
attribution's nesting rule per (host, rank), concurrent phases finished, steps carrying items."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..attribution import OVERLAP_TOL_NS, nest, resolve_overlaps, timeline
from ..contracts import CONCURRENT_PHASES, file_line
from .findings import ERROR, WARNING, Finding, capped, check_clock


def nesting(ev: pd.DataFrame, tol_ns: int = OVERLAP_TOL_NS) -> pd.DataFrame:
    """Each interval's depth and parent (an index label of `ev`, -1 at the top) within its
    (host, rank), whether it overlaps its would-be parent without nesting inside it, and
    `clamp_ns`: how far the attribution moves its bounds to resolve an overlap of at most
    `tol_ns` (`attribution.resolve_overlaps`; those are then not overlaps).

    The attribution's rule (`attribution.nest`), collecting every violation instead of the first;
    concurrent phases (`attribution.timeline`) are top-level rows outside it."""
    ev = ev.assign(host_key=ev["host"].astype(str), rank_key=ev["rank"])
    out = pd.DataFrame(index=ev.index, columns=["depth", "parent", "overlap", "clamp_ns"])
    out["depth"], out["parent"], out["overlap"], out["clamp_ns"] = 0, -1, False, 0
    for _, g in timeline(ev).groupby(["host_key", "rank_key"], sort=False):
        s, e, clamp = resolve_overlaps(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), tol_ns)
        order = np.lexsort((-e, s))
        depth, parent, over = nest(s[order], e[order])
        labels = g.index.to_numpy()[order]
        has = parent >= 0
        out.loc[labels, "depth"] = depth
        out.loc[labels, "parent"] = np.where(has, labels[np.maximum(parent, 0)], -1)
        out.loc[labels, "overlap"] = over
        out.loc[g.index, "clamp_ns"] = clamp
    return out.astype({"depth": np.int64, "parent": np.int64, "overlap": bool,
                       "clamp_ns": np.int64}).loc[ev.index]


def check_events(ev: pd.DataFrame, now_ns: int, max_rows: int = 5) -> list[Finding]:
    """Events rows (numbers converted, `file_name` and `line_no` columns): clock, end ≥ start,
    nesting per (host, rank), steps carrying items."""
    f = row_findings(ev, now_ns, max_rows)
    neg = (ev["end_ns"] < ev["start_ns"]).to_numpy()
    ok = ev[~neg & ev["start_ns"].notna() & ev["end_ns"].notna()].copy()
    if len(ok):
        ok["start_ns"] = ok["start_ns"].astype(np.int64)
        ok["end_ns"] = ok["end_ns"].astype(np.int64)
        tree = nesting(ok)
        moved = ok[(tree["clamp_ns"] > 0).to_numpy()]
        for file, g in moved.groupby("file_name", sort=False):
            f += capped(WARNING, "events.overlap-clamped", str(file), g["line_no"],
                         [f"phase '{r.phase}' overlaps a neighbour by "
                          f"{tree.loc[r.Index, 'clamp_ns'] / 1e3:.1f} us (at most "
                          f"{OVERLAP_TOL_NS / 1e6:g} ms: a cross-clock boundary); attribution "
                          "clamps it" for r in g.head(max_rows).itertuples()], max_rows)
        bad = ok[tree["overlap"].to_numpy()]
        for file, g in bad.groupby("file_name", sort=False):
            p = ok.loc[tree.loc[g.index, "parent"]]
            f += capped(ERROR, "events.overlap", str(file), g["line_no"],
                         [f"phase '{r.phase}' [{r.start_ns}, {r.end_ns}] overlaps '{q.phase}' "
                          f"({_in_file(q)}[{q.start_ns}, {q.end_ns}]) without "
                          f"nesting inside it (host {r.host}, rank {r.rank})"
                          for r, q in zip(g.head(max_rows).itertuples(),
                                          p.head(max_rows).itertuples(), strict=True)], max_rows)
    return f + _concurrent_unfinished(ev, max_rows) + step_findings(ev, max_rows)


def row_findings(ev: pd.DataFrame, now_ns: int, max_rows: int = 5) -> list[Finding]:
    """`check_events`' checks of each row alone before the nesting: the clock, end >= start
    (rows of any files, in file order: also a chunk's, `check.events_stream`)."""
    f: list[Finding] = []
    for file, g in ev.groupby("file_name", sort=False):
        for col in ("start_ns", "end_ns"):
            f += check_clock(g[col], g["line_no"], col, str(file), now_ns, max_rows)
    neg = (ev["end_ns"] < ev["start_ns"]).to_numpy()
    for file, g in ev[neg].groupby("file_name", sort=False):
        f += capped(ERROR, "events.end-before-start", str(file), g["line_no"],
                     [f"phase '{r.phase}' ends {(r.start_ns - r.end_ns) / 1e6:.3f} ms before it "
                      "starts" for r in g.head(max_rows).itertuples()], max_rows)
    return f


def step_findings(ev: pd.DataFrame, max_rows: int = 5) -> list[Finding]:
    """`check_events`' checks of each `step` row: it carries items, and not zero of them."""
    f: list[Finding] = []
    steps = ev[ev["phase"] == "step"]
    no_items = (steps["items"].isna() | (steps["items"] < 0)).to_numpy()
    for file, g in steps[no_items].groupby("file_name", sort=False):
        f += capped(ERROR, "events.step-items", str(file), g["line_no"],
                     [f"step {r.step} carries no items (got {r.items}); throughput needs the "
                      "images/tokens of each step: step(items=...)"
                      for r in g.head(max_rows).itertuples()], max_rows)
    for file, g in steps[(steps["items"] == 0).to_numpy()].groupby("file_name", sort=False):
        f += capped(WARNING, "events.step-zero-items", str(file), g["line_no"],
                     [f"step {r.step} trained 0 items (e.g. every image of its batch was "
                      "corrupt): its time counts in throughput, its items do not"
                      for r in g.head(max_rows).itertuples()], max_rows)
    return f


def _in_file(row: Any) -> str:
    """'file:line, ' of a row (an itertuples tuple), '' when unknown (`contracts.file_line`)."""
    loc = file_line(getattr(row, "file_name", None), getattr(row, "line_no", None))
    return f"{loc}, " if loc else ""


def _concurrent_unfinished(ev: pd.DataFrame, max_rows: int) -> list[Finding]:
    """A concurrent phase (a background checkpoint write) ending after its rank's last timeline
    phase: the process ended (or stopped marking) before the write it started was complete."""
    conc = ev["phase"].isin(CONCURRENT_PHASES)
    if not conc.any():
        return []
    last = timeline(ev).groupby(["host", "rank"])["end_ns"].max()
    late = ev[conc & (ev["end_ns"] > ev.set_index(["host", "rank"]).index.map(last).to_numpy())]
    return late_findings(late, max_rows)


def late_findings(late: pd.DataFrame, max_rows: int) -> list[Finding]:
    """`events.concurrent-unfinished` of the concurrent rows ending after their rank's last
    timeline phase (rows in file order)."""
    return [x for file, g in late.groupby("file_name", sort=False) for x in capped(
        ERROR, "events.concurrent-unfinished", str(file), g["line_no"],
        [f"'{r.phase}' ends after rank {r.rank}'s last phase: the run did not wait for it"
         for r in g.head(max_rows).itertuples()], max_rows)]
