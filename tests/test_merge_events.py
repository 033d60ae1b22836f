"""`merge-nodes` merges the events k ways from each file sorted alone (issue 43): the merged
events.csv is byte for byte the in-memory sort of all of them, whatever the block size, with
ties of (start, host, rank) within and across files, a file naming two hosts and clock shifts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlife import merge_events
from wattlife.merge_nodes import _read_events_compact, merge_node_runs, shift_hosts

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
HEADER = "run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock,clamp_ns\n"


def _file(rng: np.random.Generator, hosts: tuple[str, ...], rank: int, n: int) -> str:
    """`n` rows of coarse random starts (many ties), in end order as the markers write them."""
    rows = []
    for k in range(n):
        a = T0 + int(rng.integers(0, 40)) * MS
        b = a + int(rng.integers(0, 5)) * MS
        phase = ("step", "forward", "z backward")[k % 3]
        items = "8" if phase == "step" else ""
        host = hosts[k % len(hosts)]
        rows.append((b, f"r,{host},{rank},{phase},{a},{b},{k // 3},{items},{rank},,host,0\n"))
    return HEADER + "".join(r for _, r in sorted(rows, key=lambda x: x[0]))


def _nodes(tmp: Path) -> tuple[list[Path], list[Path], list[Path]]:
    rng = np.random.default_rng(3)
    traces, events, metas = [], [], []
    for host, steps in (("zeta", 0), ("alpha", 2), ("mid", 1)):
        d = tmp / host
        d.mkdir()
        rows = "".join(f"{T0 + k * 20 * MS},{host},gpu0,power_w,300.0,sim\n" for k in range(5))
        (d / "trace.csv").write_text("t_ns,host,device,metric,value,source\n" + rows)
        hosts = (host, "beta") if host == "mid" else (host,)  # a file naming two hosts
        (d / "events.csv").write_text(_file(rng, hosts, 0, 60))
        (d / "events.rank1.csv").write_text(_file(rng, (host,), 1, 45))
        (d / "meta.json").write_text(json.dumps({"host": host, "clock": {
            "uncertainty_ns": 1000, "wall_steps": [{"step_ns": 3 * MS}] * steps}}))
        traces.append(d / "trace.csv")
        events.append(d / "events.csv")
        metas.append(d / "meta.json")
    return traces, events, metas


pytestmark = pytest.mark.filterwarnings("ignore:node clocks disagree")


@pytest.mark.parametrize("block", [1, 4, 1 << 15])
def test_merged_events_are_the_in_memory_sort_byte_for_byte(tmp_path, monkeypatch, block):
    traces, events, metas = _nodes(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(merge_events, "MERGE_BLOCK_ROWS", block)
    check = merge_node_runs(traces, events, out / "trace.csv", out / "events.csv", metas=metas)
    shifts = dict(zip(check["host"], (check["shift_ms"] * MS).round().astype(int), strict=True))
    assert set(shifts.values()) != {0}
    ev = shift_hosts(_read_events_compact(events), shifts, ["start_ns", "end_ns"])
    want = ev.sort_values(["start_ns", "host", "rank"], kind="stable").to_csv(index=False)
    got = (out / "events.csv").read_text()
    assert got == want
    assert len(got.splitlines()) == 1 + 3 * (60 + 45)


def test_files_of_other_columns_are_merged_in_memory_alike(tmp_path):
    traces, events, _ = _nodes(tmp_path)
    extra = events[1].with_name("events.rank1.csv")
    df = pd.read_csv(extra, dtype=str, keep_default_na=False)
    df.assign(note="x").to_csv(extra, index=False)  # a column only this file has
    out = tmp_path / "out"
    out.mkdir()
    check = merge_node_runs(traces, events, out / "trace.csv", out / "events.csv")
    shifts = dict(zip(check["host"], (check["shift_ms"] * MS).round().astype(int), strict=True))
    ev = shift_hosts(_read_events_compact(events), shifts, ["start_ns", "end_ns"])
    want = ev.sort_values(["start_ns", "host", "rank"], kind="stable").to_csv(index=False)
    assert (out / "events.csv").read_text() == want
