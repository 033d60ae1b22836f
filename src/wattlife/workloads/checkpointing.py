"""Checkpoints of both workloads: the matrix's checkpoint factor (`off`, `sync`, `async`).

`sync` (a config's `on` means the same) writes inside one `checkpoint` phase on the training
timeline: `torch.save` to a temporary file and a rename (`save_atomically`), or a sharded
`torch.distributed.checkpoint` save (FSDP). `async` is `torch.distributed.checkpoint.async_save`:
the state is copied to CPU memory (pinned where CUDA is available: a `DefaultStager` per
checkpoint) in a `checkpoint_stage` phase on the training timeline, then written by a background
thread while training goes on. That write is recorded as `checkpoint_write`, a *concurrent* phase
(`contracts.CONCURRENT_PHASES`, `markers.concurrent`): it spans the steps it overlaps, so it is not
part of the rank's nesting and takes no energy of its own (the devices did both at once; the
energy stays with the training phases). The next checkpoint, and the end of the loop, first
complete the previous one in a `checkpoint_wait` phase: wait for its write if it still runs, then
publish it (rank 0: `wattlife.json`, the previous checkpoint removed, the rename); the run never
ends before its last write. An async checkpoint is a folder `model.dcp` (`.metadata`,
`__<rank>_0.distcp`, `wattlife.json`), written as `model.dcp.step<N>.tmp` and renamed by rank 0
when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable, Protocol

from ..contracts import CHECKPOINT, CHECKPOINT_STAGE, CHECKPOINT_WAIT, CHECKPOINT_WRITE
from ..contracts.clock import now_ns
from ..errors import InputError
from ..markers import concurrent, phase
from .dist import Dist, barrier

CHECKPOINT_MODES = ("off", "sync", "async")
#: what a config or `wattlife train --checkpoint` may say: the modes, and `on` (= `sync`)
CHECKPOINT_VALUES = ("on", *CHECKPOINT_MODES)
DCP_NAME = "model.dcp"


def checkpoint_mode(value: str | bool) -> str:
    """The mode of a checkpoint value: `on` (and True) is `sync`, False is `off`."""
    if isinstance(value, bool):
        return "sync" if value else "off"
    if value == "on":
        return "sync"
    if value not in CHECKPOINT_MODES:
        raise InputError(f"checkpoint: expected one of {list(CHECKPOINT_VALUES)}, got {value!r}")
    return value


def save_atomically(state: dict[str, Any], path: Path) -> Path:
    """`torch.save` to `<path>.tmp`, then rename: a killed writer never leaves a torn checkpoint."""
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


class Checkpointer(Protocol):
    """What the training loop calls: `save` when a checkpoint is due (it marks its own phases
    and returns the checkpoint's path, None when this rank lists none), `finish` after the last
    step (waits for any write still running)."""

    def save(self, step_no: int) -> Path | None: ...

    def finish(self) -> None: ...


class SyncCheckpointer:
    """`sync`: `write(step_no)` inside one `checkpoint` phase."""

    def __init__(self, write: Callable[[int], Path | None]) -> None:
        self.write = write

    def save(self, step_no: int) -> Path | None:
        with phase(CHECKPOINT):
            return self.write(step_no)

    def finish(self) -> None:
        """Nothing runs in the background."""


class AsyncCheckpointer:
    """`async`: `dcp.async_save` of `state()` into `folder/model.dcp`. Every rank builds one (a
    Gloo group of its own carries the save's coordination, so NCCL-only jobs save asynchronously
    too). `collective`: every rank saves its part (sharded or deduplicated state); otherwise
    rank 0 saves alone and the others' `save` does nothing. `info` goes into the checkpoint's
    `wattlife.json` with the step."""

    def __init__(self, state: Callable[[], dict[str, Any]], folder: Path, dist: Dist,
                 device: Any, info: dict[str, Any], collective: bool = True) -> None:
        import torch.distributed as td

        self.state, self.folder, self.dist, self.info = state, Path(folder), dist, info
        self.distributed = collective and dist.world > 1
        self.saves = collective or dist.rank == 0
        self.group: Any = td.new_group(backend="gloo") if dist.world > 1 else None
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self._pending: tuple[Any, int, Path, int] | None = None  # future, step, tmp, start_ns
        self._ended_ns: int | None = None

    def save(self, step_no: int) -> Path | None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

        if not self.saves:
            return None
        self._complete()
        tmp = self.folder / f"{DCP_NAME}.step{step_no}.tmp"
        with phase(CHECKPOINT_STAGE):
            if self._writes_meta and tmp.exists():
                shutil.rmtree(tmp)
            if self.distributed:
                barrier(self.dist)  # a stale folder of that name is gone before anyone writes
            with warnings.catch_warnings():  # one process saving alone is what no_dist means
                warnings.filterwarnings("ignore", "torch.distributed is disabled")
                # a stager per checkpoint: torch 2.11's async_save closes the stager it is given
                # (a reused one then fails on its next staging), 2.14's leaves it open
                stager = _stager(self.cuda)
                try:
                    resp = dcp.async_save(  # type: ignore[attr-defined]
                        self.state(), checkpoint_id=str(tmp), async_stager=stager,
                        process_group=self.group, no_dist=not self.distributed)
                finally:
                    if stager is not None:
                        stager.close()  # the staged copy lives on in the write it feeds
        fut = resp.upload_completion if isinstance(resp, AsyncSaveResponse) else resp
        self._ended_ns = None
        fut.add_done_callback(self._ended)  # the writer thread's own end time
        self._pending = (fut, step_no, tmp, now_ns())
        return self.folder / DCP_NAME

    def finish(self) -> None:
        """Wait for the last write and rename it into place."""
        self._complete()
        if self.distributed:
            barrier(self.dist)  # rank 0 renamed it: every rank may read it now

    @property
    def _writes_meta(self) -> bool:
        return self.dist.rank == 0 or not self.distributed

    def _ended(self, _fut: Any) -> None:
        self._ended_ns = now_ns()

    def _complete(self) -> None:
        """The previous write, in `checkpoint_wait`: wait for it, (rank 0) add wattlife.json and
        rename it into place; then record its `checkpoint_write` interval."""
        if self._pending is None:
            return
        fut, step_no, tmp, start_ns = self._pending
        self._pending = None
        # the training thread waits for the write (when it still runs) and publishes it: removing
        # the previous checkpoint of a 1.7B model took 3.2 s on the H200 (its GPU idle)
        with phase(CHECKPOINT_WAIT):
            fut.result()  # a failed write raises here
            if self._writes_meta:
                info = {**self.info, "step": step_no, "format": "dcp", "mode": "async",
                        "world_size": self.dist.world if self.distributed else 1}
                (tmp / "wattlife.json").write_text(json.dumps(info))
                final = self.folder / DCP_NAME
                if final.exists():
                    shutil.rmtree(final)
                os.replace(tmp, final)
        end_ns = self._ended_ns or now_ns()
        concurrent(CHECKPOINT_WRITE, start_ns, max(end_ns, start_ns))


def _stager(cuda: bool) -> Any:
    """A staging copy to CPU memory for one checkpoint.

    Pinned, with non-blocking copies, on CUDA (torch >= 2.9's DefaultStager); None (DCP's
    default copy) where there is none."""
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    return DefaultStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False,
                                        use_async_staging=False, use_non_blocking_copy=cuda))


def make_checkpointer(mode: str, write: Callable[[int], Path | None],
                      state: Callable[[], dict[str, Any]], folder: Path, dist: Dist, device: Any,
                      info: dict[str, Any], collective: bool = True) -> Checkpointer | None:
    """This rank's checkpointer of a mode (None for `off`, and for `sync` on ranks other than 0
    when not `collective`): `write` is the `sync` save, `state` the torch.distributed.checkpoint
    state the `async` save copies and writes. Every rank must call it (`async` makes a group)."""
    mode = checkpoint_mode(mode)
    if mode == "off":
        return None
    if mode == "sync":
        return SyncCheckpointer(write) if collective or dist.rank == 0 else None
    return AsyncCheckpointer(state, folder, dist, device, info, collective)


def dcp_state(model: Any, opt: Any, adapters_only: bool = False) -> dict[str, Any]:
    """The model's (for LoRA only the adapters') and optimizer's state as
    torch.distributed.checkpoint saves it: FQN keys, this rank's shards (DTensors) when sharded,
    nothing gathered."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, optim = get_state_dict(model, opt)
    if adapters_only:
        weights = {k: v for k, v in weights.items() if "lora_" in k}
    return {"model": weights, "optimizer": optim}


