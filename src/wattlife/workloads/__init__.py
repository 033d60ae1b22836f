"""Training workloads of the lifecycle study. They use the markers only, never the sampler.

`train_cell` takes the typed `Settings` the command built at the edge (`wattlife train`:
`settings(load_config(path))`); no module here reads or converts a configuration mapping."""

from __future__ import annotations

from pathlib import Path

from ..config import CausalLMSpec, ImageClassificationSpec, Settings
from ..errors import InputError, SetupError


def train_cell(s: Settings, workload: str, storage: str, checkpoint: str | bool,
               workdir: str | Path) -> int:
    """Run workload `workload` of the typed settings `s` in one matrix cell; `checkpoint`: `off`,
    `sync` (`on`, True), `async` (workloads.checkpointing)."""
    from .checkpoint_space import checkpoint_root
    from .checkpointing import checkpoint_mode

    checkpoint = checkpoint_mode(checkpoint)
    if workload not in s.workloads:
        raise InputError(f"workloads.{workload}: not in the config (have: {sorted(s.workloads)})")
    spec = s.workloads[workload]
    shared_root = Path(s.storage["shared"])
    local_root = Path(s.storage["local"])
    data_root = shared_root / spec.dataset
    ckpt_root = checkpoint_root(s, workload, storage)
    workdir = Path(workdir)
    if isinstance(spec, ImageClassificationSpec):
        _need_torchvision(workload, spec)
        from .image import train_image

        return train_image(spec, data_root, storage, local_root, checkpoint, ckpt_root, workdir)
    assert isinstance(spec, CausalLMSpec)  # workload_spec knows no other kind
    from .causal_lm import train_causal_lm

    return train_causal_lm(spec, data_root, storage, local_root, checkpoint, ckpt_root, workdir)


def _need_torchvision(workload: str, spec: ImageClassificationSpec) -> None:
    """One line naming the workload when torchvision is absent: the CPU set-up
    (`WATTLIFE_CPU=1`, requirements/cpu-lock.txt) has none, since PyPI's needs the CUDA torch."""
    try:
        import torchvision  # noqa: F401
    except ImportError as exc:
        raise SetupError(
            f"workloads.{workload} (kind image_classification, model {spec.model}) needs "
            "torchvision, which this environment lacks (the CPU set-up, WATTLIFE_CPU=1, installs "
            "none): run it from the full set-up (make install), or run a causal_lm workload"
        ) from exc
