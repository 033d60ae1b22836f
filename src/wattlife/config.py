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
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

import jsonschema
import yaml


class ConfigError(ValueError):
    """The config does not follow config/schema.yaml."""


def resource_path(*parts: str) -> Path:
    """A file or folder shipped in the package (`wattlife/resources/`): e.g. `"schema.yaml"`,
    `"models"`, `"hardware", "h200.yaml"`, `"reference", "pfi-study"`."""
    return Path(str(resources.files("wattlife").joinpath("/".join(("resources",) + parts))))


def schema_path() -> Path:
    """The configuration schema (`config/schema.yaml` in the repository is a link to it)."""
    return resource_path("schema.yaml")


@functools.cache
def schema() -> dict[str, Any]:
    """The configuration schema, read once per process."""
    return yaml.safe_load(schema_path().read_text())


def _describe(err: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        where = path if path != "(top level)" else "top level"
        keys = ", ".join(f"{where}.{k}" if where != "top level" else k for k in extra)
        return f"unknown key {keys}: allowed keys at {where} are {allowed}"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        key = f"{path}.{missing}" if path != "(top level)" else missing
        return f"missing required key {key}"
    if err.validator == "type":
        return f"{path}: expected {err.validator_value}, got {err.instance!r}"
    if err.validator == "enum":
        return f"{path}: expected one of {err.validator_value}, got {err.instance!r}"
    if err.validator == "pattern":
        want = err.schema.get("description") or f"a string matching {err.validator_value}"
        return f"{path}: expected {want}, got {err.instance!r}"
    return f"{path}: {err.message}"


def validate_config(cfg: dict[str, Any], schema_file: str | Path | None = None) -> None:
    """Raise ConfigError naming every offending key (first the most specific). A job's config
    slice (top-level `slice` key, written by the workflow: `wattlife.jobs`) holds only the keys
    that job depends on, so the top-level required keys are not required of it."""
    sch = yaml.safe_load(Path(schema_file).read_text()) if schema_file else schema()
    if isinstance(cfg, dict) and "slice" in cfg:
        sch = {k: v for k, v in sch.items() if k != "required"}
    validator = jsonschema.Draft202012Validator(sch)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (-len(e.absolute_path), e.message))
    if errors:
        lines = [_describe(e) for e in errors]
        raise ConfigError("invalid config: " + "; ".join(dict.fromkeys(lines)))
    check_references(cfg)


def check_references(cfg: dict[str, Any]) -> None:
    """Names one section uses must be defined in another: every workload of
    `execution.workloads` is a key of `workloads` (except in a PFI run, whose targets are the
    `pfi_matrix` sweeps). Raise ConfigError naming the key."""
    if ((cfg.get("pfi_matrix") or {}).get("cells")):
        return  # a PFI run: its targets are the sweeps, execution.workloads is unused
    defined = cfg.get("workloads") or {}
    used = (cfg.get("execution") or {}).get("workloads") or []
    if isinstance(used, list):
        for i, w in enumerate(used):
            if w not in defined:
                raise ConfigError(f"invalid config: execution.workloads[{i}]: workload {w!r} is "
                                  f"not defined under workloads (defined: {sorted(defined)})")


