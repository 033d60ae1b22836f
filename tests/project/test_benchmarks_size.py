"""benchmarks/ under the package's size rules (issue 46): every script <= 400 lines, every
function <= 60, the analysis in the package; and the helpers split out of them do what the
inline code did."""

import ast
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO

BENCH = REPO / "benchmarks"


def test_every_benchmark_script_and_function_is_within_the_size_rules():
    long_files, long_funcs = [], []
    for p in sorted(BENCH.glob("*.py")):
        text = p.read_text()
        if len(text.splitlines()) > 400:
            long_files.append((p.name, len(text.splitlines())))
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = n.end_lineno - n.lineno + 1
                if size > 60:
                    long_funcs.append((p.name, n.name, size))
    assert long_files == [] and long_funcs == []


def _busy_loop(iv):
    """The loop moe_profile.py ran before (the reference)."""
    busy, cur_s, cur_e = 0.0, None, None
    for s0, e0 in sorted(iv):
        if cur_e is None or s0 > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s0, e0
        else:
            cur_e = max(cur_e, e0)
    return busy + ((cur_e - cur_s) if cur_e is not None else 0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e4)), max_size=40))
def test_moe_busy_union_is_the_loops(iv):
    sys.path.insert(0, str(BENCH))
    from moe_profile import busy_us

    s = np.array([a for a, _ in iv], float)
    e = np.array([a + d for a, d in iv], float)
    assert abs(busy_us(s, e) - _busy_loop(list(zip(s, e, strict=True)))) <= 1e-6 * (1 + e.sum())
