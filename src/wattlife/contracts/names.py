"""The names of the file contracts: file names, column lists and their types, the CSV headers,
the metric, phase and source names, the reference table folders; and `ContractError`."""

from __future__ import annotations

from ..errors import ContractError as ContractError  # defined there, named here as before

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

# ----------------------------------------------------------------------------- phase names
LIFECYCLE_PHASES = [
    "download_dataset", "download_model", "stage_copy", "model_load", "data_load", "h2d",
    "forward", "backward", "optimizer", "grad_sync", "validation", "checkpoint",
    "checkpoint_stage", "checkpoint_wait", "upload",
]
#: phases that run beside a rank's timeline (a background thread) and overlap its phases: kept
#: out of the nesting rule, the phase tree and its energy (workloads.checkpointing)
CONCURRENT_PHASES = ("checkpoint_write",)
STEP = "step"  # a training step; carries `items`
UNATTRIBUTED = "unattributed"  # device time covered by no phase
RESIDUAL = "deconvolution_residual"  # deconvolved sum minus the measured total
IDLE = "idle"  # the phase of a GPU that no rank uses
#: intervals `wattlife run` itself knows (added by attribution from meta.json)
WRAPPER_PHASES = ("idle_baseline", "process_startup", "process_exit")
COMPILE = "compile"  # first-call compilation (torch.compile) inside a step's forward / backward
WARMUP = "warmup"  # what the warm-up steps did (attribution's name for their rows)
#: the first steps of each rank that the `step` throughput and the steady window leave out
WARMUP_STEPS = 3
#: the phases marked inside every training step (per-item energy: `analysis.repeats`, fig. 1)
PER_STEP_PHASES = ("data_load", "h2d", "forward", "backward", "optimizer", "grad_sync")
#: phases during which the GPU waits (for data, the disk, the interpreter, the compiler, the
#: network, or nothing; `idle`: a GPU no rank drove): the whole phase is waiting
#: (`analysis.waiting`, fig. 9). `grad_sync` is waiting only on the ranks that wait for the
#: slowest one (`analysis.waiting.grad_sync_waits`).
WAITING_PHASES = ("process_startup", "setup", "tokenize", "model_load", "stage_copy",
                  "data_load", "checkpoint", "checkpoint_stage", "checkpoint_wait", COMPILE,
                  "finalize", "process_exit", UNATTRIBUTED, IDLE)


def warmup_count(n_steps: int) -> int:
    """How many of a rank's `n_steps` steps are warm-up: `WARMUP_STEPS` when at least 3 steady
    steps remain, else none (a run that short has no steady part to single out)."""
    return WARMUP_STEPS if n_steps > WARMUP_STEPS + 2 else 0

# ----------------------------------------------------------------------------- source names
SOURCES_MEASURED = {"nvml-samples", "nvml-counter", "nvml-poll", "rapl"}
SOURCES_NOT_MEASURED = {"estimate", "sim"}


def device_kind(device: str) -> str:
    """`gpu3` -> `gpu`, `cpu0` -> `cpu`, `dram1` -> `dram`, `node` -> `node`."""
    return device.rstrip("0123456789") or device


#: the folders (under `wattlife figures --reference`'s output) of the tables that
#: `analysis.reference.write_reference_tables` makes from the committed raw reference files and
#: the reference figures are drawn from
H200_EXECUTION_TABLES = "h200_execution_tables"
A100_TABLES = "a100_tables"
