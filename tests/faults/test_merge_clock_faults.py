"""`merge-nodes` aligns nodes by the clock mappings each recorded in its meta.json (issue 41):
whatever each node's boot time (its steady clock's origin, in the mapping's offset) and the
wall-clock steps it saw (corrections: its wall clock was off by them when it mapped its clock),
the merged events and trace are the same: every node on the reference node's clock.

Before: the nodes' files were concatenated as written; a node whose wall clock was off when it
mapped (and was corrected by a step later) stayed off by the step in the merged run, only
warned about through its step ends."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import T0, trace_frame
from wattlife.merge_nodes import merge_node_runs

MS = 1_000_000
S = 1000 * MS
HOSTS = ["a", "b", "c"]


def _truth(host: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two ranks on `host`, 20 steps of 100 ms ending together across nodes (all-reduce), and
    the node's GPU trace at 20 ms, in true time."""
    ends = T0 + np.arange(21) * 100 * MS
    rows = [(r, ends[k], ends[k + 1], k) for k in range(20) for r in (0, 1)]
    ev = pd.DataFrame({"run_id": "r", "host": host, "rank": [r[0] for r in rows],
                       "phase": "step", "start_ns": [r[1] for r in rows],
                       "end_ns": [r[2] for r in rows], "step": [r[3] for r in rows],
                       "items": 8.0})
    t = np.arange(T0 - 200 * MS, T0 + 2200 * MS, 20 * MS)
    return trace_frame(t, np.full(len(t), 400.0), device="gpu0", host=host), ev


def _write_node(d, host: str, boot_ns: int, steps: list[int], unc_ns: int) -> int:
    """The node's files as its `wattlife run` writes them: its wall clock off by -sum(steps) when
    it mapped (corrected by the steps during the run), so its timestamps are true time plus that
    error; meta.json records the mapping and the steps. Returns the error (ns)."""
    err = -sum(steps)
    tr, ev = _truth(host)
    d.mkdir(parents=True, exist_ok=True)
    tr.assign(t_ns=tr["t_ns"] + err).to_csv(d / "trace.csv", index=False)
    ev.assign(start_ns=ev["start_ns"] + err, end_ns=ev["end_ns"] + err).to_csv(
        d / "events.csv", index=False)
    seen = [{"seen_at_ns": int(T0 + (i + 1) * 300 * MS + err), "step_ns": s}
            for i, s in enumerate(steps)]
    (d / "meta.json").write_text(json.dumps({"host": host, "clock": {
        "clock": "CLOCK_BOOTTIME", "offset_ns": boot_ns + err, "uncertainty_ns": unc_ns,
        "inherited": False, "wall_steps": seen}}))
    return err


def _merge(tmp, hosts):
    check = merge_node_runs([tmp / h / "trace.csv" for h in hosts],
                            [tmp / h / "events.csv" for h in hosts],
                            tmp / "trace.csv", tmp / "events.csv")
    return pd.read_csv(tmp / "trace.csv"), pd.read_csv(tmp / "events.csv"), check


STEP = st.integers(2 * MS, 30 * S).flatmap(lambda v: st.sampled_from([v, -v]))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 3), boots=st.lists(st.integers(0, 10**15), min_size=3, max_size=3),
       steps=st.lists(st.lists(STEP, max_size=3), min_size=3, max_size=3),
       unc=st.integers(1, 50_000))
def test_any_boot_times_and_wall_steps_give_the_same_merged_run(tmp_path_factory, n, boots,
                                                                steps, unc):
    tmp = tmp_path_factory.mktemp("m")
    hosts = HOSTS[:n]
    errs = {h: _write_node(tmp / h, h, boots[i], steps[i], unc) for i, h in enumerate(hosts)}
    tr, ev, check = _merge(tmp, hosts)
    ref = errs[hosts[0]]  # every node lands on the reference's clock
    for h in hosts:
        t, e = _truth(h)
        got_e = ev[ev["host"] == h].sort_values(["step", "rank"])
        want_e = e.sort_values(["step", "rank"])
        assert (got_e["start_ns"].to_numpy() == want_e["start_ns"].to_numpy() + ref).all()
        assert (got_e["end_ns"].to_numpy() == want_e["end_ns"].to_numpy() + ref).all()
        got_t = tr[tr["host"] == h]["t_ns"].to_numpy()
        assert (got_t == t["t_ns"].to_numpy() + ref).all()
    c = check.set_index("host")
    assert list(c["aligned_by"]) == ["reference"] + ["mapping"] * (n - 1)
    assert (c["offset_ms"] == 0).all() and not c["warn"].any()
    assert (c.loc[hosts[1:], "uncertainty_ms"] >= 2 * unc / 1e6).all()


def test_a_node_without_a_mapping_is_said_and_checked_by_its_step_ends(tmp_path):
    _write_node(tmp_path / "a", "a", 0, [], 1000)
    _write_node(tmp_path / "b", "b", 0, [40 * MS], 1000)  # its files 40 ms early
    (tmp_path / "b" / "meta.json").unlink()  # a run before issue 41: nothing recorded
    with pytest.warns(UserWarning, match=r"b -40\.0 ms over 20 steps \(aligned by as written\)"):
        _, _, check = _merge(tmp_path, ["a", "b"])
    c = check.set_index("host")
    assert c.loc["b", "aligned_by"] == "as written" and c.loc["b", "shift_ms"] == 0
    assert bool(c.loc["b", "warn"])


def test_a_malformed_clock_names_the_file(tmp_path):
    _write_node(tmp_path / "a", "a", 0, [], 1000)
    _write_node(tmp_path / "b", "b", 0, [], 1000)
    (tmp_path / "b" / "meta.json").write_text(json.dumps(
        {"host": "b", "clock": {"wall_steps": [{"step_ns": "x"}], "uncertainty_ns": 1}}))
    with pytest.raises(ValueError, match=r"b/meta.json: key clock"):
        _merge(tmp_path, ["a", "b"])