def _defaults(schema: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    for key, sub in schema.get("properties", {}).items():
        if "default" in sub and key not in cfg:
            cfg[key] = sub["default"]
        if isinstance(cfg.get(key), dict) and sub.get("type") == "object":
            _defaults(sub, cfg[key])
    return cfg


def load_config(path: str | Path) -> dict[str, Any]:
    """Read, validate and fill defaults."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config {path} does not exist")
    with open(path) as fh:
        try:
            cfg = yaml.safe_load(fh) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    validate_config(cfg)
    return _defaults(schema(), cfg)


# --- typed configuration -----------------------------------------------------------------------
# The validated config as frozen objects. A field absent from the YAML takes the schema's
# `default:` (read from the schema here, never repeated in Python), else None. Lists become tuples
# and nested objects stay plain (read-only use) dicts where the schema leaves them open.


def _node(*path: str) -> dict[str, Any]:
    """The schema node at `path` (property names; "*" = additionalProperties)."""
    node = schema()
    for key in path:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    return node


def schema_default(*path: str) -> Any:
    """The schema's default of the key at `path` (e.g. "sampler", "idle_baseline_s"); None when
    the schema gives none."""
    return copy.deepcopy(_node(*path).get("default"))


def _frozen(v: Any) -> Any:
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


T = TypeVar("T")


def _at(*path: str) -> dict[str, tuple[str, ...]]:
    """Field metadata: read the field from `path` inside its section (default: its own name)."""
    return {"path": path}


def _default_at(node: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        node = node.get("properties", {}).get(key, {})
    return copy.deepcopy(node.get("default"))


def _build(cls: type[T], data: Mapping[str, Any] | None, *section: str) -> T:
    """`cls` from the config mapping of schema `section`: each field its value, else the
    schema's default, else None."""
    data = data or {}
    node = _node(*section)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        path = f.metadata.get("path", (f.name,))
        value: Any = data
        for key in path:
            if not (isinstance(value, Mapping) and key in value):
                value = _default_at(node, path)
                break
            value = value[key]
        kwargs[f.name] = _frozen(value)
    return cls(**kwargs)


@dataclass(frozen=True)
class CpuEstimateSettings:
    """`sampler.cpu_estimate`: the utilisation model of CPU power where RAPL is unreadable."""

    idle_w: float
    max_w: float


@dataclass(frozen=True)
class SimGpuSettings:
    """`sampler.sim_gpu`: the simulated GPU (demo, tests)."""

    n_gpus: int
    mem_share: float
    interval_ms: float
    cap_w: float | None


@dataclass(frozen=True)
class NvmlSettings:
    """`sampler.nvml`: how often the NVML backend drains, reads its counter and telemetry."""

    drain_ms: float
    counter_ms: float
    telemetry_ms: float
    gpm: bool


@dataclass(frozen=True)
class _SamplerTop:
    """The scalar keys of `sampler` (built first, then the nested sections)."""

    interval_ms: float
    gpu: str
    cpu: str
    cpu_fallback: str
    rapl_root: str
    idle_baseline_s: float


@dataclass(frozen=True)
class SamplerSettings(_SamplerTop):
    """`sampler`: what the sampler reads and how often."""

    cpu_estimate: CpuEstimateSettings
    sim_gpu: SimGpuSettings
    nvml: NvmlSettings

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> SamplerSettings:
        d = dict(d or {})
        return cls(**{**dataclasses.asdict(_build(_SamplerTop, d, "sampler")),
                      "cpu_estimate": _build(CpuEstimateSettings, d.get("cpu_estimate"),
                                             "sampler", "cpu_estimate"),
                      "sim_gpu": _build(SimGpuSettings, d.get("sim_gpu"), "sampler", "sim_gpu"),
                      "nvml": _build(NvmlSettings, d.get("nvml"), "sampler", "nvml")})

    def as_dict(self) -> dict[str, Any]:
        """The section as the sampler takes it, every default filled (None left out)."""
        def drop_none(d: dict[str, Any]) -> dict[str, Any]:
            return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items()
                    if v is not None}

        return drop_none(dataclasses.asdict(self))


@dataclass(frozen=True)
class WorkloadSpec:
    """One entry of `workloads` (keys common to every kind). A key absent from the config takes
    the schema's default; a key the schema leaves open takes its kind's default (`KIND_DEFAULTS`
    of the spec class: the schema cannot hold these, because a default differs by kind and
    Snakemake writes the schema's defaults into every workload entry, i.e. into each cell's
    config slice); else None, whose meaning the field's comment gives."""

    # the kind's defaults for keys without a schema default (never a key the schema defaults)
    KIND_DEFAULTS: ClassVar[Mapping[str, Any]] = MappingProxyType({
        "device": "auto", "precision": "bf16", "val_every": 0, "ckpt_every": 0,
        "grad_sync": "overlapped", "gpu_timeline": True})

    name: str
    kind: str
    dataset: str
    device: str
    steps: int
    batch_size: int
    precision: str
    lr: float
    workers: int
    prefetch: int | None  # image_classification only
    val_every: int  # 0 = never
    val_steps: int  # 0 = the whole validation split
    ckpt_every: int  # 0 = never
    checkpoint_to: str | None  # None = the cell's storage
    grad_sync: str
    gpu_timeline: bool


