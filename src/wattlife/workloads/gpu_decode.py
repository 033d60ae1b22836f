"""GPU-side JPEG decoding and augmentation for the image workload (`decode: gpu`).

The CPU path (`decode: cpu`, workloads/image.py) decodes with PIL in DataLoader workers and
augments there (RandomResizedCrop + horizontal flip + normalise). Here:

- reader workers open each file's header only (PIL reads no pixels for it), draw the crop box and
  the flip with torchvision's own `RandomResizedCrop.get_params` and `torch.rand(1) < 0.5` (the
  same draws, in the same order, as the CPU path's transforms) and return the files' bytes, a
  batch packed in one shared-memory tensor (workloads/raw_jpegs.py);
- a decode thread decodes the batch with nvImageCodec (the GPU's hardware JPEG decoder where it has
  one; only the crop's region when `roi`), on its own CUDA stream, `ahead` batches ahead, and
  resizes (bilinear, antialiased), flips and normalises each crop there (`augment`);
- `helpers` CPU workers run the CPU path at the same time; both feed one queue and each step takes
  whichever batch is ready. The batches are handed out on demand (`_Claims`), so each image is
  trained once per epoch whichever side decoded it; the decoding does not stop between epochs
  (the next epoch's first batches may be trained before the last ones of the one before).

Where no GPU decoder is usable (no GPU, nvImageCodec not installed) `unavailable_reason` says why
and the workload falls back to the CPU path (workloads/image.py logs and records it).
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .gpu_augment import augment_batch, normalise, small_tensor
from .raw_jpegs import Box, RawJpegs, collate_raw, pack_raw, unpack_raw

log = logging.getLogger(__name__)

ROI = True  # decode only each crop's region (benchmarks/decode_rates.py measures both)
AHEAD = 3  # batches decoded ahead of the training step
# the decode stream's priority (torch's: lower is higher; 0 = the training stream's): a decode
# kernel waits for free SMs behind the training step's kernels
PRIORITY = 0
# batches whose GPU work may still run when the decode thread starts the next one (0: it waits
# for each batch's decode and augment to finish); the decoder's image buffers are kept until then
IN_FLIGHT = 0
# readers hand each batch over as one shared-memory tensor (raw_jpegs.pack_raw), not pickled bytes
PACK = True
# nvImageCodec's CPU threads (0: its default, one a core; they share the cores with the loaders)
DECODER_THREADS = 0
# the CPU helpers hand over uint8 crops (normalised on the GPU, copied on a stream of their own)
# where the loader is given such a dataset; False: the CPU path's float batches, normalised there
HELPERS_UINT8 = True
# the CPU helpers' niceness raised by this much (0: as the training process's), so that where
# they share the cores the decode thread, nvImageCodec's threads and the training thread win them
HELPERS_NICE = 0
INSTALL_HINT = "pip install 'wattlife[gpu-decode]' (nvidia-nvimgcodec-cu13, nvidia-nvjpeg)"


def unavailable_reason(device: Any) -> str | None:
    """Why `decode: gpu` cannot run on `device` (None: it can)."""
    if getattr(device, "type", str(device)) != "cuda":
        return f"the workload's device is {device}, not a CUDA GPU"
    try:
        from nvidia import nvimgcodec  # noqa: F401
    except ImportError:
        return f"nvImageCodec is not installed ({INSTALL_HINT})"
    try:
        _decoder(device)
    except Exception as exc:  # noqa: BLE001 (the library raises RuntimeError and others)
        return f"nvImageCodec cannot decode on {device}: {exc}"
    return None


def choose_decode(name: str, requested: str, device: Any) -> tuple[str, str | None]:
    """The decode path workload `name` runs and, when `gpu` was asked for but cannot run, why
    (said in one line on stderr; the workload records it in its summary)."""
    if requested != "gpu":
        return requested, None
    why = unavailable_reason(device)
    if why is None:
        return "gpu", None
    log.warning(f"wattlife: workloads.{name}.decode: gpu is not available here ({why}); decoding "
                "on the CPU (PIL in the loader workers) instead")
    return "cpu", why


def split_workers(workers: int) -> tuple[int, int]:
    """`workers` CPU processes of `decode: gpu` as (reader workers for the GPU decoder, CPU
    helpers decoding with PIL): a third read (1 to 4), the rest help; 0: read in the thread."""
    readers = min(4, max(1, workers // 3)) if workers else 0
    return readers, workers - readers


def lower_priority(nice: int, worker_id: int = 0) -> None:
    """A helper worker's start (DataLoader's `worker_init_fn`): its niceness raised by `nice`
    (a process setting of the worker alone; the GPU's settings are not touched)."""
    os.nice(nice)


def _decoder(device: Any) -> Any:
    from nvidia import nvimgcodec

    return nvimgcodec.Decoder(device_id=device.index or 0, max_num_cpu_threads=DECODER_THREADS)


class _Claims:
    """The batch sampler both loaders share, without end: each draws the next batch when it needs
    one (so the faster side decodes more and every batch is decoded once), epoch after epoch
    (each a new shuffle, or the DistributedSampler's next epoch; an incomplete last batch
    dropped), so no side idles at an epoch's end."""

    def __init__(self, n_items: int, batch_size: int, sampler: Any = None) -> None:
        self.n_items, self.batch_size, self.sampler = n_items, batch_size, sampler
        self.n_batches = n_items // batch_size
        self.epochs = 0  # epochs begun
        self._lock = threading.Lock()
        self._pending: list[list[int]] = []

    def _refill(self) -> None:
        import torch

        if self.sampler is not None:
            self.sampler.set_epoch(self.epochs)
            order = list(self.sampler)
        else:
            order = torch.randperm(self.n_items).tolist()
        bs = self.batch_size
        self._pending = [order[i * bs:(i + 1) * bs] for i in range(self.n_batches)][::-1]
        self.epochs += 1

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[list[int]]:
        while True:
            with self._lock:
                if not self._pending:
                    self._refill()
                nxt = self._pending.pop()
            yield nxt

class NvDecode:
    """nvImageCodec's batch decode on a CUDA device (its hardware JPEG decoder where the GPU has
    one, else its CUDA decoder); `roi`: decode only each image's crop box."""

    def __init__(self, device: Any, roi: bool | None = None) -> None:
        from nvidia import nvimgcodec as nv

        self.nv, self.roi, self.device = nv, ROI if roi is None else roi, device
        self.decoder = _decoder(device)
        # the CPU path neither rotates by EXIF nor keeps grey JPEGs single-channel
        self.params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB,
                                      sample_format=nv.I_RGB)

    def __call__(self, datas: Sequence[bytes], boxes: Sequence[Box], stream: Any) -> list[Any]:
        """Decoded uint8 HxWx3 CUDA tensors (None where a file could not be decoded)."""

        nv, srcs = self.nv, []
        for data, (top, left, h, w) in zip(datas, boxes, strict=True):
            cs = nv.CodeStream(data)
            if self.roi:
                cs = cs.get_sub_code_stream(region=nv.Region(top, left, top + h, left + w))
            srcs.append(cs)
        imgs = self.decoder.decode(srcs, params=self.params, cuda_stream=stream.cuda_stream)
        return [None if im is None else _to_tensor(im, self.device) for im in imgs]


