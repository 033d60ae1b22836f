"""The names of the file contracts: file names, column lists and their types, the CSV headers,
the metric names, the warm-up step count, the reference table folders (phase names: `phases`;
source names: `sources`; `ContractError`: `errors`)."""

from __future__ import annotations

# ----------------------------------------------------------------------------- file names
TRACE_FILE = "trace.csv"  # also trace.csv.gz, trace.csv.zst or trace.parquet
TRACE_FILES = (TRACE_FILE, "trace.csv.gz", "trace.csv.zst", "trace.parquet")
EVENTS_FILE = "events.csv"  # rank N > 0: events.rank<N>.csv beside it
META_FILE = "meta.json"
PHASES_FILE = "phases.csv"
SUMMARY_FILE = "work/summary.json"  # the workload's summary, relative to the run directory
#: run-level tables under results/tables/ (name -> what it holds)
TABLE_FILES = {
    "phases": "phases.csv", "phase_summary": "phase_summary.csv",
    "device_share": "device_share.csv", "storage_checkpoint": "storage_checkpoint.csv",
    "throughput": "throughput.csv", "curves": "curves.csv", "pfi": "pfi.csv",
}

# ----------------------------------------------------------------------------- columns
TRACE_COLUMNS = ["t_ns", "host", "device", "metric", "value", "source"]
TRACE_TYPES = {"t_ns": "int", "value": "float"}
EVENTS_COLUMNS = ["run_id", "host", "rank", "phase", "start_ns", "end_ns", "step", "items"]
#: extras the markers write after the contract columns (see "One clock" for clamp_ns)
EVENTS_EXTRA_COLUMNS = ["local_rank", "depth", "clock", "clamp_ns"]
EVENTS_TYPES = {"start_ns": "int", "end_ns": "int", "rank": "int", "items": "float",
                "step": "float", "local_rank": "float", "depth": "float", "clamp_ns": "float"}
PHASES_COLUMNS = [
    "run_id", "phase", "device_kind", "device", "energy_j", "energy_lo_j", "energy_hi_j",
    "time_s", "count", "mean_power_w", "method", "source",
]
PHASES_METHODS = ("integrate", "deconvolve")
# extras throughput_sd, power_sd: standard error of the steady-state value (steady_state_se)
CURVES_COLUMNS = ["job", "gpu_model", "n_gpus", "cap_w", "throughput", "throughput_unit", "power_w"]
#: telemetry extras of the uncapped curves row (the PFI predictor's features)
CURVES_TELEMETRY_COLUMNS = ("dram_active", "util_mem", "tensor_active", "sm_active")
PFI_COLUMNS = ["job", "gpu_model", "pfi", "n_caps", "pfi_lo", "pfi_hi", "grid"]


def csv_header(columns: list[str]) -> str:
    """The header line a CSV writer puts first."""
    return ",".join(columns) + "\n"


#: characters that make a CSV cell need quotes (RFC 4180: separator, quote, line breaks)
_NEEDS_QUOTES = (",", '"', "\n", "\r")


def csv_cell(text: str) -> str:
    """`text` as one CSV cell: as it is, or in double quotes with its quotes doubled when it holds
    a separator, a quote or a line break (what pandas and the csv module read back unchanged)."""
    if any(c in text for c in _NEEDS_QUOTES) or text != text.strip(" "):
        return '"' + text.replace('"', '""') + '"'
    return text


def phase_name_problem(name: object) -> str | None:
    """Why `name` cannot be a phase name (None when it can): it must be a non-empty str, without
    NUL, that UTF-8 can encode (a lone surrogate cannot be written to a file)."""
    if not isinstance(name, str):
        return f"phase name {name!r} is a {type(name).__name__}, expected a str"
    if not name:
        return "phase name is empty; expected at least one character"
    if "\0" in name:
        return f"phase name {name!r} holds a NUL character, which no CSV reader keeps"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"phase name {name!r} is not valid Unicode (a lone surrogate): UTF-8 cannot write it"
    return None


#: what the sampler writes first in a trace, and the markers in an events file
TRACE_HEADER = csv_header(TRACE_COLUMNS)
EVENTS_HEADER = csv_header(EVENTS_COLUMNS + EVENTS_EXTRA_COLUMNS)

# ----------------------------------------------------------------------------- metric names
POWER_W = "power_w"  # W, a window average
ENERGY_J = "energy_j"  # J, cumulative since the sampler started
POWER_LIMIT_W = "power_limit_w"
#: telemetry metrics a trace may carry besides power and energy
TELEMETRY_METRICS = ("util_gpu", "util_mem", "dram_active", "sm_active", "tensor_active",
                     "sm_clock_mhz", "mem_clock_mhz", POWER_LIMIT_W, "mem_used_b", "temp_c",
                     "util_cpu", "util_cpu_host", "util_cpu_others")

# ----------------------------------------------------------------------------- warm-up steps
# (every phase name and list of them is in the phase registry, `phases.PHASES`; every source
# name in the source registry, `sources`)
#: the first steps of each rank (warm-up) that the `step` throughput and the training window leave
#: out
WARMUP_STEPS = 3


def warmup_count(n_steps: int) -> int:
    """How many of a rank's `n_steps` steps are warm-up: `WARMUP_STEPS` when at least 3
    post-warm-up steps remain, else none (a run that short has no warm-up to single out)."""
    return WARMUP_STEPS if n_steps > WARMUP_STEPS + 2 else 0

#: the folders (under `wattlife figures --reference`'s output) of the tables that
#: `analysis.reference.write_reference_tables` makes from the committed raw reference files and
#: the reference figures are drawn from
H200_EXECUTION_TABLES = "h200_execution_tables"
A100_TABLES = "a100_tables"
