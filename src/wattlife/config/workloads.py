"""The typed workload specs (`workloads`: one class per `kind`) and how one is built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from .build import build
from .loading import ConfigError


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
        "prefetch": 2, "val_steps": 0, "decode": "cpu",
        "cuda_graphs": False})

    model: str
    image_size: int | None  # required by the workload (no default)
    decode: str  # cpu (PIL in the loader workers) | gpu (workloads/gpu_decode.py)
    cuda_graphs: bool  # forward + backward replayed from CUDA graphs (workloads/cuda_graphs.py)


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
    return build(cls, {**cls.KIND_DEFAULTS, **d, "name": name}, "workloads", "*")
