"""What the workloads share: distributed set-up, device choice, staging, and the run summary."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..markers import ENV_RUN_ID, phase


@dataclass
class Dist:
    rank: int = 0
    local_rank: int = 0
    world: int = 1


def init_distributed() -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (NCCL on GPU, Gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    d = Dist(int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), world)
    if world > 1:
        import torch
        import torch.distributed as td

        if not td.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(d.local_rank)
            td.init_process_group(backend)
    return d


def resolve_device(name: str, dist: Dist):
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("workload asks for device 'cuda' but no GPU is visible")
        return torch.device("cuda", dist.local_rank)
    return torch.device(name)


def barrier(dist: Dist) -> None:
    if dist.world > 1:
        import torch.distributed as td

        td.barrier()


def stage_dataset(data_root: Path, storage: str, local_root: Path, dist: Dist) -> Path:
    """`shared`: read in place. `local`: copy to node-local disk first, as a `stage_copy` phase
    (local rank 0 copies, the others wait)."""
    data_root = Path(data_root)
    if not data_root.exists():
        raise FileNotFoundError(f"dataset path {data_root} does not exist (run the preparation "
                                "stage, or `wattlife gen-images` for generated data)")
    if storage == "shared":
        return data_root
    if storage != "local":
        raise ValueError(f"storage must be 'shared' or 'local', got {storage!r}")
    dest = Path(os.path.expandvars(str(local_root))) / data_root.name
    with phase("stage_copy"):
        if dist.local_rank == 0:
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(data_root, dest)
        barrier(dist)
    return dest


def checkpoint_dir(ckpt_root: Path, workdir: Path) -> Path:
    run = os.environ.get(ENV_RUN_ID) or Path(workdir).name
    d = Path(os.path.expandvars(str(ckpt_root))) / run
    d.mkdir(parents=True, exist_ok=True)
    return d


class Summary:
    """Per-step throughput and what happened, written as summary.json (rank 0)."""

    def __init__(self, workdir: Path, dist: Dist) -> None:
        self.workdir, self.dist = Path(workdir), dist
        self.step_s: list[float] = []
        self.items: list[float] = []
        self.skipped = 0
        self.checkpoints: list[str] = []
        self.val_acc: float | None = None
        self.last_loss: float | None = None
        self.dataset_bytes: int | None = None
        self.train_items: int | None = None  # items in one epoch of the training split
        self._t = self._loop_t0 = time.perf_counter()

    def add_step(self, items: float) -> None:
        now = time.perf_counter()
        self.step_s.append(now - self._t)
        self.items.append(items)
        self._t = now

    def restart_clock(self) -> None:
        """Start of the training loop (and of the `wall` throughput)."""
        self._t = self._loop_t0 = time.perf_counter()

    def end_pause(self) -> None:
        """After a validation or checkpoint: the next step's time starts now, so per-step
        throughput (basis `step`) excludes the pause; the `wall` throughput keeps it."""
        self._t = time.perf_counter()

    def throughput(self, warmup: int = 3) -> float | None:
        """Basis `step`: items over the training steps' own time (the first `warmup` steps and
        every evaluation / checkpoint pause left out) — the headline number."""
        s = self.step_s[warmup:] if len(self.step_s) > warmup + 2 else self.step_s
        it = self.items[-len(s):] if s else []
        return sum(it) / sum(s) * self.dist.world if s and sum(s) > 0 else None

    def throughput_wall(self) -> float | None:
        """Basis `wall`: all items over the training loop's wall time, evaluation and checkpoint
        pauses (and warm-up steps) included."""
        dt = time.perf_counter() - self._loop_t0
        return sum(self.items) * self.dist.world / dt if self.items and dt > 0 else None

    def write(self, unit: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        doc = {"steps": len(self.step_s), "throughput": self.throughput(),
               "throughput_unit": f"{unit}/s (all ranks)", "throughput_basis": "step",
               "throughput_wall": self.throughput_wall(),
               "median_step_s":
               statistics.median(self.step_s) if self.step_s else None,
               "skipped_items": self.skipped, "checkpoints": sorted(set(self.checkpoints)),
               "val_accuracy": self.val_acc, "last_loss": self.last_loss,
               "dataset_bytes": self.dataset_bytes, "train_items": self.train_items,
               "epochs_run": sum(self.items) * self.dist.world / self.train_items
               if self.train_items else None,
               "world_size": self.dist.world, **(extra or {})}
        if self.dist.rank == 0:
            self.workdir.mkdir(parents=True, exist_ok=True)
            (self.workdir / "summary.json").write_text(json.dumps(doc, indent=2))
        print(json.dumps({k: doc[k] for k in ("steps", "throughput", "throughput_unit",
                                              "throughput_basis", "throughput_wall", "skipped_items")}))
        return doc


def start_cell(w: dict[str, Any], data_root: Path, storage: str, local_root: Path,
               workdir: Path) -> tuple[Dist, Any, "Summary", Path]:
    """What every workload does first: join the process group, pick the device, put the phase
    boundaries on the GPU timeline when training on a GPU, and stage the dataset."""
    from ..markers import configure

    dist = init_distributed()
    device = resolve_device(w.get("device", "auto"), dist)
    configure(gpu_timeline=device.type == "cuda" and w.get("gpu_timeline", True))
    summary = Summary(workdir, dist)
    root = stage_dataset(data_root, storage, local_root, dist)
    # the dataset's size (for the staging break-even); walked on the copy, never on the shared FS
    summary.dataset_bytes = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) \
        if storage == "local" else None
    return dist, device, summary, root


def all_reduce_grads(model: Any, world: int) -> None:
    """The `explicit` grad_sync mode: average every gradient across ranks after backward."""
    import torch.distributed as td

    for p in model.parameters():
        if p.grad is not None:
            td.all_reduce(p.grad)
            p.grad.div_(world)


def backward_and_step(model: Any, loss: Any, opt: Any, explicit_sync: bool, world: int) -> None:
    """The marked tail of a training step: `backward`, `grad_sync` (explicit mode: DDP's
    overlapped all-reduce is switched off with no_sync and done after backward instead), and
    `optimizer`."""
    from ..markers import phase

    with phase("backward"):
        if explicit_sync:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
    if explicit_sync:
        with phase("grad_sync"):
            all_reduce_grads(model, world)
    with phase("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)