@dataclass(frozen=True)
class ImageClassificationSpec(WorkloadSpec):
    """`kind: image_classification` (workloads/image.py)."""

    KIND_DEFAULTS: ClassVar[Mapping[str, Any]] = MappingProxyType({
        **WorkloadSpec.KIND_DEFAULTS, "model": "resnet50", "lr": 0.1, "workers": 2,
        "prefetch": 2, "val_steps": 0, "decode": "cpu"})

    model: str
    image_size: int | None  # required by the workload (no default)
    decode: str  # cpu (PIL in the loader workers) | gpu (workloads/gpu_decode.py)


@dataclass(frozen=True)
class CausalLMSpec(WorkloadSpec):
    """`kind: causal_lm` (workloads/causal_lm.py). `lr` and `lora_alpha` default to values derived
    from other keys: 3e-4 for `task: pretrain`, 1e-4 for `lora`; 2 x `lora_rank`."""

    KIND_DEFAULTS: ClassVar[Mapping[str, Any]] = MappingProxyType({
        **WorkloadSpec.KIND_DEFAULTS, "model_config": "qwen3-tiny", "seq_len": 2048,
        "tokenizer_vocab": 8192, "workers": 0, "val_steps": 2, "compile": False, "fsdp": False,
        "activation_checkpointing": False, "duration_s": 0.0})

    model_config: str
    pretrained: str | None  # None = random init
    seq_len: int
    compile: bool
    compile_mode: str | None  # None = torch.compile's default mode
    experts_implementation: str
    vocab_multiple: int
    tokenizer_vocab: int
    peak_tflops: float | None  # None = from the GPU's name
    fsdp: bool
    activation_checkpointing: bool
    model_overrides: dict[str, Any] | None
    task: str
    lora_rank: int
    lora_alpha: int
    lora_targets: tuple[str, ...] | None  # None = the attention and dense-MLP projections
    lora_experts: bool
    duration_s: float  # 0 = no fixed duration
    eval_at_s: float | None  # None = no timed evaluation
    ckpt_at_s: float | None  # None = no timed checkpoint

    def __post_init__(self) -> None:
        if self.lr is None:
            object.__setattr__(self, "lr", 3e-4 if self.task == "pretrain" else 1e-4)
        if self.lora_alpha is None:
            object.__setattr__(self, "lora_alpha", 2 * self.lora_rank)


WORKLOAD_SPECS: dict[str, type[WorkloadSpec]] = {
    "image_classification": ImageClassificationSpec, "causal_lm": CausalLMSpec}


def workload_spec(name: str, d: Mapping[str, Any]) -> WorkloadSpec:
    """The typed spec of workload `name` (its class chosen by `kind`)."""
    cls = WORKLOAD_SPECS.get(d.get("kind", ""))
    if cls is None:
        raise ConfigError(f"workloads.{name}.kind: expected one of {sorted(WORKLOAD_SPECS)}, "
                          f"got {d.get('kind')!r}")
    return _build(cls, {**cls.KIND_DEFAULTS, **d, "name": name}, "workloads", "*")


@dataclass(frozen=True)
class Execution:
    """`execution`: the matrix and how each cell is launched."""

    workloads: tuple[str, ...]
    storage: tuple[str, ...]
    checkpoint: tuple[str, ...]
    repeats: int
    launcher: str
    gpus_per_node: int
    nodes: int
    per_node_sampler: bool
    runtime_min: int

    def __post_init__(self) -> None:
        if {"on", "sync"} <= set(self.checkpoint):  # `on` is `sync`: the same cell twice
            raise ConfigError("invalid config: execution.checkpoint: 'on' and 'sync' are the same "
                              "mode (on = sync); list one of them")


@dataclass(frozen=True)
class Cell:
    """One cell of the execution matrix."""

    workload: str
    storage: str
    checkpoint: str
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.workload}/{self.storage}/ckpt-{self.checkpoint}/r{self.repeat}"


@dataclass(frozen=True)
class PowerCapSettings:
    """`powercap`: the cap controller, the default hardware profile and the simulated sweep."""

    backend: str
    hardware: str
    allow_real: bool
    state_file: str | None
    grid_w: tuple[float, ...]
    grid_large_w: tuple[float, ...]
    steady_rule: str
    warmup_frac: float
    window_steps: int
    gpu_model: str | None
    jobs: dict[str, Any]


