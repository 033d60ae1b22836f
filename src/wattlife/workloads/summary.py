"""The workload's run summary (`work/summary.json`, rank 0): steps, throughput on its two bases,
what was skipped, validated and checkpointed (the contract: docs/CONTRACTS.md, "workload
summary")."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from ..contracts import warmup_count
from ..markers import step_spans
from .dist import Dist


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
        self._loop_t1: float | None = None  # the loop's end (stop_clock); None: still running

    def add_step(self, items: float) -> None:
        now = time.perf_counter()
        self.step_s.append(now - self._t)
        self.items.append(items)
        self._t = now

    def restart_clock(self) -> None:
        """Start of the training loop (and of the `wall` throughput)."""
        self._t = self._loop_t0 = time.perf_counter()
        self._loop_t1 = None

    def stop_clock(self) -> None:
        """End of the training loop (its last checkpoint written): the `wall` throughput's span
        ends here, so what follows (a loader's shut-down, the final synchronisation, writing
        the summary) is not counted as training time."""
        self._loop_t1 = time.perf_counter()

    def end_pause(self) -> None:
        """After a validation or checkpoint: the next step's time starts now, so per-step
        throughput (basis `step`) excludes the pause; the `wall` throughput keeps it."""
        self._t = time.perf_counter()

    def step_clock(self) -> str:
        """The clock of the `step` basis: `cuda` / `host` (the `step` rows of the events, as
        written), or `perf_counter` (no events recorder: the loop's own host clock)."""
        spans = step_spans()
        return spans[-1][3] if spans else "perf_counter"

    def throughput(self) -> float | None:
        """Basis `step`: items over the sum of the post-warm-up steps' durations (the first
        `warmup_count(n)` steps left out; evaluation and checkpoint pauses lie between steps) —
        the headline number. The durations are the `step` rows this process wrote to its events
        (GPU-timed on CUDA), so the figure equals a recomputation from the events; without an
        events recorder, the loop's host clock (pauses left out by `end_pause`)."""
        spans = step_spans()
        if spans:
            kept = spans[warmup_count(len(spans)):]
            dt = sum(e - s for s, e, _, _ in kept) / 1e9
            items = sum(i for _, _, i, _ in kept)
            return items / dt * self.dist.world if dt > 0 else None
        s = self.step_s[warmup_count(len(self.step_s)):]
        it = self.items[-len(s):] if s else []
        return sum(it) / sum(s) * self.dist.world if s and sum(s) > 0 else None

    def throughput_wall(self) -> float | None:
        """Basis `wall`: all items over the training loop's wall time, evaluation and checkpoint
        pauses (and warm-up steps) included: from `restart_clock` to `stop_clock` (to now where
        the loop has not stopped it)."""
        end = self._loop_t1 if self._loop_t1 is not None else time.perf_counter()
        dt = end - self._loop_t0
        return sum(self.items) * self.dist.world / dt if self.items and dt > 0 else None

    def write(self, unit: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        doc = {"steps": len(self.step_s), "throughput": self.throughput(),
               "throughput_unit": f"{unit}/s (all ranks)", "throughput_basis": "step",
               "step_clock": self.step_clock(),
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
        shown = ("steps", "throughput", "throughput_unit", "throughput_basis", "throughput_wall",
                 "skipped_items")
        print(json.dumps({k: doc[k] for k in shown}))
        return doc
