"""The contract readers parse a CSV's cells as strings with pyarrow where it gives what pandas
gives (issue 43: half the CPU on an events file); wherever it could differ, pandas reads it.
Property: whatever the text cells (quotes, commas, "NA", empty, non-ASCII, spaces), the events
table or the error is the one the pandas reader gives."""

from __future__ import annotations

import csv
import io

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.contracts import ContractError, read_events
from wattlife.contracts import reading as contract_reading

T0 = 1_700_000_000_000_000_000
CELLS = st.one_of(st.sampled_from(["", "NA", "null", "nan", "None", " step ", "a,b", 'say "hi"',
                                   "é", "x\ty", "#N/A", "0", "-1"]),
                  st.text(alphabet="abc ,\"'é-_", max_size=6))


def _csv(rows: list[list[str]], header: list[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _read(path, fast: bool, monkeypatch) -> pd.DataFrame | str:
    if not fast:
        monkeypatch.setattr(contract_reading, "_strings_fast", lambda text: None)
    try:
        return read_events(path, lines=True, siblings=False)
    except (ContractError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        monkeypatch.undo()


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.tuples(CELLS, CELLS, CELLS), min_size=0, max_size=6),
       extra=st.booleans(), dup=st.booleans())
def test_the_fast_reader_gives_the_pandas_table_or_error(tmp_path_factory, texts, extra, dup):
    header = ["run_id", "host", "rank", "phase", "start_ns", "end_ns", "clock"]
    header += ["note"] if extra else []
    header += ["clock"] if dup else []
    rows = []
    for k, (a, b, c) in enumerate(texts):
        row = [a, b, "0", c, str(T0 + k), str(T0 + k + 5), "host"]
        rows.append(row + (["n"] if extra else []) + (["host"] if dup else []))
    p = tmp_path_factory.mktemp("ev") / "events.csv"
    p.write_text(_csv(rows, header), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        fast = _read(p, True, mp)
        slow = _read(p, False, mp)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
    else:
        pd.testing.assert_frame_equal(fast, slow, check_exact=True)


def test_a_plain_file_takes_the_fast_reader_and_a_doubtful_one_does_not():
    assert contract_reading._strings_fast(b"a,b\nx,\"y,z\"\n") is not None
    assert contract_reading._strings_fast(b"a,a\n1,2\n") is None  # pandas renames: a, a.1
    assert contract_reading._strings_fast(b"\xef\xbb\xbfa,b\n1,2\n") is None
    assert contract_reading._strings_fast(b"a,b\n1,2,3\n") is None  # pandas: an index column
