"""`wattlife check` of a long (host, rank) as a stream (issue 43, `check.events_stream`): the
findings of the files checked whole, with the rank's rows never held whole (chunks, a sorted
stream, windows; the constants lowered here so that small files are cut into many), a file of
several ranks split into its ranks' parts (`check.events_parts`), and the whole path again
where a window finds an overlap."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from synth import write_check_side_files
from wattlife.attribution import rank_split
from wattlife.check import Finding, check_run, events_run, events_stream
from wattlife.contracts import streaming

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000
NOW = T0 + 10**13
HEADER = "run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock,clamp_ns\n"
CHILDREN = ("data_load", "h2d", "forward", "backward", "optimizer")


def _rank(rank: int, steps: int, seed: int, t0: int = T0, faults: bool = True
          ) -> list[list[object]]:
    """One rank's rows in end order (as the markers write them, a few swapped): model_load,
    steps every 0.3 s of random lengths (so the warm-up left out matters) with their children
    (zero-length ones, a compile inside a forward), checkpoint writes beside the steps (the
    last unfinished), and, with `faults`, steps without items or a child, zero items, rows
    ending before they start, rows of bad clocks or outside the trace (moved whole, so that
    they do not overlap)."""
    rnd = random.Random(seed)
    rows: list[list[object]] = [["model_load", t0, t0 + S // 2, "", ""]]
    for k in range(steps):
        t = t0 + S + k * 300_000_000
        kids = [c for c in CHILDREN if not (faults and rnd.random() < 0.08)]
        for j, name in enumerate(kids):
            a = t + j * 50_000_000
            rows.append([name, a, a + (0 if rnd.random() < 0.1 else 40_000_000), k, ""])
            if name == "forward" and k < 2:
                rows.append(["compile", a, a + 40_000_000, k, ""])
        items: object = 8
        if faults and rnd.random() < 0.05:
            items = rnd.choice(["", 0, -1])
        rows.append(["step", t, t + rnd.randrange(250, 295) * 1_000_000, k, items])
        if k % 7 == 3:
            rows.append(["checkpoint_write", t - 100_000_000, t + 900_000_000, "", ""])
    end = t0 + S + steps * 300_000_000
    rows.append(["checkpoint_write", end - 200_000_000, end + 5 * S, "", ""])
    rows.sort(key=lambda r: int(r[2]))  # type: ignore[call-overload]
    for _ in range(len(rows) // 20):  # written a little out of end order
        i = rnd.randrange(len(rows) - 1)
        rows[i], rows[i + 1] = rows[i + 1], rows[i]
    if faults:
        for _ in range(max(1, len(rows) // 60)):
            r = rows[rnd.randrange(len(rows))]
            what = rnd.randrange(4)
            if what == 0:
                r[1] = r[2] = 12345  # clock.before-2000 (and outside the trace)
            elif what == 1:
                r[1] = r[2] = NOW + 10**16  # clock.future
            elif what == 2:
                r[2] = int(r[1]) - 5  # type: ignore[call-overload]  # end-before-start
            else:
                r[1], r[2] = t0 - 2 * S, t0 - 2 * S + 10  # outside the trace
    return [[rank, *r] for r in rows]


def _write(path: Path, rows: list[list[object]], host: str = "h") -> None:
    path.write_text(HEADER + "".join(
        f"r,{host},{rk},{ph},{a},{b},{st},{it},{rk},,host,0\n" for rk, ph, a, b, st, it in rows))


def _run(run: Path, overlap: str = "", seed: int = 0) -> Path:
    """Rank 0 over two files (the second continues it), ranks 1 and 2, a trace of host h
    shorter than the events; `overlap`: 'clamped' (0.5 ms) or 'error' (400 ms) in rank 1."""
    r0 = _rank(0, 120, 1 + 10 * seed)
    _write(run / "events.csv", r0[: len(r0) * 2 // 3])
    _write(run / "events.rank3.csv", r0[len(r0) * 2 // 3:])
    r1 = _rank(1, 90, 2 + 10 * seed, T0 + 700_000)
    if overlap:
        fwd = next(r for r in r1[40:] if r[1] == "forward" and int(r[3]) > int(r[2]))
        fwd[3] = int(fwd[3]) + (10_500_000 if overlap == "clamped" else 400_000_000)
    _write(run / "events.rank1.csv", r1)
    _write(run / "events.rank2.csv", _rank(2, 4, 3, faults=False))
    write_check_side_files(run, ("h",), 1900, T0 + 30 * S, 119, 3)
    return run


def _streamed(monkeypatch: pytest.MonkeyPatch, rows: int, window: int) -> list[int]:
    """The constants lowered (a stream over `rows` rows, windows of `window`, runs of 37 rows
    merged 5 at a time, chunks of 900 bytes); the sizes of the groups checked whole."""
    monkeypatch.setattr(events_stream, "STREAM_ROWS", rows)
    monkeypatch.setattr(events_stream, "WINDOW", window)
    monkeypatch.setattr(events_stream, "SORT", {"run_rows": 37, "block_rows": 5})
    monkeypatch.setattr(streaming, "BATCH_BYTES", 900)
    held: list[int] = []
    real = events_run.check_events

    def spy(ev: pd.DataFrame, now_ns: int, max_rows: int = 5) -> list[Finding]:
        held.append(len(ev))
        return real(ev, now_ns, max_rows)

    monkeypatch.setattr(events_run, "check_events", spy)
    return held


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "rows", "window"), [
    ("auto", 100, 1), ("image_classification", 300, 7), ("auto", 50, 64)])
def test_a_long_rank_checked_as_a_stream_finds_what_the_whole_rank_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, rows: int,
        window: int) -> None:
    run = _run(tmp_path)
    whole = check_run(run, kind=kind, now_ns=NOW)
    codes = {x.code for x in whole}
    assert {"clock.before-2000", "clock.future", "events.end-before-start",
            "events.concurrent-unfinished", "events.step-items", "events.step-zero-items",
            "events.outside-trace", "events.outside-workload", "events.step-children",
            "summary.steps", "steps.no-steady", "summary.step-throughput"} <= codes
    held = _streamed(monkeypatch, rows, window)
    got = check_run(run, kind=kind, now_ns=NOW)
    assert got == whole
    assert held and max(held) <= rows  # rank 2 only: every longer group never held whole


@pytest.mark.slow
@pytest.mark.parametrize("overlap", ["clamped", "error"])
def test_an_overlap_in_a_window_has_its_rank_checked_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overlap: str) -> None:
    run = _run(tmp_path, overlap)
    whole = check_run(run, now_ns=NOW)
    code = "events.overlap-clamped" if overlap == "clamped" else "events.overlap"
    assert code in {x.code for x in whole}
    held = _streamed(monkeypatch, 100, 5)
    assert check_run(run, now_ns=NOW) == whole
    assert len([n for n in held if n > 100]) == 1  # rank 1 whole again; rank 0 streamed


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "overlap"), [("image_classification", ""), ("auto", ""),
                                               ("auto", "error")])
def test_a_long_file_of_several_ranks_is_checked_a_rank_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, overlap: str) -> None:
    """Three ranks' rows in one file in start order (a merged run's), with faults of every
    kind: split into its ranks' parts, each checked as a stream, the findings (capped over
    the ranks, in file order) those of the file checked whole; an overlap in a rank: whole."""
    rows = _rank(0, 30, 4) + [r for r in _rank(1, 30, 5, T0 + 700_000) + _rank(
        2, 20, 6, T0 + 300_000) if r[1] != "model_load"]  # ranks 2 and 1 never load it
    if overlap:
        fwd = next(r for r in rows[60:] if r[1] == "forward" and int(r[3]) > int(r[2]))
        fwd[3] = int(fwd[3]) + 400_000_000
    _write(tmp_path / "events.csv", sorted(rows, key=lambda r: int(r[3])))  # type: ignore[call-overload]
    write_check_side_files(tmp_path, ("h",), 1900, T0 + 30 * S, 119, 3)
    whole = check_run(tmp_path, kind=kind, now_ns=NOW)
    assert len([x for x in whole if x.code == "events.step-children"]) > 5  # capped
    missing = [x.message for x in whole if x.code == "events.phase-missing"]
    assert kind == "auto" or len(missing) == 2  # in the order of the ranks' first rows
    held = _streamed(monkeypatch, 40, 5)
    monkeypatch.setattr(rank_split, "PIECE_ROWS", 60)  # many pieces a rank
    monkeypatch.setattr(rank_split, "HOLD_ROWS", 100)
    assert check_run(tmp_path, kind=kind, now_ns=NOW) == whole
    assert held == ([len(rows)] if overlap else [])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 5))
def test_random_ranks_cut_anywhere_find_what_the_whole_ranks_find(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    run = _run(tmp_path, seed=seed)
    whole = check_run(run, now_ns=NOW)
    rnd = random.Random(seed)
    rows = rnd.randrange(40, 400)
    held = _streamed(monkeypatch, rows, rnd.randrange(1, 50))
    assert check_run(run, now_ns=NOW) == whole
    assert held and max(held) <= rows