@dataclass(frozen=True)
class PfiCell:
    """One cell of `pfi_matrix.cells`: a job swept over its caps."""

    name: str
    model_config: str
    task: str
    gpus: int
    seq_len: int
    batch_size: int
    compile: bool | None
    activation_checkpointing: bool | None
    lora_rank: int | None
    set: str | None
    paper_job: str | None
    assumed: tuple[str, ...] | None
    hardware: str | None
    caps: tuple[float, ...] | None
    expert_parallel: int | None
    device: str


@dataclass(frozen=True)
class PfiMatrix:
    """`pfi_matrix`: the protocol shared by every cell, and the cells."""

    dataset: str | None
    duration_s: float
    eval_at_s: float | None
    ckpt_at_s: float | None
    tokenizer_vocab: int
    cells: dict[str, PfiCell]


@dataclass(frozen=True)
class Attribution:
    """`attribution`: how energy is split over phases."""

    method: str
    sensor_response: str

    @property
    def response_file(self) -> str | None:
        """The sensor-response CSV, when one is named."""
        return None if self.sensor_response in ("boxcar", "estimate") else self.sensor_response


@dataclass(frozen=True)
class Analysis:
    """`analysis`: the PFI Monte Carlo, the allocation simulation, the study's allocation."""

    pfi_mc: int
    allocation_workloads: int
    allocation_jobs: int
    allocation_cuts: tuple[float, ...]
    allocation_mix: str
    pfi_study_workloads: int = field(metadata=_at("pfi_study", "workloads"))
    pfi_study_jobs: int = field(metadata=_at("pfi_study", "jobs"))
    reference_curves: tuple[str, ...] | None
    waiting_jobs_per_year: float = field(metadata=_at("waiting", "jobs_per_year"))
    waiting_caps_w: tuple[float, ...] | None = field(metadata=_at("waiting", "caps_w"))


@dataclass(frozen=True)
class Prepare:
    """`prepare`: where transfers run, the catalogue, the upload."""

    download_on: str
    upload_on: str
    min_rate_mbps: float
    loopback_rate_mbps: float | None = field(metadata=_at("loopback", "rate_mbps"))
    users_per_artefact: float = field(metadata=_at("facility", "users_per_artefact"))
    downloads_per_user_per_month: float = field(
        metadata=_at("facility", "downloads_per_user_per_month"))
    upload: dict[str, Any] | None
    upload_cell: str | None = field(metadata=_at("upload", "cell"))
    upload_to: str = field(metadata=_at("upload", "to"))
    upload_target: str | None = field(metadata=_at("upload", "target"))
    upload_size_bytes: float = field(metadata=_at("upload", "size_bytes"))
    catalogue: tuple[dict[str, Any], ...] | None


@dataclass(frozen=True)
class DataSets:
    """`data`: the generated offline datasets (demo, tests)."""

    images_name: str = field(metadata=_at("images", "name"))
    images_classes: int = field(metadata=_at("images", "classes"))
    images_train_per_class: int = field(metadata=_at("images", "train_per_class"))
    images_val_per_class: int = field(metadata=_at("images", "val_per_class"))
    images_size: int = field(metadata=_at("images", "size"))
    text_name: str = field(metadata=_at("text", "name"))
    text_words: int = field(metadata=_at("text", "words"))
    defined: tuple[str, ...]  # the `data` entries present in the config


@dataclass(frozen=True)
class Slurm:
    """`slurm`: site values; None = Slurm's default."""

    account: str | None
    gpu_partition: str | None
    cpu_partition: str | None
    partitions: Mapping[str, str] | None   # hardware profile -> partition (else gpu_partition)
    constraints: Mapping[str, str] | None  # hardware profile -> --constraint
    cpus_per_task: int | None              # a measuring job's CPUs per node (else sinfo's)
    mem_mb: int | None                     # a measuring job's memory per node (else sinfo's)


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU's power-cap profile (`hardware/<name>.yaml` in the package, or a path)."""

    gpu_model: str
    tdp_w: float
    min_cap_w: float
    max_cap_w: float
    peak_tflops_bf16: float
    gpus_per_node: int
    grid_w: tuple[float, ...]
    grid_large_w: tuple[float, ...]
    large_job_gpus: int

    def grid(self, gpus: int) -> tuple[float, ...]:
        """The cap grid of a job of `gpus` GPUs."""
        large = gpus >= self.large_job_gpus and self.grid_large_w
        return self.grid_large_w if large else self.grid_w


