"""Building the causal-LM workload's model: its transformers config (a shipped name or a path,
`model_overrides` applied), the experts backend, the vocabulary sized to the tokenizer, and the
`model_load` phase's work — construct or load, LoRA, move to the device, FSDP2 / DDP, compile
(see the module docstring of `workloads.causal_lm`).

Also what the model is and costs: its LoRA adapters for the `lora` task (`lora_plan`: which modules
and parameters carry them; `with_lora`: the PEFT wrapping of a frozen base model), its matmul
parameters (total, trained, active per token; MoE experts counted at top-k / n), the model FLOPs
per trained token, the GPU's peak and the MFU fields of the summary (the counting convention is
`workloads.causal_lm`'s docstring)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import CausalLMSpec, resource_path
from ..errors import InputError
from .dist import Dist

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


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
# the routed experts' fused 3-D weights in transformers' MoE models (PEFT `target_parameters`)
EXPERT_PARAMETERS = ("gate_up_proj", "down_proj")


def lora_plan(model: Any, spec: CausalLMSpec,
              peft_has_target_parameters: bool) -> dict[str, list[str]]:
    """Which modules and parameters get LoRA adapters (see the module docstring): the attention
    and dense-MLP Linear layers the model has (`lora_targets` overrides), and the routed experts'
    fused weights when `lora_experts` (default true) and PEFT can target parameters."""
    import torch

    linear = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear)}
    modules = list(spec.lora_targets or [t for t in LORA_TARGETS if t in linear])
    params: list[str] = []
    if spec.lora_experts and peft_has_target_parameters:
        for n, m in model.named_modules():
            if n.endswith(".experts") or n == "experts":
                own = {pn for pn, p in m.named_parameters(recurse=False) if p.dim() == 3}
                params = [f"experts.{pn}" for pn in EXPERT_PARAMETERS if pn in own]
                break
    if not modules and not params:
        raise InputError(f"{type(model).__name__}: none of the LoRA target modules {LORA_TARGETS} "
                         "exists; set workloads.<name>.lora_targets")
    return {"lora_target_modules": modules, "lora_target_parameters": params}


def with_lora(model: Any, spec: CausalLMSpec) -> tuple[Any, dict[str, Any]]:
    """Freeze the base model; LoRA adapters as `lora_plan` says. Returns the PEFT model and what
    carries adapters (for the summary)."""
    import inspect

    from peft import LoraConfig, get_peft_model

    has_tp = "target_parameters" in inspect.signature(LoraConfig).parameters
    plan: dict[str, Any] = lora_plan(model, spec, has_tp)
    r = spec.lora_rank
    targets = plan["lora_target_parameters"]
    extra: dict[str, Any] = {"target_parameters": targets} if targets else {}
    lora = LoraConfig(r=r, lora_alpha=spec.lora_alpha, lora_dropout=0.0,
                      target_modules=plan["lora_target_modules"], task_type="CAUSAL_LM", **extra)
    peft_model = get_peft_model(model, lora)
    if not has_tp and spec.lora_experts and any(
            n.endswith(".experts") for n, _ in model.named_modules()):
        plan["lora_note"] = "installed PEFT has no target_parameters: the experts carry no adapters"
    return peft_model, {**plan, "lora_rank": r}


PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k_experts")


def _first(cfg: Any, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = getattr(cfg, k, None)
        if v:
            return int(v)
    return None


def is_moe(cfg: Any) -> bool:
    """Whether the config routes tokens to experts."""
    return bool(_first(cfg, EXPERT_COUNT_KEYS))


def parameter_counts(model: Any, cfg: Any) -> dict[str, int]:
    """Total, trained, and active (per token) matmul parameters; see the module docstring.

    Routed experts live under `.experts.` in transformers' MoE models (shared experts under
    `shared_expert(s)`, which every token uses); a token uses top_k / n_experts of them."""
    n_experts, top_k = _first(cfg, EXPERT_COUNT_KEYS), _first(cfg, TOP_K_KEYS)
    frac = top_k / n_experts if n_experts and top_k else 1.0
    emb_in = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is emb_in
    total = trained = 0
    active = trained_active = 0.0
    for name, prm in model.named_parameters():
        n = prm.numel()
        total += n
        trained += n if prm.requires_grad else 0
        if prm is emb_in and not tied:
            continue  # the input lookup is no matmul
        f = frac if ".experts." in f".{name}" else 1.0
        active += n * f
        trained_active += n * f if prm.requires_grad else 0
    return {"parameters": total, "trained_parameters": trained, "active_parameters": int(active),
            "trained_active_parameters": int(trained_active), "experts": n_experts or 0,
            "experts_per_token": top_k or 0}


def attention_flops_per_token(cfg: Any, seq_len: int) -> float:
    """Scores and values, forward and backward, summed over layers (sliding-window layers see at
    most their window; MLA's query/key and value head sizes may differ)."""
    heads = cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    qk = ((getattr(cfg, "qk_nope_head_dim", 0) or 0) + (getattr(cfg, "qk_rope_head_dim", 0) or 0)
          or hd)
    v = getattr(cfg, "v_head_dim", None) or hd
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    s_eff = [min(seq_len, window) if (t == "sliding_attention" and window) else seq_len
             for t in types]
    return float(sum(6.0 * s * heads * (qk + v) for s in s_eff))


def flops_per_token(cfg: Any, counts: dict[str, int], seq_len: int) -> float:
    """Model FLOPs per trained token (see the module docstring)."""
    return (4.0 * counts["active_parameters"] + 2.0 * counts["trained_active_parameters"]
            + attention_flops_per_token(cfg, seq_len))


def peak_flops(device: Any, spec: CausalLMSpec) -> float | None:
    """Peak bf16 dense FLOP/s of one GPU: `peak_tflops`, else from the GPU's name (None: CPU or
    a GPU not in `PEAK_TFLOPS`)."""
    if spec.peak_tflops:
        return float(spec.peak_tflops) * 1e12
    if device.type != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    for key, tf in PEAK_TFLOPS.items():
        if key in name:
            return tf * 1e12
    return None


def mfu_fields(thr: float | None, thr_wall: float | None, fpt: float, attn: float,
               peak: float | None, world: int) -> dict[str, Any]:
    """The summary's achieved-FLOPs fields, in its order: TFLOP/s per GPU, `mfu` (basis `step`),
    `mfu_wall`, the attention FLOPs per token and `mfu_causal` (attention halved)."""
    return {"tflops_per_gpu": thr * fpt / world / 1e12 if thr else None,
            "mfu": (thr * fpt / (peak * world)) if thr and peak else None,
            "mfu_basis": "step",
            "mfu_wall": (thr_wall * fpt / (peak * world)) if thr_wall and peak else None,
            "attention_flops_per_token": attn,
            "mfu_causal": (thr * (fpt - attn / 2) / (peak * world)) if thr and peak else None}
