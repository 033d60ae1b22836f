"""File contracts shared by every part of the suite (docs/CONTRACTS.md).

The one place for every file contract: file names, column lists and their types, the metric,
phase and source names, the events extras, the telemetry columns, the typed and versioned run
metadata (`RunMeta`, `read_meta`, `write_meta`), and the readers and writers of the trace /
events / phases / curves / pfi tables. Writers (the sampler, the markers, `wattlife run`,
attribution, aggregation) take their headers and keys from here.

Readers accept unknown extra columns, name the file and line of a malformed row, and tolerate a
truncated last line (what a killed writer leaves behind) with a warning. numpy and pandas are
imported inside the functions that need them, so the markers (imported by training code) and the
sampler stay light.

Modules: `names` (file, column and metric names, headers), `phases` (the phase
registry), `reading` (the table readers), `writing` (atomic writers), `meta` (meta.json: `RunMeta`,
`read_meta`, `write_meta`), `sources` (the source registry: each source's class and words).
Every public name is re-exported here:
`from wattlife.contracts import X`.
The package imports nothing else of wattlife.
"""

from ..errors import ContractError
from .gpus import GpuIdentity, gpu_identities
from .int_cells import exact_ints
from .kinds import (
    GPU,
    KINDS,
    DeviceKind,
    attributed_kinds,
    device_forms,
    device_index,
    device_kind,
    device_pattern,
    is_attributed,
    is_per_rank,
    kind_colors,
    kind_label,
    kind_name,
    kind_of,
    kind_order,
    node_part_kinds,
    per_rank_kinds,
    processor_kinds,
)
from .meta import (
    META_KEY_TYPES,
    META_REQUIRED_KEYS,
    META_SAMPLER_KEYS,
    META_SCHEMA_VERSION,
    META_SCHEMA_VERSIONS,
    RunMeta,
    meta_problems,
    meta_text,
    read_meta,
    write_meta,
)
from .names import (
    A100_TABLES,
    CURVES_COLUMNS,
    CURVES_TELEMETRY_COLUMNS,
    ENERGY_J,
    EVENTS_COLUMNS,
    EVENTS_EXTRA_COLUMNS,
    EVENTS_FILE,
    EVENTS_HEADER,
    EVENTS_TYPES,
    H200_EXECUTION_TABLES,
    META_FILE,
    PFI_COLUMNS,
    PHASES_COLUMNS,
    PHASES_FILE,
    PHASES_METHODS,
    POWER_LIMIT_W,
    POWER_W,
    SUMMARY_FILE,
    TABLE_FILES,
    TELEMETRY_METRICS,
    TRACE_COLUMNS,
    TRACE_FILE,
    TRACE_FILES,
    TRACE_HEADER,
    TRACE_TYPES,
    WARMUP_STEPS,
    csv_cell,
    csv_header,
    phase_name_problem,
    warmup_count,
)
from .phases import (  # the phase registry
    BACKWARD,
    CHECKPOINT,
    CHECKPOINT_SAVED,
    CHECKPOINT_STAGE,
    CHECKPOINT_WAIT,
    CHECKPOINT_WRITE,
    COMPILE,
    CONCURRENT_PHASES,
    DATA_LOAD,
    DOWNLOAD_DATASET,
    DOWNLOAD_MODEL,
    DRAWN_PHASES,
    FINALIZE,
    FORWARD,
    GRAD_SYNC,
    H2D,
    IDLE,
    IDLE_BASELINE,
    LIFECYCLE_PHASES,
    MODEL_LOAD,
    NOT_TRAINING_PHASES,
    OPTIMIZER,
    PAUSE_PHASES,
    PER_STEP_PHASES,
    PHASES,
    PROCESS_EXIT,
    PROCESS_STARTUP,
    RESIDUAL,
    SETUP,
    STAGE_COPY,
    STEP,
    TOKENIZE,
    TRANSFER_PHASES,
    UNATTRIBUTED,
    UPLOAD,
    VALIDATION,
    WAITING_PHASES,
    WARMUP,
    WRAPPER_PHASES,
    PhaseSpec,
    phase_spec,
)
from .reading import (
    check_readings,
    events_files,
    file_line,
    int_form,
    read_contract_bytes,
    read_curves,
    read_events,
    read_table,
    read_trace,
    record_lines,
)
from .sources import (
    SOURCE_WORDS,
    SOURCES_MEASURED,
    SOURCES_NOT_MEASURED,
    SourceSpec,
    averaging_sources,
    register_source,
    sensor_source_ids,
    source_basis,
    source_spec,
    source_specs,
    unregister_source,
)
from .streaming import BATCH_BYTES, LineChunks, StreamUnreadable, iter_trace
from .writing import atomic_path, refuse_overwrite, write_csv, write_table, write_text
from .zstd_frames import ZSTD_SUFFIX

