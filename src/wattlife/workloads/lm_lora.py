"""LoRA adapters for the causal-LM workload's `lora` task: which modules and parameters carry
them (`lora_plan`) and the PEFT wrapping of a frozen base model (`with_lora`); see the module
docstring of `workloads.causal_lm`."""

from __future__ import annotations

from typing import Any

from ..config import CausalLMSpec
from ..errors import InputError

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
