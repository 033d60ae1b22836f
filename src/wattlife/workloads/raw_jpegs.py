"""The reader side of `decode: gpu` (workloads/gpu_decode.py): each training file's bytes with its
crop box and flip, drawn as the CPU path draws them, and how a batch of them crosses from a reader
worker to the decode thread.

A batch is handed over packed (`pack_raw`): every file's bytes in one uint8 tensor, which the
DataLoader passes through shared memory, instead of a list of `bytes` pickled through a pipe. On the
2-core development machine (2 readers, the queue full) receiving a ready 128-image batch (9.6 MB)
took a median of 6.1-16.5 ms as bytes and 0.4-5.1 ms packed, unpacking 0.03-0.08 ms, in eight runs
of `benchmarks/raw_batch_transfer.py` (wide ranges: the readers share the two cores); the first read
of a packed batch's shared memory then cost ~0.7 ms more than that of pickled bytes (3.7-3.9 against
3.0-3.2 ms for a numpy sum of every byte, three runs). That time is spent in the thread that feeds
the GPU decoder; on the H200 the packed hand-over is not measured yet.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

SCALE = (0.08, 1.0)  # RandomResizedCrop's defaults, which the CPU path uses
RATIO = (3 / 4, 4 / 3)

Box = tuple[int, int, int, int]  # top, left, height, width
Raw = tuple[Any, Box, bool, int]  # (file bytes or None, crop box, flip, label)


def draw_crop(img: Any) -> tuple[Box, bool]:
    """The crop box and flip of one training image (a PIL image; only its size is read, so a
    lazily opened file is not decoded): torchvision's RandomResizedCrop parameters, then
    RandomHorizontalFlip's draw, in the CPU path's order."""
    import torch
    from torchvision.transforms import RandomResizedCrop

    top, left, h, w = RandomResizedCrop.get_params(img, list(SCALE), list(RATIO))
    flip = bool(torch.rand(1) < 0.5)
    return (int(top), int(left), int(h), int(w)), flip


class RawJpegs:
    """The training split as (file bytes, crop box, flip, label); None bytes for a file whose
    header is unreadable (counted as skipped, like the CPU path's corrupt images)."""

    def __init__(self, samples: Sequence[tuple[str, int]]) -> None:
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[bytes | None, Box, bool, int]:
        from PIL import Image, UnidentifiedImageError

        path, label = self.samples[i]
        try:
            with open(path, "rb") as fh:
                data = fh.read()
            with Image.open(io.BytesIO(data)) as img:
                box, flip = draw_crop(img)
        except (UnidentifiedImageError, OSError):
            return None, (0, 0, 0, 0), False, label
        return data, box, flip, label


def collate_raw(batch: list[Raw]) -> list[Raw]:
    """Raw batches as lists (each file's `bytes` pickled on its own)."""
    return batch


def pack_raw(batch: list[Raw]) -> tuple[Any, list[int], list[Box], list[bool], list[int]]:
    """A raw batch as (every file's bytes in one uint8 tensor, each file's size (0: unreadable),
    boxes, flips, labels): one shared-memory tensor for the DataLoader to hand over."""
    import numpy as np
    import torch

    sizes = [0 if r[0] is None else len(r[0]) for r in batch]
    buf = torch.empty(sum(sizes), dtype=torch.uint8)
    view, at = buf.numpy(), 0
    for r, n in zip(batch, sizes, strict=True):
        if n:
            view[at:at + n] = np.frombuffer(r[0], dtype=np.uint8)
            at += n
    return buf, sizes, [r[1] for r in batch], [r[2] for r in batch], [r[3] for r in batch]


def unpack_raw(packed: Any) -> list[Raw]:
    """`pack_raw`'s batch as raw items again, each file's bytes a uint8 numpy view of the packed
    tensor (no copy; the tensor must outlive their use); a list passes through."""
    if isinstance(packed, list):
        return packed
    import numpy as np

    buf, sizes, boxes, flips, labels = packed
    arr, ends = buf.numpy(), np.cumsum(sizes)
    return [(arr[e - n:e] if n else None, box, flip, label)
            for n, e, box, flip, label in zip(sizes, ends.tolist(), boxes, flips, labels,
                                               strict=True)]