__all__ = [
    # the phase registry (contracts.phases)
    "BACKWARD", "CHECKPOINT", "CHECKPOINT_SAVED", "CHECKPOINT_STAGE", "CHECKPOINT_WAIT",
    "CHECKPOINT_WRITE",
    "DATA_LOAD", "DOWNLOAD_DATASET", "DOWNLOAD_MODEL", "DRAWN_PHASES", "FINALIZE", "FORWARD",
    "GRAD_SYNC", "H2D", "IDLE_BASELINE", "MODEL_LOAD", "NOT_TRAINING_PHASES", "OPTIMIZER",
    "PAUSE_PHASES", "PHASES", "PROCESS_EXIT", "PROCESS_STARTUP", "SETUP", "STAGE_COPY", "TOKENIZE",
    "TRANSFER_PHASES", "UPLOAD", "VALIDATION", "PhaseSpec", "phase_spec",
    "BATCH_BYTES", "LineChunks", "StreamUnreadable", "ZSTD_SUFFIX", "events_files", "iter_trace",
    "A100_TABLES", "COMPILE", "CONCURRENT_PHASES", "CURVES_COLUMNS", "CURVES_TELEMETRY_COLUMNS",
    "ContractError", "ENERGY_J", "EVENTS_COLUMNS", "EVENTS_EXTRA_COLUMNS", "EVENTS_FILE",
    "EVENTS_HEADER", "EVENTS_TYPES", "H200_EXECUTION_TABLES", "IDLE", "LIFECYCLE_PHASES",
    "PER_STEP_PHASES", "WAITING_PHASES", "META_FILE", "META_KEY_TYPES",
    "META_REQUIRED_KEYS", "META_SAMPLER_KEYS", "META_SCHEMA_VERSION", "META_SCHEMA_VERSIONS",
    "PFI_COLUMNS", "PHASES_COLUMNS", "PHASES_FILE", "PHASES_METHODS", "POWER_LIMIT_W", "POWER_W",
    "RESIDUAL", "RunMeta", "SOURCES_MEASURED", "SOURCES_NOT_MEASURED", "STEP", "SUMMARY_FILE",
    "TABLE_FILES", "TELEMETRY_METRICS", "TRACE_COLUMNS", "TRACE_FILE", "TRACE_FILES",
    "TRACE_HEADER", "TRACE_TYPES", "UNATTRIBUTED", "WARMUP", "WARMUP_STEPS", "WRAPPER_PHASES",
    "atomic_path", "check_readings", "csv_cell", "csv_header", "device_kind", "exact_ints",
    "file_line", "GpuIdentity", "gpu_identities",
    "int_form", "meta_problems", "meta_text", "phase_name_problem",
    "read_contract_bytes", "read_curves", "read_events", "read_meta", "read_table", "read_trace",
    "record_lines",
    "refuse_overwrite", "warmup_count", "write_csv", "write_meta", "write_table", "write_text",
    "GPU", "KINDS", "DeviceKind", "attributed_kinds", "device_forms", "device_index",
    "device_pattern", "is_attributed", "is_per_rank", "per_rank_kinds",
    "kind_colors", "kind_label", "kind_name", "kind_of", "kind_order", "node_part_kinds",
    "processor_kinds",
]
__all__ += ["SOURCE_WORDS", "SourceSpec", "averaging_sources", "register_source",
            "sensor_source_ids", "source_basis", "source_spec", "source_specs",
            "unregister_source"]
