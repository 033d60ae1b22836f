"""`wattlife check RUN_DIR...`: validate a run directory against the file contracts.

A run directory holds what `wattlife run` and a workload leave behind: `trace.csv` (or
`trace.csv.gz` / `trace.parquet`), `events.csv` (+ per-rank `events.rank<N>.csv`), `meta.json`,
and optionally `phases.csv` (attribution) and `work/summary.json` (the workload's summary).

Every check is a pure function of tables and dicts returning a list of `Finding`s (severity,
code, file, CSV line counted with the header as line 1, message); only `read_csv_lines`,
`_load_json` and `check_run` touch files. Row checks are vectorised (pandas/numpy): traces can have
millions of rows. Repeated findings of one check are capped (`max_rows`) with a count of the rest.

The nesting rule is the attribution's (`attribution.nest`): intervals of one (host, rank) nest,
children inside their parent, siblings never overlap, except overlaps of at most
`attribution.OVERLAP_TOL_NS` (1 ms) that attribution clamps (`attribution.resolve_overlaps`;
reported here as warnings); what passes here attributes.

Modules, one per contract: `findings` (`Finding`, capping, the clock), `reading` (a contract CSV
with its line numbers), `trace`, `events`, `kinds` (the phases a workload kind marks), `outputs`
(meta.json, phases.csv, work/summary.json), `warmup` (warm-up, compilation, the `step`
throughput), `events_reading` / `events_run` (the events files read in chunks and checked one
rank's file at a time) / `events_stream` (a long rank checked as a stream), `run_dir` (one
run directory: `check_run`; several: `check_runs`).
Every public name is re-exported here: `from wattlife.check import X`.
"""

from .events import check_events, nesting
from .findings import (
    ERROR,
    FUTURE_SLACK_NS,
    MIN_EPOCH_NS,
    WARNING,
    Finding,
    check_clock,
)
from .kinds import KIND_PHASES, KIND_STEP_CHILDREN, KINDS, check_kind_phases, infer_kind
from .outputs import check_meta, check_phases_table, check_summary
from .reading import check_columns, read_csv_lines, to_numbers
from .run_dir import check_run, check_runs, format_json, format_text
from .trace import check_span, check_trace
from .warmup import STEP_THROUGHPUT_RTOL, warmup_findings

__all__ = [
    "ERROR", "FUTURE_SLACK_NS", "KINDS", "KIND_PHASES", "KIND_STEP_CHILDREN",
    "MIN_EPOCH_NS", "STEP_THROUGHPUT_RTOL", "WARNING", "Finding", "check_clock", "check_columns",
    "check_events", "check_kind_phases", "check_meta", "check_phases_table", "check_run",
    "check_runs", "check_span", "check_summary", "check_trace", "format_json", "format_text",
    "infer_kind", "nesting", "read_csv_lines", "warmup_findings", "to_numbers",
]
