"""The committed reference results (#12, #13): in every committed phases table under
results/reference/, a phase of non-zero length on a device that draws power has energy > 0, a
lower bound > 0, and an interval of non-zero width. The synthetic test cases of the fault suite
check the attribution code; this checks the numbers that are published."""

import subprocess

import pandas as pd

from conftest import REPO
from wattlife.contracts import PHASES_COLUMNS, RESIDUAL


def committed_phase_tables() -> list[str]:
    """Every committed phases table (contract columns) under results/reference/; the peers'
    comparison files, also named *phases.csv, have other columns and are not phases tables."""
    out = subprocess.run(["git", "ls-files", "results/reference"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    files = [f for f in out if f.endswith("phases.csv")]
    return [f for f in files
            if set(PHASES_COLUMNS) <= set(pd.read_csv(REPO / f, nrows=0).columns)]


def impossible_rows(df: pd.DataFrame) -> dict[int, str]:
    """Line in the file -> what is wrong, for rows of a phase of non-zero length on a device that
    draws power (its rows of the run sum to > 0 J) whose energy is <= 0 J, whose lower bound is
    <= 0 J, or whose interval has zero width.

    Left out, from the code: `deconvolution_residual` (attribution.deconvolve: the deconvolved
    sum minus the measured total, written with time_s 0 and lo = hi = the residual itself, which
    may be 0 or negative; it is not a phase). `unattributed` is kept: it is integrated device
    energy over real time, so it is never 0 J. `node_rest` is a difference (node minus its
    parts: either sign, FORMULAS.md); a `node` row may have a lower bound of 0 J, which a
    reading's age gives a phase whose pieces are shorter than the node's period (node_age)."""
    d = df.assign(line=df.index + 2)
    draws = d.groupby(["run_id", "device"])["energy_j"].transform("sum") > 0
    kind = d["device_kind"] if "device_kind" in d else pd.Series("", index=d.index)
    d = d[draws & (d["time_s"] > 0) & (d["phase"] != RESIDUAL) & (kind != "node_rest")]
    bad: dict[int, str] = {}
    for why, rows in (("energy <= 0 J", d["energy_j"] <= 0),
                      ("lower bound 0 J", (d["energy_lo_j"] <= 0) & (kind[d.index] != "node")),
                      ("zero-width interval", d["energy_hi_j"] <= d["energy_lo_j"])):
        for line in d.loc[rows, "line"]:
            bad.setdefault(int(line), why)
    return bad


def test_the_rule_flags_each_impossible_row():
    ok = {"run_id": "r", "device": "gpu0", "energy_j": 10.0, "energy_lo_j": 9.0,
          "energy_hi_j": 11.0, "time_s": 0.1}
    df = pd.DataFrame([{**ok, "phase": "forward"},
                       {**ok, "phase": "h2d", "energy_j": 0.0, "energy_lo_j": 0.0},
                       {**ok, "phase": "copy", "energy_lo_j": 0.0},
                       {**ok, "phase": "step", "energy_lo_j": 11.0},
                       {**ok, "phase": RESIDUAL, "energy_j": 0.0, "energy_lo_j": 0.0,
                        "energy_hi_j": 0.0, "time_s": 0.0},
                       {**ok, "phase": "idle", "time_s": 0.0, "energy_j": 0.0}])
    assert impossible_rows(df) == {3: "energy <= 0 J", 4: "lower bound 0 J",
                                   5: "zero-width interval"}


def test_committed_phases_have_no_zero_joule_phase_nor_zero_width_interval():
    files = committed_phase_tables()
    assert len(files) >= 20  # the H200 execution, workflow and transfer cells (21 on 2026-12-03)
    found = {f: bad for f in files if (bad := impossible_rows(pd.read_csv(REPO / f)))}
    assert not found, f"impossible rows in committed phases tables: {found}"
