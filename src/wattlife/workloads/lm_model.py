"""Building the causal-LM workload's model: its transformers config (a shipped name or a path,
`model_overrides` applied), the experts backend, the vocabulary sized to the tokenizer, and the
`model_load` phase's work — construct or load, LoRA, move to the device, FSDP2 / DDP, compile
(see the module docstring of `workloads.causal_lm`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import CausalLMSpec, resource_path
from ..errors import InputError
from .dist import Dist
from .lm_flops import is_moe, parameter_counts
from .lm_lora import with_lora

MODELS_DIR = resource_path("models")
EXPERTS_IMPLEMENTATIONS = ("auto", "eager", "grouped_mm", "batched_mm")


def model_config(name_or_path: str) -> Any:
    """A transformers config from a shipped name or a config.json path (its `model_type`
    decides)."""
    from transformers import AutoConfig

    p = Path(name_or_path)
    if not p.exists():
        name = name_or_path if name_or_path.endswith(".json") else name_or_path + ".json"
        p = MODELS_DIR / name
    if not p.exists():
        shipped = sorted(x.stem for x in MODELS_DIR.glob("*.json"))
        raise FileNotFoundError(f"model config {name_or_path!r} not found (a path, or a name under "
                                f"{MODELS_DIR}: {shipped})")
    d = {k: v for k, v in json.loads(p.read_text()).items() if not k.startswith("_")}
    if "model_type" not in d:
        raise InputError(f"{p}: a model config needs 'model_type' (e.g. qwen3, qwen3_moe, llama)")
    return AutoConfig.for_model(d.pop("model_type"), **d)


def experts_implementation(spec: CausalLMSpec, device: Any) -> str:
    """The transformers experts backend the workload asks for: `experts_implementation` from the
    config, `auto` = `grouped_mm` on CUDA, `eager` elsewhere (the CPU path the tests run)."""
    want = spec.experts_implementation
    if want not in EXPERTS_IMPLEMENTATIONS:
        raise InputError(f"experts_implementation: expected one of "
                         f"{list(EXPERTS_IMPLEMENTATIONS)}, got {want!r}")
    if want == "auto":
        return "grouped_mm" if getattr(device, "type", str(device)) == "cuda" else "eager"
    return want


def _has_experts_backends() -> bool:
    """Whether the installed transformers has selectable experts backends (5.x)."""
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS  # noqa: F401
    except ImportError:
        return False
    return True


def model_vocab(tokenizer_len: int, multiple: int = 64) -> int:
    """The vocabulary a random-init model is built with: the tokenizer's, rounded up to
    `multiple`."""
    if multiple < 1:
        raise InputError(f"vocab_multiple: expected an integer >= 1, got {multiple}")
    return -(-int(tokenizer_len) // multiple) * multiple


def model_vocab_size(model: Any) -> int:
    """Rows of the model's input embedding (= columns of its output projection)."""
    return int(base_model(model).get_input_embeddings().weight.shape[0])


def attn_implementation(cfg: Any) -> str:
    """SDPA where the architecture supports it (gpt-oss's attention sinks need eager)."""
    return "eager" if cfg.model_type in ("gpt_oss",) else "sdpa"


def base_model(model: Any) -> Any:
    """The transformers model under PEFT/DDP/compile wrappers."""
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def model_config_for(spec: CausalLMSpec, device: Any) -> tuple[Any, str | None]:
    """The workload's transformers config (`model_config` with `model_overrides` applied) and the
    experts backend to build it with (None: dense, or transformers < 5's per-expert loop only)."""
    cfg = model_config(spec.model_config)
    # e.g. fewer layers to fit one GPU
    for key, value in (spec.model_overrides or {}).items():
        if not hasattr(cfg, key):
            raise InputError(f"model_overrides.{key}: {cfg.model_type} configs have no such field")
        setattr(cfg, key, value)
    experts = experts_implementation(spec, device) if is_moe(cfg) else None
    if experts and not _has_experts_backends():
        experts = None  # transformers < 5: the per-expert loop only (recorded as such)
    return cfg, experts


@dataclass
class BuiltModel:
    model: Any  # wrapped as trained: PEFT, DDP / FSDP, compile
    config: Any  # the transformers model's own config (vocabulary as built)
    source: str  # `pretrained:<folder>` or `random-init`
    experts_used: str | None  # the experts backend the model runs (None: dense)
    lora_info: dict[str, Any]
    counts: dict[str, int]  # parameter_counts, before sharding
    fsdp: bool


def build_model(spec: CausalLMSpec, cfg: Any, experts: str | None, tok: Any,
                pretrained: Path | None, device: Any, dist: Dist) -> BuiltModel:
    """Construct (or load) the model, add LoRA adapters, move it to the device, shard or wrap it
    for DDP, and compile it, as the workload says (the `model_load` phase's work)."""
    import torch

    cfg.use_cache = False
    dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float32
    model, source = _construct(spec, cfg, experts, tok, pretrained, device, dtype)
    cfg = model.config
    experts_used = (getattr(cfg, "_experts_implementation", None) if experts
                    else "eager" if is_moe(cfg) else None)
    if spec.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora_info: dict[str, Any] = {}
    if spec.task == "lora":
        model, lora_info = with_lora(model, spec)
    counts = parameter_counts(model, cfg)
    model = model.to(device)
    fsdp = dist.world > 1 and spec.fsdp
    model = _distribute(model, fsdp, dist, device, dtype)
    if spec.compile:
        mode: dict[str, Any] = {"mode": spec.compile_mode} if spec.compile_mode else {}
        model = torch.compile(model, **mode)
    return BuiltModel(model, cfg, source, experts_used, lora_info, counts, fsdp)


def _construct(spec: CausalLMSpec, cfg: Any, experts: str | None, tok: Any,
               pretrained: Path | None, device: Any, dtype: Any) -> tuple[Any, str]:
    """The transformers model and where its weights came from: the pretrained folder's (its
    embeddings grown to the tokenizer if smaller), or random init on `device` with the
    tokenizer-sized vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM

    backend = {"experts_implementation": experts} if experts else {}
    model: Any  # the transformers model
    if pretrained is not None and (pretrained / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(
            str(pretrained), dtype=dtype, attn_implementation=attn_implementation(cfg), **backend)
        if len(tok) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tok))
        return model, f"pretrained:{pretrained}"
    cfg.vocab_size = model_vocab(len(tok), spec.vocab_multiple)
    cfg._attn_implementation = attn_implementation(cfg)
    if experts:
        cfg._experts_implementation = experts
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            cfg, dtype=dtype)
    return model, "random-init"


def _distribute(model: Any, fsdp: bool, dist: Dist, device: Any, dtype: Any) -> Any:
    """FSDP2 (one shard unit per decoder layer, then the root; CPU/Gloo too) when `fsdp`, DDP
    under torchrun otherwise, the model itself on one process."""
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        names = set(getattr(base_model(model), "_no_split_modules", None) or [])
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)
        for layer in [m for m in model.modules() if type(m).__name__ in names]:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    elif dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model
