"""Put the phase markers into existing training code without rewriting it.

- `marked_batches(loader)`: iterate a DataLoader, marking the wait for each batch as `data_load`;
- `train_step(...)`: one marked step of a plain PyTorch loop (h2d, forward, backward, optimizer);
- `WattlifeCallback`: a Hugging Face `Trainer` callback marking steps, forward (through a module
  hook), backward, optimizer, validation and checkpoint.
They use the markers only, so they cost nothing when no events path is set.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from .contracts import (
    BACKWARD,
    CHECKPOINT_SAVED,
    DATA_LOAD,
    FORWARD,
    H2D,
    OPTIMIZER,
    STEP,
    VALIDATION,
)
from .markers import begin, end, phase, step
from .workloads.training_loop import backward_and_step


def marked_batches(iterable: Iterable[Any], name: str = DATA_LOAD) -> Iterator[Any]:
    """Yield from `iterable`, marking the time spent waiting for each item."""
    it = iter(iterable)
    while True:
        tok = begin(name)
        try:
            item = next(it)
        except StopIteration:
            end(tok)
            return
        end(tok)
        yield item


def train_step(model: Any, batch: tuple[Any, ...], loss_fn: Callable[..., Any], optimizer: Any,
               device: Any = None, items: float | None = None) -> Any:
    """forward/backward/optimizer of one (inputs, targets) batch inside a `step` phase; returns
    the loss tensor."""
    x, y = batch
    with step(items=items if items is not None else len(x)):
        if device is not None:
            with phase(H2D):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with phase(FORWARD):
            loss = loss_fn(model(x), y)
        backward_and_step(model, loss, optimizer)
    return loss


def _trainer_callback_base() -> Any:
    from transformers import TrainerCallback

    return TrainerCallback


class _CallbackMixin:
    """Marks Trainer phases. Forward is timed by hooks on the model; backward is the time between
    the end of forward and the optimizer step (gradient accumulation steps included)."""

    def __init__(self, items_per_step: float | None = None) -> None:
        self.items = items_per_step
        self._step = self._fwd = self._bwd = self._opt = self._eval = None
        self._hooked = False

    def _hook(self, model: Any) -> None:
        if self._hooked or model is None:
            return
        cb = self

        def pre(_m: Any, _a: Any) -> None:
            if cb._step is not None and cb._fwd is None:
                if cb._bwd is not None:
                    end(cb._bwd)
                    cb._bwd = None
                cb._fwd = begin(FORWARD)

        def post(_m: Any, _a: Any, _o: Any) -> None:
            if cb._fwd is not None:
                end(cb._fwd)
                cb._fwd = None
                if cb._eval is None:
                    cb._bwd = begin(BACKWARD)

        model.register_forward_pre_hook(pre)
        model.register_forward_hook(post)
        self._hooked = True

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kw: Any) -> None:
        self._hook(model)

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                      **kw: Any) -> None:
        self._hook(model)
        self._step = begin(STEP, self.items)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._bwd is not None:
            end(self._bwd)
            self._bwd = None
        self._opt = begin(OPTIMIZER)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._opt is not None:
            end(self._opt)
            self._opt = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        for name in ("_bwd", "_opt"):
            tok = getattr(self, name)
            if tok is not None:
                end(tok)
                setattr(self, name, None)
        if self._step is not None:
            end(self._step)
            self._step = None

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._eval is None:
            self._eval = begin(VALIDATION)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self._eval is not None:
            end(self._eval)
            self._eval = None

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        # Trainer calls on_save after writing; mark the instant so the event exists even though
        # its duration is not observable from a callback (the checkpoint helper times it).
        end(begin(CHECKPOINT_SAVED))


def WattlifeCallback(items_per_step: float | None = None) -> Any:  # noqa: N802 - reads as a class
    """A `transformers.TrainerCallback` instance marking the Trainer's phases."""
    base = _trainer_callback_base()
    cls = type("WattlifeCallback", (_CallbackMixin, base), {})
    return cls(items_per_step)
