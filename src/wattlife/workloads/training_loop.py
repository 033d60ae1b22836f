"""The training-loop skeleton both workloads run, and the marked tail of a training step.

`run_training_loop` drives the steps: each one a `step` phase (carrying its items) around the
workload's own step function, then validation and checkpoint as their own top-level phases on
their schedule (every N steps, or once at a set time for the PFI study's protocol; a checkpoint
through the cell's `checkpointing.Checkpointer`: `sync` or `async`), each pause
left out of the `step` throughput basis (`Summary.end_pause`). `Batches` rolls the data loader
over into a new epoch inside the `data_load` phase that asked for the batch. `backward_and_step`
is the `backward` / `grad_sync` / `optimizer` tail of a step, shared with `wattlife.instrument`.
The phase names and their nesting are the events contract (docs/CONTRACTS.md, "events").
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..contracts import BACKWARD, COMPILE, DATA_LOAD, GRAD_SYNC, OPTIMIZER, VALIDATION
from ..markers import phase, step

if TYPE_CHECKING:
    from .checkpointing import Checkpointer
    from .dist import Dist
    from .summary import Summary


@dataclass(frozen=True)
class Schedule:
    """When the loop stops, validates and checkpoints. Step counts (`val_every`, `ckpt_every`;
    0 = never) unless a time is set: `eval_at_s` / `ckpt_at_s` act once, when that many seconds
    of the loop have passed; `duration_s` (0 = none) stops the loop after that long, `steps` in
    any case. `clock_after_first_step`: those seconds count from the end of the first step (a
    compiled model's, which compiles), so a fixed-length run holds the same training whatever
    its compile time; otherwise from the loop's start."""

    steps: int
    val_every: int = 0
    ckpt_every: int = 0
    duration_s: float = 0.0
    eval_at_s: float | None = None
    ckpt_at_s: float | None = None
    clock_after_first_step: bool = False

    @property
    def timed(self) -> bool:
        """Whether a decision depends on each rank's clock (the ranks must then agree)."""
        return bool(self.duration_s) or self.eval_at_s is not None or self.ckpt_at_s is not None


@dataclass(frozen=True)
class LoopResult:
    steps: int  # steps begun (a step whose batch was all corrupt included)
    epochs_started: int
    last_loss: Any  # the last trained step's loss tensor (None if none trained)


class Batches:
    """The training batches without end: when the loader is exhausted a new epoch starts (the
    DistributedSampler reshuffled), inside the `data_load` phase that asked for the batch."""

    def __init__(self, loader: Any, sampler: Any = None) -> None:
        self.loader, self.sampler, self.epoch = loader, sampler, 0
        self._batches = iter(loader)

    def next(self) -> Any:
        with phase(DATA_LOAD):
            try:
                return next(self._batches)
            except StopIteration:
                self.epoch += 1
                if self.sampler is not None:
                    self.sampler.set_epoch(self.epoch)
                self._batches = iter(self.loader)
                return next(self._batches)


def all_reduce_grads(model: Any, world: int) -> None:
    """The `explicit` grad_sync mode: average every gradient across ranks after backward."""
    import torch.distributed as td

    for param in model.parameters():
        if param.grad is not None:
            td.all_reduce(param.grad)
            param.grad.div_(world)


def backward_and_step(model: Any, loss: Any, optimizer: Any, explicit_sync: bool = False,
                      world: int = 1, compiling: bool = False) -> None:
    """The marked tail of a training step: `backward`, `grad_sync` (explicit mode: DDP's
    overlapped all-reduce is switched off with no_sync and done after backward instead), and
    `optimizer`. `compiling`: this backward compiles (the first of a compiled model), marked
    `compile` inside `backward`."""
    with phase(BACKWARD), phase(COMPILE) if compiling else nullcontext():
        if explicit_sync:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
    if explicit_sync:
        with phase(GRAD_SYNC):
            all_reduce_grads(model, world)
    with phase(OPTIMIZER):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def agree_across_ranks(flags: tuple[bool, ...], device: Any) -> tuple[bool, ...]:
    """Logical OR of each flag over all ranks."""
    import torch
    import torch.distributed as tdist

    votes = torch.tensor([float(f) for f in flags], device=device)
    tdist.all_reduce(votes, op=tdist.ReduceOp.MAX)
    return tuple(bool(x) for x in votes.tolist())


def run_training_loop(train_step: Callable[[], tuple[float, Any] | None], *, model: Any,
                      schedule: Schedule, batches: Batches, items_per_step: float,
                      summary: Summary, dist: Dist, device: Any,
                      validate: Callable[[], float] | None = None,
                      checkpointer: Checkpointer | None = None) -> LoopResult:
    """Run `schedule.steps` steps (or `duration_s`). `train_step()` runs inside the `step` phase
    (begun with `items_per_step`, ended with the items it trained: fewer when corrupt images were
    dropped) and returns (items trained, loss), or None when its batch had nothing to train on
    (a step of 0 items in the events, none in the summary, no validation or checkpoint after it).
    `validate()` returns the summary's `val_accuracy`; `checkpointer.save(step_no)` writes a
    checkpoint in its own phases and returns its path (None: this rank lists none), and
    `checkpointer.finish()` after the last step waits for a write still running (`async`; see
    `workloads.checkpointing`). The summary's clock restarts here:
    staging, model construction and dataset preparation are phases of their own, not in either
    throughput basis."""
    from tqdm import tqdm

    model.train()
    summary.restart_clock()  # both throughput bases count from the loop, not the cell's start
    bar = tqdm(total=schedule.steps, desc="train", unit="step", disable=dist.rank != 0,
               mininterval=2)
    eval_at, ckpt_at = schedule.eval_at_s, schedule.ckpt_at_s
    t_start = time.monotonic()
    done, last_loss, stop = 0, None, False
    while not stop:
        with step(items=items_per_step) as marked:
            outcome = train_step()
            marked.items = outcome[0] if outcome is not None else 0.0  # what it trained
        done += 1
        if done == 1 and schedule.clock_after_first_step:
            t_start = time.monotonic()  # the schedule's clock starts after the compiling step
        elapsed = time.monotonic() - t_start
        if outcome is not None:
            items, last_loss = outcome
            summary.add_step(items)
            bar.update(1)
        stop, do_eval, do_ckpt = _decide(schedule, done, elapsed, outcome is not None, eval_at,
                                         ckpt_at, checkpointer is not None, dist, device)
        if do_eval and validate is not None:
            eval_at = float("inf") if eval_at is not None else None
            _validation_pause(model, summary, validate)
        if do_ckpt and checkpointer is not None:
            ckpt_at = float("inf") if ckpt_at is not None else None
            _checkpoint_pause(summary, checkpointer, done)
    if checkpointer is not None:
        checkpointer.finish()  # the run never ends before its last checkpoint is written
    summary.stop_clock()  # the wall basis ends with the loop
    bar.close()
    return LoopResult(steps=done, epochs_started=batches.epoch + 1, last_loss=last_loss)


def _decide(schedule: Schedule, done: int, elapsed: float, trained: bool, eval_at: float | None,
            ckpt_at: float | None, can_checkpoint: bool, dist: Dist,
            device: Any) -> tuple[bool, bool, bool]:
    """After step `done` (`elapsed` seconds on the schedule's clock): whether to stop, validate
    and checkpoint. A step that trained nothing neither validates nor checkpoints; timed
    decisions are agreed across ranks (their clocks differ)."""
    do_eval = trained and ((elapsed >= eval_at) if eval_at is not None
                           else bool(schedule.val_every and done % schedule.val_every == 0))
    do_ckpt = trained and can_checkpoint and (
        (elapsed >= ckpt_at) if ckpt_at is not None
        else bool(schedule.ckpt_every and done % schedule.ckpt_every == 0))
    stop = done >= schedule.steps or (bool(schedule.duration_s)
                                      and elapsed >= schedule.duration_s)
    if schedule.timed and dist.world > 1:  # ranks' clocks differ: all act on the same decision
        stop, do_eval, do_ckpt = agree_across_ranks((stop, do_eval, do_ckpt), device)
    return stop, do_eval, do_ckpt


def _validation_pause(model: Any, summary: Summary, validate: Callable[[], float]) -> None:
    """The `validation` phase; training mode again after it, and the pause left out of the
    `step` basis."""
    with phase(VALIDATION):
        summary.val_acc = validate()
    model.train()
    summary.end_pause()


def _checkpoint_pause(summary: Summary, checkpointer: Checkpointer, done: int) -> None:
    """A checkpoint after step `done` (its phases marked by the checkpointer), listed in the
    summary when this rank has one; the pause left out of the `step` basis."""
    path = checkpointer.save(done)
    if path is not None:
        summary.checkpoints.append(str(path))
    summary.end_pause()
