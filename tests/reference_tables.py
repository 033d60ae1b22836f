"""Comparing a phases table re-attributed today with the committed one of a reference run.

The committed tables predate the sensor-gap columns (`gap_s`, `gap_energy_j`), the settling
columns of issue 46 (`settle_*`: NaN here, as none is applied to these cells), the run tables'
`node_source` of issue 45 (`none` here) and the gap
threshold of issue 41 (3 reading periods, no floor): the only gaps in the reference traces are
stalls of the sampler thread on the CPU estimate, 3-10 of its 50 ms periods (at a flush or at
CMD's exit; `benchmarks/gap_threshold.py`: none on any NVML series). On the rows such a stall
touches, only the interval may widen and `covered_fraction` drop; every other value, and every
other row, is the committed one. A committed table that already holds the gap columns (written
after issue 41, or re-attributed for the zero-length-phase fix of `tree.segments`) is made again
value for value, widened rows included."""

from __future__ import annotations

import pandas as pd

GAP_COLUMNS = ("gap_s", "gap_energy_j")
SETTLE_COLUMNS = ("settle_ms", "settle_j", "settle_basis")  # issue 46; NaN where not applied
NODE_COLUMNS = ("node_source",)  # issue 45: the run tables name the node source; `none` here
WIDENED = ("energy_lo_j", "energy_hi_j", "covered_fraction")


def same_but_gaps(made: pd.DataFrame, committed: pd.DataFrame, name: str) -> None:
    """`made` is `committed` plus the gap columns, but for the widening on CPU rows in gaps; a
    committed table with the gap columns is `made` itself."""
    extra = [c for c in made.columns if c not in committed.columns]
    assert set(extra) <= set(GAP_COLUMNS + SETTLE_COLUMNS + NODE_COLUMNS), (name, extra)
    for c in set(extra) & set(SETTLE_COLUMNS):
        assert made[c].isna().all(), (name, c)  # the committed table had no settling either
    for c in set(extra) & set(NODE_COLUMNS):
        assert set(made[c]) == {"none"}, (name, c)  # no reference run had a node source
    assert [c for c in made.columns if c not in extra] == list(committed.columns), name
    if "gap_s" in committed.columns:  # written with the sensor-gap columns: every value
        pd.testing.assert_frame_equal(made[list(committed.columns)], committed,
                                      check_exact=False, rtol=1e-9, atol=1e-9)
        return
    gap = (made["gap_s"].fillna(0.0) > 0) if "gap_s" in made else made.index != made.index
    if gap.any():
        assert set(made.loc[gap, "source"]) == {"estimate"}, (name, made.loc[gap, "device"])
    cols = list(committed.columns)
    pd.testing.assert_frame_equal(made.loc[~gap, cols], committed.loc[~gap], check_exact=False,
                                  rtol=1e-9, atol=1e-9)
    if not gap.any():
        return
    same = [c for c in cols if c not in WIDENED]
    pd.testing.assert_frame_equal(made.loc[gap, same], committed.loc[gap, same],
                                  check_exact=False, rtol=1e-9, atol=1e-9)
    m, c = made.loc[gap], committed.loc[gap]
    assert (m["energy_lo_j"] <= c["energy_lo_j"] + 1e-9).all(), name
    assert (m["energy_hi_j"] >= c["energy_hi_j"] - 1e-9).all(), name
    assert (m["covered_fraction"] < c["covered_fraction"]).all(), name
