"""The execution matrix (`execution`) and its cells."""

from __future__ import annotations

from dataclasses import dataclass

from .loading import ConfigError


@dataclass(frozen=True)
class Execution:
    """`execution`: the matrix and how each cell is launched."""

    workloads: tuple[str, ...]
    storage: tuple[str, ...]
    checkpoint: tuple[str, ...]
    repeats: int
    launcher: str
    gpus_per_node: int
    nodes: int
    per_node_sampler: bool
    runtime_min: int

    def __post_init__(self) -> None:
        if {"on", "sync"} <= set(self.checkpoint):  # `on` is `sync`: the same cell twice
            raise ConfigError("invalid config: execution.checkpoint: 'on' and 'sync' are the same "
                              "mode (on = sync); list one of them")


@dataclass(frozen=True)
class Cell:
    """One cell of the execution matrix."""

    workload: str
    storage: str
    checkpoint: str
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.workload}/{self.storage}/ckpt-{self.checkpoint}/r{self.repeat}"
