"""A rank's events file read in chunks (`attribution.events_chunks`, issue 43): the chunks
joined are `read_events(path, lines=True, siblings=False)` exactly (rows, columns, types, line
numbers), whatever the chunk size, quoting, line ends and form; a bad row's error and a cut
last line's warning are read_events' own; the external sort fed from the chunks equals the
in-memory sort of the frame read whole."""

from __future__ import annotations

import gzip
import re
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synth import end_order_events
from wattlife.attribution.events_chunks import read_events_chunks
from wattlife.attribution.start_order import start_order, start_ordered
from wattlife.contracts import ContractError, read_events
from wattlife.contracts.zstd_frames import FrameWriter

#: phase names a user's wrapper may record: quotes, commas, line breaks, words read as missing
NAMES = st.sampled_from(["forward", 'a "quoted" one', "x,y", "two\nlines", "NA", "null", " pad ",
                         "", "crlf\r\nname", "ünï"])


def _events(n_steps: int, seed: int, names: list[str] | None = None) -> pd.DataFrame:
    ev = end_order_events(n_steps, seed)
    if names:
        ev["phase"] = [names[i % len(names)] for i in range(len(ev))]
    return ev


def _write(ev: pd.DataFrame, path, crlf: bool = False, form: str = "csv") -> None:
    text = ev.to_csv(index=False, lineterminator="\r\n" if crlf else "\n")
    data = text.encode()
    if form == "gz":
        path.write_bytes(gzip.compress(data))
    elif form == "zst":
        with open(path, "wb") as fh:
            w = FrameWriter(fh)
            for part in text.splitlines(keepends=True):
                w.write(part)
                w.flush()
            w.close()
    else:
        path.write_bytes(data)


def _joined(path, chunk_bytes: int) -> tuple[pd.DataFrame, int]:
    chunks = list(read_events_chunks(path, chunk_bytes))
    return pd.concat(chunks), len(chunks)


@pytest.mark.slow
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk_bytes=st.integers(1, 3000), names=st.lists(NAMES, max_size=4),
       crlf=st.booleans(), seed=st.integers(0, 3))
def test_chunks_are_read_events(tmp_path, chunk_bytes, names, crlf, seed):
    """Any chunk size, quoted names (line breaks inside), CRLF: the same frame, index too."""
    path = tmp_path / f"ev{seed}{chunk_bytes}{crlf}.csv"
    _write(_events(12, seed, names), path, crlf)
    whole = read_events(path, lines=True, siblings=False)
    got, _ = _joined(path, chunk_bytes)
    pd.testing.assert_frame_equal(got, whole, check_exact=True)


@pytest.mark.parametrize("form", ["csv", "gz", "zst"])
def test_forms_in_many_chunks(tmp_path, form):
    """Plain, gzip and zstd frames: many chunks, the frame read whole."""
    path = tmp_path / ("events.csv" + ("" if form == "csv" else f".{form}"))
    _write(_events(40, 1, ["forward", 'say "hi"', "a\nb"]), path, form=form)
    got, n = _joined(path, 500)
    assert n > 10
    pd.testing.assert_frame_equal(got, read_events(path, lines=True, siblings=False),
                                  check_exact=True)


def test_blank_lines_keep_their_numbers(tmp_path):
    """Blank lines hold no row; each row's line is the file's (whole and in chunks)."""
    path = tmp_path / "events.csv"
    lines = _events(3, 0).to_csv(index=False).splitlines(keepends=True)
    path.write_text("".join(lines[:3] + ["\n", "\n"] + lines[3:]))
    whole = read_events(path, lines=True, siblings=False)
    assert list(whole["line_no"][:4]) == [2, 3, 6, 7]
    for size in (1, 40, 10_000):
        pd.testing.assert_frame_equal(_joined(path, size)[0], whole, check_exact=True)


