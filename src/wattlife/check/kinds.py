"""The phases a workload kind marks (src/wattlife/workloads/): each at least once per rank, and
the children every `step` holds; the kind of a run inferred from its files."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..contracts import (
    BACKWARD,
    DATA_LOAD,
    FORWARD,
    H2D,
    MODEL_LOAD,
    OPTIMIZER,
    STAGE_COPY,
    STEP,
    TOKENIZE,
)
from .events import nesting
from .findings import ERROR, Finding, capped

#: phases every run of a workload kind marks at least once (src/wattlife/workloads/)
KIND_PHASES = {
    "image_classification": [MODEL_LOAD, STEP],
    "causal_lm": [TOKENIZE, MODEL_LOAD, STEP],
}
#: phases every `step` of a workload kind contains (workloads/*.py, training_loop.backward_and_step)
KIND_STEP_CHILDREN = {
    "image_classification": [DATA_LOAD, H2D, FORWARD, BACKWARD, OPTIMIZER],
    "causal_lm": [DATA_LOAD, H2D, FORWARD, BACKWARD, OPTIMIZER],
}
KINDS = ["auto", "none", *KIND_PHASES]


def infer_kind(meta: dict[str, Any] | None, summary: dict[str, Any] | None,
               phases: Iterable[str]) -> str | None:
    """The workload kind of a run: meta's cell `kind`, else the summary's keys (causal_lm writes
    model_type/task, image_classification classes), else a `tokenize` phase; None: unknown."""
    kind = ((meta or {}).get("cell") or {}).get("kind")
    if kind in KIND_PHASES:
        return str(kind)
    if summary:
        if "model_type" in summary or "task" in summary:
            return "causal_lm"
        if "classes" in summary:
            return "image_classification"
    names = set(phases)
    if TOKENIZE in names:
        return "causal_lm"
    return None


def check_kind_phases(ev: pd.DataFrame, kind: str, meta: dict[str, Any] | None,
                      max_rows: int = 5) -> list[Finding]:
    """The phases a workload kind marks: each at least once per rank, and inside every step its
    data_load / h2d / forward / backward / optimizer; `stage_copy` when the cell stages
    (storage local)."""
    files = ev.groupby(["host", "rank"], sort=False)["file_name"].first()
    have = ev.groupby(["host", "rank"], sort=False)["phase"].agg(set)
    f = missing_phases(kind, meta, have.to_dict(), files.to_dict())
    children = KIND_STEP_CHILDREN[kind]
    ok = ev[(ev["end_ns"] >= ev["start_ns"])].copy()
    if not len(ok):
        return f
    ok["start_ns"] = ok["start_ns"].astype(np.int64)
    ok["end_ns"] = ok["end_ns"].astype(np.int64)
    tree = nesting(ok)
    steps = ok[ok["phase"] == STEP]
    if not len(steps):
        return f
    # the nearest enclosing step (a zero-length data_load at the instant h2d starts nests in h2d)
    parent = tree["parent"]
    cur = parent.copy()
    anc = pd.Series(-1, index=ok.index, dtype=np.int64)
    for _ in range(int(tree["depth"].max())):
        live = ((cur >= 0) & (anc < 0)).to_numpy()
        if not live.any():
            break
        up = cur[live]
        hit = (ok["phase"].reindex(up.to_numpy()) == STEP).to_numpy()
        anc[up.index[hit]] = up[hit].to_numpy()
        cur[live] = parent.reindex(up.to_numpy()).to_numpy()
    ok["parent_idx"] = anc
    kids = ok[ok["parent_idx"].isin(steps.index) & ok["phase"].isin(children)]
    present = pd.crosstab(kids["parent_idx"], kids["phase"]).reindex(
        index=steps.index, columns=children, fill_value=0) > 0
    lacking = ~present.all(axis=1)
    if lacking.any():
        st = steps[lacking.to_numpy()]
        for file, g in st.groupby("file_name", sort=False):
            miss = present.loc[g.index]
            f += capped(ERROR, "events.step-children", str(file), g["line_no"],
                         [lacking_message(r.step, r.rank,
                                          [c for c in children if not miss.loc[r.Index, c]])
                          for r in g.head(max_rows).itertuples()], max_rows)
    return f


def missing_phases(kind: str, meta: dict[str, Any] | None, have: dict[Any, set[str]],
                   files: dict[Any, Any]) -> list[Finding]:
    """`events.phase-missing`: per (host, rank) (the phases it marks in `have`, its first file
    in `files`, in the order of `have`) the phases of `kind` it never marks."""
    f: list[Finding] = []
    need = list(KIND_PHASES[kind])
    cell = (meta or {}).get("cell") or {}
    if cell.get("storage") == "local":
        need.append(STAGE_COPY)
    for (host, rank), names in have.items():
        miss = [p for p in need if p not in names]
        if miss:
            f.append(Finding(ERROR, "events.phase-missing", str(files[(host, rank)]), None,
                             f"{kind} run (host {host}, rank {rank}) never marks {miss}"))
    return f


def lacking_message(step: Any, rank: Any, missing: list[str]) -> str:
    """`events.step-children`' words for a step without some of its kind's children."""
    return f"step {step} (rank {rank}) has no {missing} inside it"
