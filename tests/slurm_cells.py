"""The shipped config made tiny for the live Slurm tests (tests/workflow/test_slurm.py,
tests/test_slurm_nodes.py): one ResNet cell, two steps of 32-px images, a checkpoint each step."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def tiny_slurm_config(tmp_path: Path, *, gpus: bool, storage: str, nodes: int = 1,
                      per_node_sampler: bool = False, local: str | None = None) -> Path:
    """config.yaml in `tmp_path`: one ResNet cell on `storage` (checkpointing) on `nodes` nodes
    (`per_node_sampler`: the multi-node launch path on one node too); `gpus`: the cell asks for
    one (placeholder) GPU per node, no simulated GPU, else it is CPU-only; `local`: the `local`
    storage root (default: tmp_path/local; its variables are each node's)."""
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp_path / "res")
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": local or str(tmp_path / "local")}
    cfg["data"]["images"].update(classes=2, train_per_class=6, val_per_class=2)
    cfg["workloads"]["resnet"].update(steps=2, val_every=0, ckpt_every=1, image_size=32,
                                      batch_size=4)
    cfg["execution"].update(storage=[storage], checkpoint=["on"], nodes=nodes, gpus_per_node=1,
                            per_node_sampler=per_node_sampler)
    cfg["sampler"]["idle_baseline_s"] = 0.2
    if gpus:  # no simulated GPU: the cell asks for execution.gpus_per_node (1) GPU per node
        cfg["sampler"]["gpu"] = "none"
    conf = tmp_path / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    return conf