@pytest.mark.parametrize("bad", ["start_ns", "end_before_start", "step", "fields"])
@pytest.mark.parametrize("quoted", [False, True])
def test_a_bad_row_is_read_events_error(tmp_path, bad, quoted):
    """One bad row deep in the file: the same error (file:line and words) as read_events."""
    path = tmp_path / "events.csv"
    ev = _events(30, 2, ['q "x"'] if quoted else None)
    lines = ev.to_csv(index=False).splitlines(keepends=True)
    row = lines[150].rstrip("\n").split(",")
    cols = list(ev.columns)
    if bad == "start_ns":
        row[cols.index("start_ns")] = "1.5e18"
    elif bad == "step":
        row[cols.index("step")] = "seven"
    elif bad == "end_before_start":
        row[cols.index("end_ns")] = str(int(row[cols.index("start_ns")]) - 1)
    else:
        row.append("extra")
    lines[150] = ",".join(row) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(ContractError) as whole:
        read_events(path, lines=True, siblings=False)
    with pytest.raises(ContractError) as chunked:
        list(read_events_chunks(path, 300))
    assert str(chunked.value) == str(whole.value)
    assert f"{path}:" in str(whole.value) or bad == "fields"


def test_a_cut_last_line_warns_as_read_events(tmp_path):
    """A killed writer's cut last line: left out, with read_events' warning (same line)."""
    path = tmp_path / "events.csv"
    text = _events(10, 0).to_csv(index=False)
    path.write_text(text[:-25])
    with pytest.warns(UserWarning) as whole_w:
        whole = read_events(path, lines=True, siblings=False)
    with pytest.warns(UserWarning) as chunk_w:
        got, _ = _joined(path, 200)
    assert [str(w.message) for w in chunk_w] == [str(w.message) for w in whole_w]
    pd.testing.assert_frame_equal(got, whole, check_exact=True)


@pytest.mark.parametrize("content", [b"", b"run_id,host", b"run_id,host,rank,phase,start_ns,"
                                     b"end_ns,step,items\n"])
def test_empty_and_header_only(tmp_path, content):
    """No header, a cut header: read_events' error; a header alone: its empty frame."""
    path = tmp_path / "events.csv"
    path.write_bytes(content)
    try:
        whole = read_events(path, lines=True, siblings=False)
    except ContractError as exc:
        with pytest.raises(ContractError, match=f"^{re.escape(str(exc))}$"):
            list(read_events_chunks(path, 64))
        return
    pd.testing.assert_frame_equal(_joined(path, 64)[0], whole, check_exact=True)


def test_parquet_by_row_groups(tmp_path):
    """A Parquet events file: a row group at a time, the frame read whole (no missing cells:
    `read_events` refuses a Parquet float column's missing cell, chunked or not)."""
    path = tmp_path / "events.parquet"
    ev = _events(20, 0).assign(items=1.0)
    ev.assign(depth=ev["depth"].fillna(0)).to_parquet(path, index=False, row_group_size=17)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, n = _joined(path, 64)
    assert n > 3
    pd.testing.assert_frame_equal(got, read_events(path, lines=True, siblings=False),
                                  check_exact=True)


@pytest.mark.parametrize("names", [None, ["fwd", 'x "q"\ny']])
def test_start_ordered_from_the_file(tmp_path, names):
    """The file read in chunks and sorted externally: the whole frame's `start_order`."""
    path = tmp_path / "events.csv"
    _write(_events(60, 3, names), path)
    ev = read_events(path, lines=True, siblings=False)
    blocks = list(start_ordered(read_events_chunks(path, chunk_bytes=700), tmp_path,
                                run_rows=50, block_rows=16))
    assert max(len(b) for b in blocks) < len(ev) / 4
    want = ev.iloc[start_order(ev)].reset_index(drop=True)
    pd.testing.assert_frame_equal(pd.concat(blocks, ignore_index=True), want, check_exact=True)
    assert np.array_equal(want["line_no"], pd.concat(blocks)["line_no"])
