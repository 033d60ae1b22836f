"""Training workloads of the lifecycle study. They use the markers only, never the sampler."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def train_from_config(cfg: dict[str, Any], workload: str, storage: str, checkpoint: bool,
                      workdir: str | Path) -> int:
    """Run workload `workload` of a validated config in one matrix cell."""
    if workload not in cfg.get("workloads", {}):
        raise ValueError(f"workloads.{workload}: not in the config (have: "
                         f"{sorted(cfg.get('workloads', {}))})")
    spec = cfg["workloads"][workload]
    shared_root = Path(cfg["storage"]["shared"])
    local_root = Path(cfg["storage"]["local"])
    data_root = shared_root / spec["dataset"]
    ckpt_to = spec.get("checkpoint_to", storage)
    ckpt_root = (shared_root if ckpt_to == "shared" else local_root) / "checkpoints"
    workdir = Path(workdir)
    if spec["kind"] == "image_classification":
        from .image import train_image

        return train_image(spec, data_root, storage, local_root, checkpoint, ckpt_root, workdir)
    if spec["kind"] == "causal_lm":
        from .causal_lm import train_causal_lm

        return train_causal_lm(spec, data_root, storage, local_root, checkpoint, ckpt_root, workdir)
    raise ValueError(f"workloads.{workload}.kind: expected image_classification or causal_lm, "
                     f"got {spec['kind']!r}")
