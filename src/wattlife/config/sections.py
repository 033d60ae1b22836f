"""The typed, frozen sections of a configuration (`sampler`, `powercap`, `pfi_matrix`,
`attribution`, `analysis`, `prepare`, `data`, `slurm`, and `execution`: the matrix and its cells);
their defaults are the schema's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..contracts.node_settings import NodeSources
from .build import block, build, field_at
from .loading import ConfigError
from .node import node_sources


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
    node: str | None  # absent: no node source (no schema default: job slices stay as they were)


@dataclass(frozen=True)
class SamplerSettings(_SamplerTop):
    """`sampler`: what the sampler reads and how often."""

    cpu_estimate: CpuEstimateSettings
    sim_gpu: SimGpuSettings
    nvml: NvmlSettings
    node_sources: NodeSources
    #: the blocks of backends without a class above (`sampler.<backend id>`), as given
    given: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> SamplerSettings:
        d = dict(d or {})
        typed = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**dataclasses.asdict(build(_SamplerTop, d, "sampler")),
                      "given": {k: dict(v) for k, v in d.items()
                                if k not in typed and isinstance(v, Mapping)},
                      "cpu_estimate": build(CpuEstimateSettings, d.get("cpu_estimate"),
                                             "sampler", "cpu_estimate"),
                      "sim_gpu": build(SimGpuSettings, d.get("sim_gpu"), "sampler", "sim_gpu"),
                      "nvml": build(NvmlSettings, d.get("nvml"), "sampler", "nvml"),
                      "node_sources": node_sources(d.get("node_sources"))})

    def as_dict(self) -> dict[str, Any]:
        """The section as the sampler takes it, every default filled (None left out)."""
        def drop_none(d: dict[str, Any]) -> dict[str, Any]:
            return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items()
                    if v is not None}

        out = dataclasses.asdict(self)
        del out["given"]  # the blocks of backends without a class, beside the others
        out.update({k: self.block(k) for k in self.given})
        nodes = out["node_sources"]
        del nodes["blocks"], nodes["given"]  # the sources without a class: as given, beside
        nodes.update(self.node_sources.given_blocks())
        return drop_none(out)

    def block(self, backend: str) -> dict[str, Any]:
        """`sampler.<backend>` for a backend without a class above (every key of its schema
        block, defaults filled): its module builds its frozen settings from it."""
        return block(self.given.get(backend), "sampler", backend)



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
    pfi_study_workloads: int = field(metadata=field_at("pfi_study", "workloads"))
    pfi_study_jobs: int = field(metadata=field_at("pfi_study", "jobs"))
    reference_curves: tuple[str, ...] | None
    waiting_jobs_per_year: float = field(metadata=field_at("waiting", "jobs_per_year"))
    waiting_caps_w: tuple[float, ...] | None = field(metadata=field_at("waiting", "caps_w"))


@dataclass(frozen=True)
class Prepare:
    """`prepare`: where transfers run, the catalogue, the upload."""

    download_on: str
    upload_on: str
    min_rate_mbps: float
    loopback_rate_mbps: float | None = field(metadata=field_at("loopback", "rate_mbps"))
    users_per_artefact: float = field(metadata=field_at("facility", "users_per_artefact"))
    downloads_per_user_per_month: float = field(
        metadata=field_at("facility", "downloads_per_user_per_month"))
    upload: dict[str, Any] | None
    upload_cell: str | None = field(metadata=field_at("upload", "cell"))
    upload_to: str = field(metadata=field_at("upload", "to"))
    upload_target: str | None = field(metadata=field_at("upload", "target"))
    upload_size_bytes: float = field(metadata=field_at("upload", "size_bytes"))
    catalogue: tuple[dict[str, Any], ...] | None


@dataclass(frozen=True)
class DataSets:
    """`data`: the generated offline datasets (demo, tests)."""

    images_name: str = field(metadata=field_at("images", "name"))
    images_classes: int = field(metadata=field_at("images", "classes"))
    images_train_per_class: int = field(metadata=field_at("images", "train_per_class"))
    images_val_per_class: int = field(metadata=field_at("images", "val_per_class"))
    images_size: int = field(metadata=field_at("images", "size"))
    text_name: str = field(metadata=field_at("text", "name"))
    text_words: int = field(metadata=field_at("text", "words"))
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
    extra: str | None                      # the user's own sbatch flags for measuring jobs


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
    order_seed: int | None                 # the cells' order within a round (jobs.round_orders)

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
