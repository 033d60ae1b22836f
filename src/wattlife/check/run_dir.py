"""`wattlife check RUN_DIR...`: one run directory's files read and each handed to the checks of
its contract, in a fixed order (meta.json, trace, events, summary, warm-up, the kind's
phases, phases.csv); the report of several runs."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..attribution.chunked import SpilledTrace
from ..attribution.windowed import WINDOW
from ..contracts import (
    EVENTS_FILE,
    META_FILE,
    PHASES_COLUMNS,
    PHASES_FILE,
    SUMMARY_FILE,
    TRACE_COLUMNS,
    TRACE_FILE,
    TRACE_FILES,
    StreamUnreadable,
)
from .events_run import check_events_files, kinds_to_check, untraced
from .events_stream import EventsContext, EventsOutcome
from .findings import ERROR, WARNING, Finding, merge_capped
from .kinds import infer_kind
from .outputs import check_meta, check_phases_table, summary_findings
from .reading import (
    READ_CODES,
    check_columns,
    parquet_row_groups,
    read_csv_chunks,
    read_csv_lines,
)
from .stalls import Stalls, sampler_stalls
from .trace import (
    TRACE_CODES,
    check_gaps,
    check_trace,
    check_trace_rows,
    check_trace_series,
    gap_findings,
    no_energy,
    trace_span,
)
from .warmup import tally_findings


def _first(run: Path, names: list[str]) -> Path | None:
    return next((run / n for n in names if (run / n).exists()), None)


def _load_json(path: Path, findings: list[Finding]) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        findings.append(Finding(ERROR, "json.parse", str(path), exc.lineno, exc.msg))
        return None
    if not isinstance(doc, dict):
        findings.append(Finding(ERROR, "json.type", str(path), None, "expected a JSON object"))
        return None
    return doc


def _meta_file(run: Path, now_ns: int, f: list[Finding]) -> dict[str, Any] | None:
    """meta.json read and checked (findings appended to `f`); None when missing or unreadable."""
    meta = None
    meta_path = run / META_FILE
    if meta_path.exists():
        meta = _load_json(meta_path, f)
        if meta is not None:
            f += check_meta(meta, str(meta_path), now_ns)
    else:
        f.append(Finding(ERROR, "file.missing", str(meta_path), None, "no meta.json"))
    return meta


def _trace_file(run: Path, meta: dict[str, Any] | None, now_ns: int, max_rows: int,
                f: list[Finding]) -> tuple[pd.DataFrame | None, Path | None]:
    """The trace read and checked (findings appended to `f`), and its path; returns each host's
    span (`trace_span`), None when the trace is missing, unreadable or without its contract's
    columns. A CSV trace (plain, .gz, .zst) is read and checked in chunks, a Parquet one row
    group by row group (`_trace_chunked`), in bounded memory; quoted fields, a cut gzip file or
    a Parquet file without row groups whole."""
    tr_path = _first(run, list(TRACE_FILES))
    if tr_path is None:
        f.append(Finding(ERROR, "file.missing", str(run / TRACE_FILE), None,
                         "no trace (trace.csv, trace.csv.gz, trace.csv.zst or trace.parquet)"))
        return None, None
    rows = ((meta or {}).get("sampler") or {}).get("rows")
    stalls = sampler_stalls(meta)
    try:
        return _trace_chunked(tr_path, rows, now_ns, max_rows, f, stalls), tr_path
    except StreamUnreadable:
        pass
    raw, ff = read_csv_lines(tr_path, max_rows, {"t_ns": "int", "value": "float"})
    f += ff
    if raw is None:
        return None, tr_path
    cols = check_columns(raw, TRACE_COLUMNS, str(tr_path))
    f += cols
    if cols:
        return None, tr_path
    tr = raw[raw["t_ns"].notna()]
    tr["t_ns"] = tr["t_ns"].astype(np.int64)
    f += check_trace(tr, str(tr_path), now_ns, max_rows)
    f += check_gaps(tr, str(tr_path), stalls)
    f += _rows_finding(tr_path, rows, len(raw))
    return trace_span(tr), tr_path


def _rows_finding(tr_path: Path, rows: Any, n: int) -> list[Finding]:
    """The trace's row count against meta.json's (a CSV trace)."""
    if isinstance(rows, int) and tr_path.suffix == ".csv" and rows != n:
        return [Finding(WARNING, "trace.rows", str(tr_path), None,
                        f"{n:,} rows, meta.json's sampler wrote {rows:,}")]
    return []


def _trace_chunked(tr_path: Path, rows: Any, now_ns: int, max_rows: int, f: list[Finding],
                   stalls: Stalls | None = None) -> pd.DataFrame | None:
    """`_trace_file` chunk by chunk: each chunk's rows checked alone, its series after the last
    row of each series before it; findings merged as one pass gives them (`merge_capped`); the
    sensor gaps of the devices' series, spilled to disk as read (`SpilledTrace`), one device at
    a time and a window of its readings at a time (`windowed.WINDOW`; `gap_findings`, as
    `check_gaps` of the whole table)."""
    with SpilledTrace(tr_path, read=False, window=WINDOW) as spill:
        return _trace_chunks(tr_path, rows, now_ns, max_rows, f, spill, stalls)


def _trace_chunks(tr_path: Path, rows: Any, now_ns: int, max_rows: int, f: list[Finding],
                  spill: SpilledTrace, stalls: Stalls | None = None) -> pd.DataFrame | None:
    """`_trace_chunked` with its spill open."""
    name = str(tr_path)
    read_f: list[Finding] = []
    check_f: list[Finding] = []
    cols: list[Finding] | None = None
    carry, spans, n, energy = None, [], 0, False
    chunks = (parquet_row_groups(tr_path) if tr_path.suffix == ".parquet" else
              read_csv_chunks(tr_path, max_rows, {"t_ns": "int", "value": "float"}))
    for raw, ff in chunks:
        read_f += ff
        if raw is None or cols:
            continue
        cols = check_columns(raw, TRACE_COLUMNS, name) if cols is None else cols
        n += len(raw)
        if cols:
            continue
        tr = raw[raw["t_ns"].notna()]
        tr["t_ns"] = tr["t_ns"].astype(np.int64)
        check_f += check_trace_rows(tr, name, now_ns, max_rows)
        energy |= bool(tr["metric"].isin(["power_w", "energy_j"]).any())
        both = tr if carry is None else pd.concat([carry, tr], ignore_index=True)
        check_f += check_trace_series(both, name, max_rows)
        carry = both.groupby(["host", "device", "metric"], observed=True, sort=False).tail(1)
        spans.append(trace_span(tr))
        spill.add(tr[np.isfinite(tr["value"].to_numpy(float))])
    f += merge_capped(read_f, max_rows, READ_CODES, ("t_ns", "value"))
    if cols is None or cols:
        f += cols or []
        return None
    if not energy:
        check_f.append(no_energy(name))
    f += merge_capped(check_f, max_rows, TRACE_CODES)
    spill.finish()
    f += gap_findings(spill, name, stalls)
    f += _rows_finding(tr_path, rows, n)
    span = pd.concat(spans)
    return span.groupby(level=0).agg({"min": "min", "max": "max"})


def _events_paths(run: Path, f: list[Finding]) -> list[Path]:
    """The run's events files: events.csv, then events.rank<N>.csv by name (none: a finding)."""
    ev_path = run / EVENTS_FILE
    ev_paths = ([ev_path] if ev_path.exists() else []) + sorted(run.glob("events.rank*.csv"))
    if not ev_paths:
        f.append(Finding(ERROR, "file.missing", str(ev_path), None, "no events.csv"))
    return ev_paths


