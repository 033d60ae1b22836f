"""CUDA graphs for the image workload's model (`cuda_graphs: true`).

The model's forward and backward are captured once, before the training loop, as CUDA graphs
(`torch.cuda.make_graphed_callables`) and replayed at every step: a step then launches two graphs
from Python instead of ~150 modules' kernels one by one. Why: with `decode: gpu` the decode thread
shares the interpreter with the training thread and each of those launches can wait for it (on
the H200 the step's kernels took 28.2 ms, the step 44-63 ms;
results/reference/h200/gpu-decode-batched/README.md). The replayed kernels are the eager ones
(cuDNN's choices at capture time), so the arithmetic is the eager step's; the optimizer step runs
eagerly (foreach SGD, a few launches).

The capture runs the model on a random batch of the training shape (3 warm-up passes and the
captured one, on a side stream): BatchNorm's running statistics are put back afterwards, and the
parameters do not change (the warm-up's gradients are returned, not accumulated). A batch of
another shape (shortened by corrupt images) and evaluation mode run the eager forward. Where
graphs cannot run (no CUDA device; several ranks, whose DDP hooks cannot be captured)
`unavailable_reason` says why and the workload runs eagerly, said on stderr and recorded in the
summary. The capture runs before the data loaders start their threads (a capture allows no CUDA
calls from other threads). torch warns that the gradient accumulators' stream does not match the
backward's (the capture ran on a side stream): each replayed backward then waits across streams;
the gradients are right (tests/workloads/test_cuda_graphs.py, three SGD steps against eager).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

WARMUP_ITERS = 3  # make_graphed_callables' default


def unavailable_reason(device: Any, world: int) -> str | None:
    """Why `cuda_graphs` cannot run on `device` with `world` ranks (None: it can)."""
    if getattr(device, "type", str(device)) != "cuda":
        return f"the workload's device is {device}, not a CUDA GPU"
    if world > 1:
        return (f"{world} ranks: DDP's gradient hooks cannot be captured in a CUDA graph "
                "(cuda_graphs runs on one GPU)")
    return None


def choose_graphs(name: str, requested: bool, device: Any,
                  world: int) -> tuple[bool, str | None]:
    """Whether workload `name` replays CUDA graphs and, when they were asked for but cannot run,
    why (said in one line on stderr; the workload records it in its summary)."""
    if not requested:
        return False, None
    why = unavailable_reason(device, world)
    if why is None:
        return True, None
    log.warning(f"wattlife: workloads.{name}.cuda_graphs: not available here ({why}); running the "
                "model eagerly instead")
    return False, why


class GraphedModel:
    """`model` with its training-mode forward and backward replayed from CUDA graphs captured
    for inputs of `shape` (N, C, H, W; channels_last); call it as the model. Other shapes and
    evaluation mode run the eager forward."""

    def __init__(self, model: Any, shape: tuple[int, ...], device: Any, amp: bool) -> None:
        import torch

        self.model, self.shape = model, tuple(shape)
        self.eager = model.forward  # the class's forward, bound (kept before the capture)
        saved = {k: b.detach().clone() for k, b in model.named_buffers()}
        sample = torch.randn(shape, device=device).contiguous(memory_format=torch.channels_last)
        model.train()
        # autocast's weight cache cannot be captured (make_graphed_callables refuses it)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp, cache_enabled=False):
            torch.cuda.make_graphed_callables(model, (sample,), num_warmup_iters=WARMUP_ITERS)
        torch.cuda.synchronize(device)  # the warm-up ran on a side stream
        with torch.no_grad():  # in place: the graphs hold these buffers' addresses
            for k, b in model.named_buffers():
                b.copy_(saved[k])

    def __call__(self, x: Any) -> Any:
        # the graphed forward copies `x` into its captured input (any strides) when the shape is
        # the captured one, and runs the eager forward itself in evaluation mode
        return self.model(x) if tuple(x.shape) == self.shape else self.eager(x)