def hardware_profile(name_or_path: str | Path) -> HardwareProfile:
    """A hardware profile by name (`h200`, `h100`: shipped in the package) or path."""
    p = Path(name_or_path)
    if not p.exists():
        p = resource_path("hardware", f"{name_or_path}.yaml")
    if not p.exists():
        names = sorted(x.stem for x in resource_path("hardware").glob("*.yaml"))
        raise FileNotFoundError(f"hardware profile {str(name_or_path)!r} not found (a path, or one "
                                f"of {names})")
    d = yaml.safe_load(p.read_text()) or {}
    names = [f.name for f in dataclasses.fields(HardwareProfile)]
    missing = [k for k in names if k not in d]
    if missing:
        raise ConfigError(f"{p}: missing hardware profile keys {missing}")
    prof = HardwareProfile(**{k: _frozen(d[k]) for k in names})
    bad = [c for c in prof.grid_w + prof.grid_large_w if not prof.min_cap_w <= c <= prof.max_cap_w]
    if bad:
        raise ValueError(f"{p}: caps {bad} outside [{prof.min_cap_w}, {prof.max_cap_w}] W")
    return prof


@dataclass(frozen=True)
class Settings:
    """The whole validated config, typed. `raw` is the validated, defaults-filled mapping the
    job slices are cut from (wattlife.jobs)."""

    raw: Mapping[str, Any] = dataclasses.field(repr=False)
    run_name: str | None
    results_dir: str | None
    storage: dict[str, str]
    sampler: SamplerSettings
    execution: Execution | None
    workloads: dict[str, WorkloadSpec]
    powercap: PowerCapSettings
    pfi_matrix: PfiMatrix | None
    attribution: Attribution
    analysis: Analysis
    prepare: Prepare
    data: DataSets
    slurm: Slurm

    def cells(self) -> list[Cell]:
        """Every (workload, storage, checkpoint, repeat) of the execution matrix."""
        ex = self.execution
        if ex is None:
            return []
        return [Cell(w, s, c, r) for w in ex.workloads for s in ex.storage for c in ex.checkpoint
                for r in range(1, ex.repeats + 1)]

    @property
    def pfi_run(self) -> bool:
        """A config with `pfi_matrix` cells is a PFI run: its targets are the sweeps."""
        return bool(self.pfi_matrix and self.pfi_matrix.cells)

    def cell_hardware(self, cell: PfiCell) -> HardwareProfile:
        """The hardware profile of a PFI cell: its `hardware`, else `powercap.hardware`."""
        return hardware_profile(cell.hardware or self.powercap.hardware)

    def cell_caps(self, cell: PfiCell) -> list[float]:
        """A PFI cell's caps: its explicit `caps`, else its profile's grid for its GPU count."""
        caps = cell.caps or self.cell_hardware(cell).grid(cell.gpus)
        return sorted(float(c) for c in caps)


def settings(cfg: Mapping[str, Any]) -> Settings:
    """The typed view of a validated config (a full config or a job's slice)."""
    ex, pm, da = cfg.get("execution"), cfg.get("pfi_matrix"), cfg.get("data") or {}
    return Settings(
        raw=cfg,
        run_name=cfg.get("run_name"), results_dir=cfg.get("results_dir"),
        storage=dict(cfg.get("storage") or {}),
        sampler=SamplerSettings.from_dict(cfg.get("sampler")),
        execution=None if ex is None else _build(Execution, ex, "execution"),
        workloads={n: workload_spec(n, w) for n, w in (cfg.get("workloads") or {}).items()},
        powercap=_build(PowerCapSettings, cfg.get("powercap"), "powercap"),
        pfi_matrix=None if pm is None else _build(PfiMatrix, {**pm, "cells": {
            n: _build(PfiCell, {**c, "name": n}, "pfi_matrix", "cells", "*")
            for n, c in pm["cells"].items()}}, "pfi_matrix"),
        attribution=_build(Attribution, cfg.get("attribution"), "attribution"),
        analysis=_build(Analysis, cfg.get("analysis"), "analysis"),
        prepare=_build(Prepare, cfg.get("prepare"), "prepare"),
        data=_build(DataSets, {**da, "defined": [d.get("name") for d in da.values()
                                                 if isinstance(d, dict)]}, "data"),
        slurm=_build(Slurm, cfg.get("slurm"), "slurm"),
    )
