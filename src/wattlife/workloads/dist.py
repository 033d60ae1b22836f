"""Who this process is in a workload's process group (`Dist`), joining the group, and the barrier.

The ground both halves of a cell share: `workloads.cell` sets the cell up with it and
`workloads.summary` scales throughput by its world size, so neither imports the other for it."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class Dist:
    rank: int = 0
    local_rank: int = 0
    world: int = 1


def init_distributed() -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (NCCL on GPU, Gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = Dist(int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), world)
    if world > 1:
        import torch
        import torch.distributed as td

        if not td.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(dist.local_rank)
            td.init_process_group(backend)
    return dist


def barrier(dist: Dist) -> None:
    if dist.world > 1:
        import torch.distributed as td

        td.barrier()