def save_checkpoint(model: Any, opt: Any, ckpt_dir: Path, step_no: int, dist: Dist, fsdp: bool,
                    adapters_only: bool = False) -> Path:
    """Model (or, for LoRA, only the adapters) and optimizer state; returns the checkpoint's path.
    FSDP: sharded, with torch.distributed.checkpoint: each rank writes its own shard of the model
    and optimizer state (`model.dcp/__<rank>_0.distcp` + `.metadata`), no rank ever gathers the
    full state (a 70B model's would not fit one host). Otherwise rank 0 writes `model.pt`."""
    if fsdp:
        import torch.distributed.checkpoint as dcp

        final, tmp = ckpt_dir / DCP_NAME, ckpt_dir / f"{DCP_NAME}.tmp"
        if dist.rank == 0 and tmp.exists():
            shutil.rmtree(tmp)
        barrier(dist)
        dcp.save(  # type: ignore[attr-defined]
            dcp_state(model, opt, adapters_only), checkpoint_id=str(tmp))
        if dist.rank == 0:
            info = {"step": step_no, "adapters_only": adapters_only, "world_size": dist.world,
                    "format": "dcp", "mode": "sync"}
            (tmp / "wattlife.json").write_text(json.dumps(info))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        barrier(dist)
        return final
    inner = getattr(model, "_orig_mod", model)
    inner = inner.module if hasattr(inner, "module") else inner
    weights, optim = inner.state_dict(), opt.state_dict()
    if adapters_only:
        from peft import get_peft_model_state_dict

        weights = get_peft_model_state_dict(inner, state_dict=weights)
    state = {"model": weights, "optimizer": optim, "step": step_no, "adapters_only": adapters_only}
    if dist.rank == 0:
        save_atomically(state, ckpt_dir / "model.pt")
    barrier(dist)
    return ckpt_dir / "model.pt"