def _kind_findings(run: Path, ev: EventsOutcome, kind: str, meta: dict[str, Any] | None,
                   summary: dict[str, Any] | None) -> list[Finding]:
    """The phases of the run's workload kind (`kind`, or inferred when "auto"; "none": none)."""
    k = infer_kind(meta, summary, ev.phases) if kind == "auto" else (
        None if kind == "none" else kind)
    if k is not None:
        return ev.kinds[k]
    if kind == "auto":
        return [Finding(WARNING, "kind.unknown", str(run), None,
                        "workload kind unknown (no cell kind, summary or tokenize phase): "
                        "required phases not checked; give --kind")]
    return []


def _phases_file(run: Path, max_rows: int) -> list[Finding]:
    """phases.csv (attribution's output), when present."""
    ph_path = run / PHASES_FILE
    if not ph_path.exists():
        return []
    ph, f = read_csv_lines(ph_path, max_rows, {c: "float" for c in (
        "energy_j", "energy_lo_j", "energy_hi_j", "time_s", "count", "mean_power_w")},
        allow_empty=("energy_lo_j", "energy_hi_j", "mean_power_w"))
    if ph is not None:
        cols = check_columns(ph, PHASES_COLUMNS, str(ph_path))
        f += cols
        if not cols:
            f += check_phases_table(ph, str(ph_path), max_rows)
    return f


