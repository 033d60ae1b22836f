"""ResNet-style image classification on an ImageNet-layout tree, every lifecycle phase marked.

torchvision model, `ImageFolder` + `DataLoader` with worker processes, the reference recipe's
decode + augment (RandomResizedCrop + flip for training, Resize + CenterCrop for validation),
bf16 autocast and channels_last on GPU, SGD with momentum. `decode: gpu` decodes and augments the
training images on the GPU instead (workloads/gpu_decode.py; the same crop, flip and
normalisation), falling back to the CPU path, said on stderr and recorded in the summary, where it
cannot. DDP under torchrun; `grad_sync` is its own phase in `explicit` mode (all-reduce after
backward, as the study measured it); in `overlapped` mode (default) DDP overlaps it with backward
and it is not separable.

A corrupt JPEG is skipped and counted (reported in the summary), never silently trained on.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Callable

from ..config import ImageClassificationSpec
from ..contracts import COMPILE, FORWARD, H2D, MODEL_LOAD, SETUP
from ..errors import InputError
from ..markers import phase
from .cell import checkpoint_dir, start_cell
from .checkpointing import Checkpointer, dcp_state, make_checkpointer, save_atomically
from .cuda_graphs import GraphedModel, choose_graphs
from .dist import Dist
from .gpu_augment import MEAN, STD
from .gpu_decode import GpuDecodeLoader, choose_decode, split_workers
from .summary import Summary
from .training_loop import Batches, Schedule, backward_and_step, run_training_loop

log = logging.getLogger(__name__)


class _SkipCorrupt:
    """ImageFolder loader that turns an undecodable file into None (counted, then dropped)."""

    def __call__(self, path: str) -> Any:
        from PIL import Image, UnidentifiedImageError

        try:
            with open(path, "rb") as fh:
                img = Image.open(fh)
                return img.convert("RGB")
        except (UnidentifiedImageError, OSError) as exc:
            log.warning(f"wattlife: skipping corrupt image {path}: {exc}")
            return None


def _transform(train: bool, size: int, uint8: bool = False) -> Callable[[Any], Any]:
    """The reference recipe's transform of a split (a corrupt image's None passes through);
    `uint8`: the training crops as uint8 tensors, left for the GPU to scale and normalise
    (`decode: gpu`'s helpers)."""
    from torchvision import transforms

    if train:
        steps = [transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip()]
        steps += [transforms.PILToTensor()] if uint8 else [
            transforms.ToTensor(), transforms.Normalize(list(MEAN), list(STD))]
    else:
        steps = [transforms.Resize(int(size * 256 / 224)), transforms.CenterCrop(size),
                 transforms.ToTensor(), transforms.Normalize(list(MEAN), list(STD))]
    tf = transforms.Compose(steps)

    def guarded(img: Any) -> Any:
        return None if img is None else tf(img)

    return guarded


def image_dataset(root: Path, train: bool, size: int) -> Any:
    from torchvision import datasets

    split = root / ("train" if train else "val")
    if not split.is_dir():
        raise FileNotFoundError(f"dataset split {split} does not exist (expected an "
                                "ImageNet-layout tree: train/<class>/*.JPEG, val/<class>/*.JPEG)")
    return datasets.ImageFolder(str(split), transform=_transform(train, size),
                                loader=_SkipCorrupt())


def uint8_crops(train_ds: Any, size: int) -> Any:
    """The training split `train_ds` with its crops left as uint8 tensors (`decode: gpu`'s CPU
    helpers): the same files in the same order, not listed again."""
    ds = copy.copy(train_ds)
    ds.transform = _transform(True, size, uint8=True)
    return ds


def collate(batch: list[tuple[Any, Any]]) -> tuple[Any, Any, int]:
    import torch

    kept = [(x, y) for x, y in batch if x is not None]
    skipped = len(batch) - len(kept)
    if not kept:
        return None, None, skipped
    xs, ys = zip(*kept, strict=True)
    return torch.stack(xs), torch.tensor(ys), skipped


def train_image(spec: ImageClassificationSpec, data_root: Path, storage: str, local_root: Path,
                checkpoint: str, ckpt_root: Path, workdir: Path) -> int:
    """Train workload `spec` (a config's `workloads.<name>`) in one matrix cell (`checkpoint`: a
    `checkpointing.CHECKPOINT_MODES` mode); writes work/summary.json."""
    if spec.image_size is None:
        raise InputError(f"workloads.{spec.name}.image_size: required for kind "
                         "image_classification (pixels, e.g. 224)")
    dist, device, summary, root = start_cell(spec, data_root, storage, local_root, workdir)
    with phase(SETUP):  # loading the GPU decoder's libraries took 1.1 s on the H200
        decode, decode_fallback = choose_decode(spec.name, spec.decode, device)
        graphs, graphs_fallback = choose_graphs(spec.name, spec.cuda_graphs, device, dist.world)
    with phase(MODEL_LOAD):
        train_ds, val_ds, model, opt = _build(spec, root, dist, device)
        n_classes = len(train_ds.classes)
        summary.train_items = len(train_ds)

    amp = spec.precision == "bf16"
    forward: Callable[[Any], Any] = model
    if graphs:  # before the loaders' threads start: a capture allows no CUDA calls beside it
        with phase(COMPILE):  # the capture: a top-level phase before the loop
            forward = GraphedModel(model, (spec.batch_size, 3, spec.image_size, spec.image_size),
                                   device, amp)
    batches, val_loader = _loaders(train_ds, val_ds, spec, dist, device, root, decode)
    explicit_sync = dist.world > 1 and spec.grad_sync == "explicit"
    ckpt_dir = checkpoint_dir(ckpt_root, workdir)
    train_step = _step_function(model, forward, opt, batches, summary, device, amp,
                                explicit_sync, dist.world)
    ckpt = _checkpointer(model, opt, checkpoint, ckpt_dir, dist, device)

    schedule = Schedule(steps=spec.steps, val_every=spec.val_every, ckpt_every=spec.ckpt_every)
    try:
        result = run_training_loop(
            train_step, model=model, schedule=schedule, batches=batches,
            items_per_step=spec.batch_size, summary=summary, dist=dist, device=device,
            validate=lambda: _validate(model, val_loader, device, amp, spec.val_steps),
            checkpointer=ckpt)
    finally:
        if isinstance(batches.loader, GpuDecodeLoader):
            batches.loader.close()
    summary.last_loss = float(result.last_loss.detach()) if result.last_loss is not None else None
    summary.write(unit="images", extra={
        "epochs_started": result.epochs_started, "classes": n_classes, "decode": decode,
        "decode_requested": spec.decode, "decode_fallback": decode_fallback,
        "decode_batches": getattr(batches.loader, "decoded", None),
        "decode_stage_ms": batches.loader.stage_ms()
        if isinstance(batches.loader, GpuDecodeLoader) else None, "cuda_graphs": graphs,
        "cuda_graphs_requested": spec.cuda_graphs, "cuda_graphs_fallback": graphs_fallback})
    return 0


def _step_function(model: Any, forward: Callable[[Any], Any], opt: Any, batches: Batches,
                   summary: Summary, device: Any, amp: bool, explicit_sync: bool,
                   world: int) -> Callable[[], tuple[float, Any] | None]:
    """One training step: batch (`data_load`; its corrupt images counted as skipped), `h2d`,
    `forward` (`forward(x)`: the model, or its CUDA graphs; bf16 autocast when `amp`), then the
    marked backward / grad_sync / optimizer tail; None when every image of the batch was corrupt."""
    import torch
    import torch.nn.functional as F

    def train_step() -> tuple[float, Any] | None:
        x, y, skipped = batches.next()
        summary.skipped += skipped
        if x is None:  # every image of the batch was corrupt
            return None
        with phase(H2D):
            x = x.to(device, non_blocking=True, memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
        with phase(FORWARD):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(forward(x), y)
        backward_and_step(model, loss, opt, explicit_sync, world)
        return len(y), loss

    return train_step


def _checkpointer(model: Any, opt: Any, checkpoint: str, ckpt_dir: Path, dist: Dist,
                  device: Any) -> Checkpointer | None:
    """The cell's checkpointer: rank 0 holds the whole model and saves alone (sync: model.pt;
    async: model.dcp)."""

    def save(step_no: int) -> Path:
        state = {"model": (model.module if dist.world > 1 else model).state_dict(),
                 "optimizer": opt.state_dict(), "step": step_no}
        return save_atomically(state, ckpt_dir / "model.pt")

    return make_checkpointer(
        checkpoint, save, lambda: dcp_state(model.module if dist.world > 1 else model, opt),
        ckpt_dir, dist, device, {"adapters_only": False}, collective=False)


def _build(spec: ImageClassificationSpec, root: Path, dist: Dist, device: Any
           ) -> tuple[Any, Any, Any, Any]:
    """The datasets, the model (channels_last; DDP under torchrun; cuDNN picking its fastest
    kernels on the first steps, which lie in the warm-up) and its optimiser."""
    import torch
    import torchvision

    assert spec.image_size is not None  # checked by train_image
    train_ds = image_dataset(root, True, spec.image_size)
    val_ds = image_dataset(root, False, spec.image_size)
    model = getattr(torchvision.models, spec.model)(num_classes=len(train_ds.classes))
    model = model.to(device, memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True  # the reference recipe's; fixed-size inputs
    if dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9, weight_decay=1e-4)
    return train_ds, val_ds, model, opt


def _loaders(train_ds: Any, val_ds: Any, spec: ImageClassificationSpec, dist: Dist, device: Any,
             root: Path, decode: str) -> tuple[Batches, Any]:
    """The training batches (shuffled; a DistributedSampler under torchrun; an epoch ends before
    an incomplete batch; decoded on the GPU for `decode` gpu) and the validation loader (the CPU
    path in both cases)."""
    import torch

    sampler: Any = None
    if dist.world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(train_ds, dist.world, dist.rank, shuffle=True)
    workers = spec.workers
    loader: Any
    if decode == "gpu":
        assert spec.image_size is not None  # checked by train_image
        readers, helpers = split_workers(workers)
        loader = GpuDecodeLoader(train_ds, spec.batch_size, spec.image_size, device,
                                 collate=collate, sampler=sampler, readers=readers,
                                 helpers=helpers,
                                 helper_dataset=uint8_crops(train_ds, spec.image_size))
    else:
        loader = torch.utils.data.DataLoader(
            train_ds, batch_size=spec.batch_size, shuffle=sampler is None, sampler=sampler,
            num_workers=workers, pin_memory=device.type == "cuda", drop_last=True,
            persistent_workers=workers > 0, collate_fn=collate,
            prefetch_factor=spec.prefetch if workers > 0 else None)
    if len(loader) == 0:
        raise InputError(f"{root / 'train'}: {len(train_ds)} images for {dist.world} rank(s), "
                         f"fewer than one batch of {spec.batch_size}; use more images or a "
                         "smaller batch")
    val_loader = torch.utils.data.DataLoader(val_ds, batch_size=spec.batch_size,
                                             num_workers=workers, collate_fn=collate)
    # the GPU path shuffles each epoch itself (its epochs overlap)
    return Batches(loader, None if decode == "gpu" else sampler), val_loader


def _validate(model: Any, loader: Any, device: Any, amp: bool, max_steps: int) -> float:
    import torch

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for j, (x, y, _) in enumerate(loader):
            if x is None:
                continue
            x = x.to(device, memory_format=torch.channels_last)
            y = y.to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                pred = model(x).argmax(1)
            correct += int((pred == y).sum())
            total += len(y)
            if max_steps and j + 1 >= max_steps:
                break
    return correct / max(total, 1)
