"""`decode: gpu` in a process of its own, so decoding does not share the training process's
Python interpreter.

On the H200 the in-process decode thread (`gpu_decode.GpuDecodeLoader`) left the step's GPU
kernels unchanged but delayed their launch: the training stream idled 15–35 ms a step
(results/reference/h200/gpu-decode-batched/). Here a spawned process runs a `GpuDecodeLoader`
(reader workers, nvImageCodec on its own CUDA stream, no CPU helpers) and hands each finished
batch over a `torch.multiprocessing` queue: CUDA tensors travel as IPC handles (the same GPU
memory, no copy), CPU ones through shared memory. The process stops when `close()` is called or
its parent is gone; an error in it is raised in the training process.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from typing import Any

from .gpu_decode import AHEAD, Decode, GpuDecodeLoader, collate_raw


class ProcessDecodeLoader:
    """The training batches of `decode: gpu`, decoded in a child process (see the module's
    docstring); iterate once per epoch (`len` batches), items (images, labels, skipped) as
    `GpuDecodeLoader`'s. `close()` at the end."""

    def __init__(self, dataset: Any, batch_size: int, size: int, device: Any, *,
                 sampler: Any = None, readers: int = 4, ahead: int = AHEAD,
                 decode: Decode | None = None) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")  # CUDA in the child needs a fresh interpreter
        n_items = len(sampler) if sampler is not None else len(dataset)
        self.n_batches = n_items // batch_size
        self._q: Any = ctx.Queue(maxsize=ahead)
        self._stop = ctx.Event()
        self._proc = ctx.Process(
            target=serve, name="wattlife-decode",
            args=(list(dataset.samples), batch_size, size, str(device), sampler, readers, ahead,
                  decode, self._q, self._stop, os.getpid()))
        self.decoded = {"gpu": 0, "cpu": 0}  # batches each side delivered (no CPU side here)

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[tuple[Any, Any, int]]:
        if self._proc.pid is None:
            self._proc.start()
        return self._consume(len(self))

    def _consume(self, n: int) -> Iterator[tuple[Any, Any, int]]:
        for _ in range(n):
            item = self._get()
            if isinstance(item, BaseException):
                raise item
            x, y, skipped = item
            self.decoded["gpu"] += 1
            yield x, y, skipped

    def _get(self) -> Any:
        while True:
            try:
                return self._q.get(timeout=1.0)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise RuntimeError(f"the decode process ended (exit code "
                                       f"{self._proc.exitcode}) before the batches did") from None

    def close(self) -> None:
        """Stop the decode process (and its reader workers), waiting up to a minute."""
        self._stop.set()
        if self._proc.pid is None:
            return
        self._proc.join(timeout=60)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=10)
        self._q.close()


class _Samples:
    """The only part of the training dataset the GPU side reads: its (path, label) list."""

    def __init__(self, samples: list[tuple[str, int]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)


def serve(samples: list[tuple[str, int]], batch_size: int, size: int, device: str, sampler: Any,
          readers: int, ahead: int, decode: Decode | None, out: Any, stop: Any,
          parent: int) -> None:
    """The decode process: a `GpuDecodeLoader` on `device`, its batches put on `out` until `stop`
    is set or `parent` is gone; an error is put there too."""
    import torch

    dev = torch.device(device)
    loader = None
    try:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        loader = GpuDecodeLoader(_Samples(samples), batch_size, size, dev, collate=collate_raw,
                                 sampler=sampler, readers=readers, helpers=0, ahead=ahead,
                                 decode=decode)
        while not stop.is_set():
            for x, y, skipped in loader:
                if not _put(out, (x, y, skipped), stop, parent):
                    return
    except BaseException as exc:  # noqa: BLE001 (handed to the training process)
        _put(out, exc, stop, parent)
    finally:
        if loader is not None:
            loader.close()


def _put(out: Any, item: Any, stop: Any, parent: int) -> bool:
    """Put `item` on `out` unless told to stop or orphaned first; whether it went."""
    while not stop.is_set() and os.getppid() == parent:
        try:
            out.put(item, timeout=0.5)
            return True
        except queue.Full:
            continue
    return False