def check_run(run_dir: str | Path, kind: str = "auto", now_ns: int | None = None,
              max_rows: int = 5) -> list[Finding]:
    """Every finding for one run directory (see the package docstring)."""
    run = Path(run_dir)
    now_ns = time.time_ns() if now_ns is None else now_ns
    f: list[Finding] = []
    if not run.is_dir():
        return [Finding(ERROR, "run.missing", str(run), None, "not a directory")]
    meta = _meta_file(run, now_ns, f)
    tr, tr_path = _trace_file(run, meta, now_ns, max_rows, f)
    ev_paths = _events_paths(run, f)
    sum_f: list[Finding] = []  # the summary's own findings, said after the events'
    sum_path = run / SUMMARY_FILE
    summary = _load_json(sum_path, sum_f) if sum_path.exists() else None
    ctx = EventsContext(now_ns, max_rows, tr, str(tr_path), meta,
                        kinds_to_check(kind, meta, summary))
    ev = check_events_files(ev_paths, ctx, f)  # one rank's file at a time
    if ev is not None:
        f += ev.events + untraced(ev, ctx) + ev.span
    f += sum_f
    if summary is not None and ev is not None:
        f += summary_findings(summary, ev.steps, str(sum_path))
    if ev is not None:
        f += [Finding(sev, code, file, None, msg) for sev, code, file, msg in
              tally_findings(ev.tally, summary, str(ev_paths[0]), str(sum_path))]
        f += _kind_findings(run, ev, kind, meta, summary)
    return f + _phases_file(run, max_rows) + _custody(run)


def _custody(run: Path) -> list[Finding]:
    """A workflow cell under custody: its files against the published seal, phases.csv against
    its own (a phases.csv from another publication, about to be re-derived: a warning)."""
    from ..custody import cell_problems, is_sealed_cell

    if not is_sealed_cell(run):
        return []
    return [Finding(WARNING if "another publication" in why else ERROR,
                    "custody.stale" if "another publication" in why else "custody.damaged",
                    file, None, why) for file, why in cell_problems(run, (PHASES_FILE,))]


def format_text(results: dict[str, list[Finding]]) -> str:
    """Human-readable report: findings by run, then one line of counts per run."""
    lines = []
    for run, findings in results.items():
        lines += [x.text() for x in findings]
        n_err = sum(x.severity == ERROR for x in findings)
        n_warn = sum(x.severity == WARNING for x in findings)
        lines.append(f"{run}: {'FAIL' if n_err else 'ok'} ({n_err} error(s), {n_warn} warning(s))")
    return "\n".join(lines)


def format_json(results: dict[str, list[Finding]]) -> str:
    return json.dumps([{"run_dir": run, **asdict(x)} for run, findings in results.items()
                       for x in findings], indent=2)


def check_runs(run_dirs: Iterable[str | Path], kind: str = "auto", as_json: bool = False,
               max_rows: int = 5) -> tuple[int, str]:
    """Exit code (1 if any error, else 0) and the report for several run directories."""
    results = {str(r): check_run(r, kind=kind, max_rows=max_rows) for r in run_dirs}
    errors = any(x.severity == ERROR for fs in results.values() for x in fs)
    return int(errors), format_json(results) if as_json else format_text(results)
