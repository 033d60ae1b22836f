"""What a causal LM costs per token: its matmul parameters (total, trained, active per token; MoE
experts counted at top-k / n), the model FLOPs per trained token, the GPU's peak and the MFU
fields of the summary. The counting convention is the causal-LM workload's module docstring
(`workloads.causal_lm`)."""

from __future__ import annotations

from typing import Any

from ..config import CausalLMSpec

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