def load_checkpoint(model: Any, opt: Any, path: Path, fsdp: bool | None = None) -> dict[str, Any]:
    """Load a checkpoint into `model` and `opt`: a `model.dcp` folder (FSDP, or any `async`
    checkpoint; every rank reads only its own shards when sharded) or a `model.pt` file; returns
    the checkpoint's step and flags. `fsdp` is unused (the path says the format)."""
    import torch

    path = Path(path)
    if path.is_dir():
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        info: dict[str, Any] = json.loads((path / "wattlife.json").read_text())
        state: dict[str, Any] = dcp_state(model, opt, info["adapters_only"])
        with warnings.catch_warnings():  # one writer (the image workload's rank 0): one reader
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            dcp.load(state, checkpoint_id=str(path),  # type: ignore[attr-defined]
                     no_dist=info.get("world_size", 1) == 1)
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"],
                       options=StateDictOptions(strict=not info["adapters_only"]))
        return info
    state = torch.load(path, map_location="cpu", weights_only=False)
    inner = getattr(model, "_orig_mod", model)
    inner = inner.module if hasattr(inner, "module") else inner
    if state.get("adapters_only"):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(inner, state["model"])
    else:
        inner.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return {"step": state["step"], "adapters_only": bool(state.get("adapters_only")),
            "format": "torch.save"}
