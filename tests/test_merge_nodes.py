"""Multi-node runs: per-node traces merge into one run; node clocks are checked."""

import numpy as np
import pandas as pd
import pytest

from synth import T0, trace_frame
from wattlife.attribution import attribute_energy
from wattlife.merge_nodes import clock_offsets, merge_node_runs

MS = 1_000_000


def _node(host: str, skew_ns: int, rng) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two ranks on `host`, 40 steps of 100 ms ending together across nodes (all-reduce), read by
    this node's clock (true time + skew)."""
    rows = []
    # + all-reduce jitter
    ends = [T0] + [T0 + (k + 1) * 100 * MS + int(rng.uniform(0, 0.3) * MS) for k in range(40)]
    for k in range(40):
        for rank in (0, 1):
            rows.append(("step", ends[k] + skew_ns, ends[k + 1] + skew_ns, k, rank))
    ev = pd.DataFrame({"run_id": "r", "host": host, "rank": [r[4] for r in rows],
                       "phase": [r[0] for r in rows], "start_ns": [r[1] for r in rows],
                       "end_ns": [r[2] for r in rows], "step": [r[3] for r in rows], "items": 8.0})
    t = np.arange(T0, T0 + 4100 * MS, 20 * MS) + skew_ns
    return trace_frame(t, np.full(len(t), 500.0), device="gpu0", host=host), ev


def test_offsets_are_recovered_and_large_ones_warned(tmp_path):
    rng = np.random.default_rng(0)
    (_, ea), (_, eb), (_, ec) = (_node("a", 0, rng), _node("b", 2 * MS, rng),
                                 _node("c", -40 * MS, rng))
    with pytest.warns(UserWarning, match=r"c -40\.\d ms"):
        off = clock_offsets(pd.concat([ea, eb, ec])).set_index("host")
    assert off.loc["a", "offset_ms"] == 0
    assert off.loc["b", "offset_ms"] == pytest.approx(2.0, abs=0.3)
    assert off.loc["c", "offset_ms"] == pytest.approx(-40.0, abs=0.3)
    assert off.loc["b", "iqr_ms"] < 0.5 and off["steps"].eq(40).all()
    assert list(off["warn"]) == [False, False, True]


def test_merge_keeps_hosts_and_attributes_each_nodes_gpus_to_its_ranks(tmp_path):
    rng = np.random.default_rng(1)
    files = []
    for host, skew in (("a", 0), ("b", MS)):
        tr, ev = _node(host, skew, rng)
        tr.to_csv(tmp_path / f"trace.{host}.csv", index=False)
        ev.to_csv(tmp_path / f"events.{host}.csv", index=False)
        files.append(host)
    check = merge_node_runs([tmp_path / f"trace.{h}.csv" for h in files],
                            [tmp_path / f"events.{h}.csv" for h in files],
                            tmp_path / "trace.csv", tmp_path / "events.csv")
    assert (tmp_path / "clock_offsets.csv").exists() and not check["warn"].any()
    tr, ev = pd.read_csv(tmp_path / "trace.csv"), pd.read_csv(tmp_path / "events.csv")
    assert set(tr["host"]) == {"a", "b"} and len(ev) == 160
    ph = attribute_energy(tr, ev, method="integrate")
    steps = ph[ph["phase"] == "step"]
    assert set(steps["host"]) == {"a", "b"}
    assert steps["energy_j"].to_numpy() == pytest.approx([2000.0, 2000.0], rel=0.01)  # 500 W x 4 s


def test_two_traces_of_one_host_are_refused(tmp_path):
    tr, ev = _node("a", 0, np.random.default_rng(2))
    for i in (1, 2):
        tr.to_csv(tmp_path / f"t{i}.csv", index=False)
        ev.to_csv(tmp_path / f"e{i}.csv", index=False)
    with pytest.raises(ValueError, match="share a host name"):
        merge_node_runs([tmp_path / "t1.csv", tmp_path / "t2.csv"],
                        [tmp_path / "e1.csv", tmp_path / "e2.csv"],
                        tmp_path / "m.csv", tmp_path / "me.csv")


@pytest.mark.parametrize("out_name", ["trace.csv", "trace.csv.zst"])
def test_merge_in_chunks_keeps_every_row_and_the_attribution(tmp_path, monkeypatch, out_name):
    """Node traces copied in chunks of ~60 rows (issue 43): the merged trace holds the rows of
    the in-memory merge (sorted by time there, node after node here), and attributes the same."""
    from wattlife.contracts import read_trace, streaming

    monkeypatch.setattr(streaming, "BATCH_BYTES", 4096)
    rng = np.random.default_rng(3)
    nodes = [_node(h, skew, rng) for h, skew in (("a", 0), ("b", MS))]
    for (tr, ev), h in zip(nodes, "ab", strict=True):
        tr.to_csv(tmp_path / f"trace.{h}.csv", index=False)
        ev.to_csv(tmp_path / f"events.{h}.csv", index=False)
    merge_node_runs([tmp_path / f"trace.{h}.csv" for h in "ab"],
                    [tmp_path / f"events.{h}.csv" for h in "ab"],
                    tmp_path / out_name, tmp_path / "events.csv")
    got = read_trace(tmp_path / out_name)
    want = pd.concat([tr for tr, _ in nodes], ignore_index=True)
    cols = ["t_ns", "host", "device", "metric", "value", "source"]
    key = cols[:4]
    pd.testing.assert_frame_equal(got[cols].sort_values(key, ignore_index=True),
                                  want[cols].sort_values(key, ignore_index=True),
                                  check_exact=True, check_dtype=False)
    ev = pd.read_csv(tmp_path / "events.csv")
    in_memory = attribute_energy(want.sort_values(["t_ns", "host", "device"], kind="stable"),
                                 ev, method="integrate")
    pd.testing.assert_frame_equal(attribute_energy(got, ev, method="integrate"), in_memory,
                                  check_exact=True)
