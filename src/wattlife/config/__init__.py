"""Configuration: load YAML and validate it against the schema shipped in the package.

A malformed config stops with a message naming the key (as a dotted path) and what was expected.
The Snakefile calls `validate_config` first and then Snakemake's own `validate` (which also fills
the schema's defaults), so both paths give the same verdict.

The schema, the model configs, the hardware profiles and the study's published tables ship inside
the package (`wattlife/resources/`, package data); `resource_path()` is the one way to find them,
so a non-editable install run from any folder finds them. In the repository `config/schema.yaml`,
`config/models` and `config/hardware` are symlinks into the package.

`settings(cfg)` turns a validated config into typed, frozen objects (one per section, a workload
spec per kind, the hardware profile) whose defaults are the schema's `default:` values, read from
the schema: code and rules read those, never a dict with a local default.

Modules: `loading` (YAML, schema, validation, defaults, package data), `build` (a typed object
from its section), `sections` (the execution matrix too), `workloads`, `hardware` (the typed
objects), `typed` (`Settings`, `settings`). Every public name is re-exported here:
`from wattlife.config import X`.
"""

from .hardware import HardwareProfile, hardware_profile
from .loading import (
    ConfigError,
    check_config_files,
    check_references,
    load_config,
    load_section,
    resource_path,
    schema,
    schema_default,
    schema_path,
    strict_yaml,
    validate_config,
)
from .sections import (
    Analysis,
    Attribution,
    Cell,
    CpuEstimateSettings,
    DataSets,
    Execution,
    NvmlSettings,
    PfiCell,
    PfiMatrix,
    PowerCapSettings,
    Prepare,
    SamplerSettings,
    SimGpuSettings,
    Slurm,
)
from .typed import Settings, settings
from .workloads import (
    WORKLOAD_SPECS,
    CausalLMSpec,
    ImageClassificationSpec,
    WorkloadSpec,
    workload_spec,
)

__all__ = [
    "WORKLOAD_SPECS", "Analysis", "Attribution", "CausalLMSpec", "Cell", "ConfigError",
    "CpuEstimateSettings", "DataSets", "Execution", "HardwareProfile", "ImageClassificationSpec",
    "NvmlSettings", "PfiCell", "PfiMatrix", "PowerCapSettings", "Prepare", "SamplerSettings",
    "Settings", "SimGpuSettings", "Slurm", "WorkloadSpec", "check_config_files",
    "check_references", "hardware_profile",
    "load_config", "load_section", "resource_path", "schema", "schema_default", "schema_path",
    "settings", "strict_yaml", "validate_config", "workload_spec",
]