def _to_tensor(im: Any, device: Any) -> Any:
    """A decoded nvImageCodec image as a torch tensor on `device` (zero-copy where it can)."""
    import numpy as np
    import torch

    try:
        return torch.as_tensor(im, device=device)  # __cuda_array_interface__
    except (TypeError, RuntimeError, ValueError):
        pass
    try:
        return torch.from_dlpack(im)  # type: ignore[attr-defined]
    except (TypeError, RuntimeError, ValueError, AttributeError):
        return torch.from_numpy(np.asarray(im.cpu())).to(device)


Decode = Callable[[Sequence[bytes], Sequence[Box], Any], list[Any]]


class GpuDecodeLoader:
    """The training batches of `decode: gpu` (see the module's docstring): iterate it once per
    epoch, as a DataLoader (`len` batches each time); each item is (images, labels, skipped), the
    images normalised, channels_last, on the GPU when decoded there or handed over as uint8 by a
    CPU helper (`helper_dataset`: the CPU path's transform up to uint8 pixels), in pinned host
    memory when a helper normalised them itself (no `helper_dataset`, or `HELPERS_UINT8` off).
    The decoding runs on between iterations: consecutive epochs overlap by the batches in flight
    (at most `ahead`, default `AHEAD`, plus 2 a worker). `close()` at the end."""

    def __init__(self, dataset: Any, batch_size: int, size: int, device: Any, *,
                 collate: Callable[[list[Any]], Any], sampler: Any = None, readers: int = 4,
                 helpers: int = 0, ahead: int | None = None, decode: Decode | None = None,
                 helper_dataset: Any = None) -> None:
        import torch
        from torch.utils.data import DataLoader

        self.size, self.device = size, device
        n_items = len(sampler) if sampler is not None else len(dataset)
        self.claims = _Claims(n_items, batch_size, sampler)
        self.decode: Decode = decode if decode is not None else NvDecode(device)
        self.cropped = bool(getattr(self.decode, "roi", False))
        cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(  # type: ignore[no-untyped-call]
            device, priority=PRIORITY) if cuda else None
        self.helper_stream = torch.cuda.Stream(  # type: ignore[no-untyped-call]
            device, priority=PRIORITY) if cuda else None
        self._in_flight: collections.deque[tuple[Any, Any]] = collections.deque()
        raw: Any = RawJpegs(dataset.samples)  # a map-style dataset (len + getitem)
        # 2 batches a worker ahead (the least): the batches go to whichever side is faster
        self.loaders: list[tuple[str, Any]] = [("gpu", DataLoader(
            raw, batch_sampler=self.claims, num_workers=readers,
            collate_fn=pack_raw if PACK else collate_raw,
            prefetch_factor=2 if readers else None))]
        if helpers:
            uint8 = HELPERS_UINT8 and helper_dataset is not None
            self.loaders.append(("cpu", DataLoader(
                helper_dataset if uint8 else dataset, batch_sampler=self.claims,
                num_workers=helpers, collate_fn=collate, pin_memory=cuda, prefetch_factor=2,
                worker_init_fn=functools.partial(lower_priority, HELPERS_NICE)
                if HELPERS_NICE else None)))
        self._q: queue.Queue[Any] = queue.Queue(maxsize=AHEAD if ahead is None else ahead)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._iters: list[Any] = []
        self.decoded = {"gpu": 0, "cpu": 0}  # batches each side delivered
        # each side's thread's wall seconds by stage (stage_ms): where the decoding side waits
        self.stage_s: dict[str, dict[str, float]] = {"gpu": {}, "cpu": {}}

    def __len__(self) -> int:
        return len(self.claims)

    def __iter__(self) -> Iterator[tuple[Any, Any, int]]:
        if not self._threads:
            self._iters = [iter(loader) for _, loader in self.loaders]
            self._threads = [threading.Thread(target=self._produce, args=(kind, it),
                                              daemon=True, name=f"wattlife-decode-{kind}")
                             for (kind, _), it in zip(self.loaders, self._iters, strict=True)]
            for t in self._threads:
                t.start()
        return self._consume(len(self))

    def _consume(self, n: int) -> Iterator[tuple[Any, Any, int]]:
        import torch

        for _ in range(n):
            item = self._q.get()
            if isinstance(item, BaseException):
                raise item
            x, y, skipped, event = item
            if event is not None and x is not None:
                current = torch.cuda.current_stream(self.device)
                current.wait_event(event)
                x.record_stream(current)  # made on another stream, freed after this one's use
                y.record_stream(current)
            yield x, y, skipped

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _produce(self, kind: str, batches: Iterator[Any]) -> None:
        try:  # any failure, this one's included, reaches the training thread (it would wait)
            if self.stream is not None:
                import torch

                torch.cuda.set_device(self.device)
            it, end = iter(batches), object()
            while not self._stop.is_set():
                t0 = time.perf_counter()
                batch = next(it, end)
                if batch is end:
                    return
                self._clock(kind, "receive", t0)
                item = self._on_gpu(batch) if kind == "gpu" else self._helped(batch)
                t0 = time.perf_counter()
                self._put(item)
                self._clock(kind, "queue", t0)
                self.decoded[kind] += 1
        except BaseException as exc:  # noqa: BLE001 (handed to the training thread)
            self._put(exc)

    def _clock(self, kind: str, stage: str, since: float) -> float:
        """Add the time since `since` to `kind`'s `stage` (not during a side's first batch: its
        workers' and decoder's start); the time now."""
        now = time.perf_counter()
        if self.decoded[kind]:
            stages = self.stage_s[kind]
            stages[stage] = stages.get(stage, 0.0) + now - since
        return now

    def stage_ms(self) -> dict[str, dict[str, float]]:
        """Each side's mean wall milliseconds a batch after its first in each of its thread's
        stages: `receive` (waiting for the loader's next batch), `decode` (the nvImageCodec call),
        `augment` (launching crop, resize, flip, normalise), `wait_gpu` (for a batch's GPU work,
        beyond `IN_FLIGHT`), `copy` (launching a helper batch's copy), `queue` (waiting for room:
        the training step is the slower side, or paused for validation or a checkpoint).
        Host-side times; the GPU work itself is asynchronous."""
        return {kind: {stage: round(1e3 * s / (self.decoded[kind] - 1), 3)
                       for stage, s in stages.items()}
                for kind, stages in self.stage_s.items() if self.decoded[kind] > 1}

    def _helped(self, batch: Any) -> tuple[Any, Any, int, Any]:
        """A CPU helper's batch (images, labels, skipped): uint8 crops are copied to the device
        on the helpers' stream and normalised there (images, labels, skipped, the stream's event
        after them); float ones pass as the CPU path made them."""
        import torch

        x, y, skipped = batch
        if x is None or x.dtype != torch.uint8:
            return x, y, skipped, None
        if self.helper_stream is None:
            return normalise(x.float()).contiguous(memory_format=torch.channels_last), y, \
                skipped, None
        t0 = time.perf_counter()
        with torch.cuda.stream(self.helper_stream):
            x = x.to(self.device, non_blocking=True)  # pinned: the copy overlaps the training
            y = y.to(self.device, non_blocking=True)
            x = normalise(x.float()).contiguous(memory_format=torch.channels_last)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self.helper_stream)
        self._clock("cpu", "copy", t0)
        return x, y, skipped, event

    def _on_gpu(self, batch: Any) -> tuple[Any, Any, int, Any]:
        """Decode and augment one raw batch (packed or a list) on the decode stream; (images,
        labels, skipped, the stream's event after them)."""
        import torch

        raw = unpack_raw(batch)
        kept = [r for r in raw if r[0] is not None]
        skipped = len(raw) - len(kept)
        if not kept:
            return None, None, skipped, None
        ctx = torch.cuda.stream(self.stream) if self.stream is not None else _nullcontext()
        with ctx:
            t0 = time.perf_counter()
            imgs = self.decode([r[0] for r in kept], [r[1] for r in kept], self.stream)
            t0 = self._clock("gpu", "decode", t0)
            done = [(r, im) for r, im in zip(kept, imgs, strict=True) if im is not None]
            skipped += len(kept) - len(done)  # the header was readable, the data not
            if not done:
                return None, None, skipped, None
            x = augment_batch([im for _, im in done], [r[1] for r, _ in done],
                              [r[2] for r, _ in done], self.size, self.cropped)
            # on the device here: a copy from pageable memory may synchronise the training stream
            labels = small_tensor([r[3] for r, _ in done], self.device)
            event = None
            if self.stream is not None:
                event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                event.record(self.stream)
            t0 = self._clock("gpu", "augment", t0)
        if event is not None:  # the decoder's buffers may be freed once its work is done
            self._in_flight.append((event, (imgs, batch)))  # the file bytes too
            while len(self._in_flight) > IN_FLIGHT:
                self._in_flight.popleft()[0].synchronize()
            self._clock("gpu", "wait_gpu", t0)
        return x, labels, skipped, event

    def close(self) -> None:
        """Stop the decode threads and the loaders' worker processes."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        for it in self._iters:
            if hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()


def _nullcontext() -> Any:
    from contextlib import nullcontext

    return nullcontext()
