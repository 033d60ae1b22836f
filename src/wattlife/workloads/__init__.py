"""Training workloads of the lifecycle study. They use the markers only, never the sampler."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import CausalLMSpec, ImageClassificationSpec, workload_spec


def train_from_config(cfg: Mapping[str, Any], workload: str, storage: str,
                      checkpoint: str | bool, workdir: str | Path) -> int:
    """Run workload `workload` of a validated config in one matrix cell; `checkpoint`: `off`,
    `sync` (`on`, True), `async` (workloads.checkpointing)."""
    from .checkpointing import checkpoint_mode

    checkpoint = checkpoint_mode(checkpoint)
    workloads = cfg.get("workloads") or {}
    if workload not in workloads:
        raise ValueError(f"workloads.{workload}: not in the config (have: {sorted(workloads)})")
    spec = workload_spec(workload, workloads[workload])
    shared_root = Path(cfg["storage"]["shared"])
    local_root = Path(cfg["storage"]["local"])
    data_root = shared_root / spec.dataset
    ckpt_to = spec.checkpoint_to or storage
    ckpt_root = (shared_root if ckpt_to == "shared" else local_root) / "checkpoints"
    workdir = Path(workdir)
    if isinstance(spec, ImageClassificationSpec):
        from .image import train_image

        return train_image(spec, data_root, storage, local_root, checkpoint, ckpt_root, workdir)
    assert isinstance(spec, CausalLMSpec)  # workload_spec knows no other kind
    from .causal_lm import train_causal_lm

    return train_causal_lm(spec, data_root, storage, local_root, checkpoint, ckpt_root, workdir)
