"""The events of a run read one rank's file at a time (`RankEvents`), for traces too long to
hold every rank's phases at once (a day of 8 ranks at 0.3 s steps: ~11 M rows).

Every step of the in-memory path that reads events works per (host, rank): the warm-up labels
(`warmup.label_warmup`), the wrapper intervals (`wrappers.wrapper_events`), overlap clamping
(`tree.clamp_events`) and the phase map (`energy.phase_map`). So when each events file holds one
(host, rank), a file read and prepared alone gives that rank's rows as the in-memory path gives
them, and a device's phases table is the same. A pre-scan of a few columns of every file
(`rank_scan`) gives what spans ranks: which rank drives which device (its `local_rank`; where a
row has none, the run's ranks numbered per host as `phase_map` numbers them), the lowest rank
of each host (its CPU/DRAM), the run ids, whether any rank marked `compile`. A file holding
several ranks (a merged run's) is split into one part per (host, rank) first (`rank_split`),
each then read as a rank's own file. Otherwise (a rank with several `local_rank`s, no rows at
all, a cell pyarrow does not parse) `RankEvents.open` returns None and the caller reads all
events at once. A rank's file of more than `STREAM_ROWS` rows is never held whole: its tree is
built a start-ordered window at a time and kept on disk (`_streamed`, `tree_spill.SpilledTree`;
FORMULAS.md, "A rank's events window by window")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import IDLE, ContractError, read_events
from .clamp_windows import POS
from .energy import phase_map
from .rank_scan import Scanned, Source, scan_sources, start_median
from .time_units import check_time_units
from .tree import clamp_events, phase_tree, timeline
from .tree_spill import AnyTree, SpilledTree
from .tree_windows import WINDOW_ROWS, tree_windows

#: a rank's prepared rows in start order, a window at a time, each row's position in the
#: prepared frame in column `POS` (`prepare_windows.stream_file`): (rows, any rank compiles)
Stream = Callable[[Source, bool], Iterator[pd.DataFrame]]

#: a rank's file of more rows than this has its tree built window by window and kept on disk
#: (`SpilledTree`), never its rows whole (a day of one rank at 0.3 s steps: 1.4 M rows)
STREAM_ROWS = 1 << 20
#: the external sort's sizes for a streamed rank (`start_order.start_ordered`'s keywords; the
#: module's defaults where empty)
STREAM_SORT: dict[str, int] = {}
#: new rows of a streamed rank's tree window (`tree_windows`)
STREAM_WINDOW_ROWS = WINDOW_ROWS


class _Seen:
    """What a rank's streamed windows show on their way to the tree: whether every row is an
    `idle` phase, and the prepared frame's first row left by `timeline` (the lowest position
    seen: a concurrent phase at position 0 is not in the windows, as not in the whole frame)."""

    def __init__(self) -> None:
        self.rows, self.idle, self.head = 0, 0, pd.DataFrame()

    def watch(self, windows: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for w in windows:
            self.rows += len(w)
            self.idle += int((w["phase"] == IDLE).sum())
            k = int(np.argmin(w[POS].to_numpy())) if len(w) else -1
            if k >= 0 and (not len(self.head) or w[POS].iat[k] < self.head[POS].iat[0]):
                self.head = w.iloc[[k]]
            yield w

    def only_idle(self) -> bool:
        return bool(self.rows and self.idle == self.rows)


class RankEvents(Mapping[tuple[str, str], pd.DataFrame]):
    """{(host, device or "host"): that rank's prepared events}, each rank's file read when a
    device asks for it (the last one kept). `prepare(frame, any_compile)` is the in-memory
    path's preparation of the events read (warm-up labels, wrapper intervals)."""

    def __init__(self, scanned: Scanned, prepare: Callable[[pd.DataFrame, bool], pd.DataFrame],
                 where: str, stream: Stream | None = None,
                 spill_dir: str | Path | None = None) -> None:
        self.sources, self.scans, self._scanned = scanned.sources, scanned.scans, scanned
        self._prepare, self._where = prepare, where
        self._stream, self._spill_dir = stream, spill_dir
        self.any_compile = any(s["compile"] for s in self.scans)
        self.run_ids = sorted(set().union(*(s["run_ids"] for s in self.scans)))
        self._keys: dict[tuple[str, str], int] = {}
        self._mapping: tuple[list[int] | None, dict[int, list[int]] | None] = (None, None)
        self._cache: tuple[int, pd.DataFrame, dict[tuple[str, str], pd.DataFrame]] | None = None
        self._head: pd.DataFrame | None = None
        self._tree: tuple[int, AnyTree] | None = None
        self._idle: dict[int, bool] = {}
        self._whole: set[int] = set()  # ranks a window found an overlap in: read whole

    @classmethod
    def open(cls, events: str | Path, prepare: Callable[[pd.DataFrame, bool], pd.DataFrame],
             where: str = "", stream: Stream | None = None,
             spill_dir: str | Path | None = None) -> RankEvents | None:
        """The run's events file and its rank siblings, or None (module docstring); a file of
        several ranks split, and a long rank's tree kept, in folders under `spill_dir`
        (`close` removes them)."""
        scanned = scan_sources(events, spill_dir)
        return None if scanned is None else cls(scanned, prepare, where, stream, spill_dir)

    def map_devices(self, cuda_to_nvml: list[int] | None,
                    rank_devices: dict[int, list[int]] | None) -> RankEvents:
        """Which file each (host, device) key takes (`phase_map` on one row a file)."""
        local = [s["local_rank"] for s in self.scans]
        tiny = pd.DataFrame({"host": [s["host"] for s in self.scans],
                             "rank": [s["rank"] for s in self.scans],
                             # a row without one: every rank's numbered, as the whole frame's
                             "local_rank": np.full(len(local), np.nan) if None in local
                             else local})
        self._mapping = (cuda_to_nvml, rank_devices)
        self._keys = {k: int(g.index[0]) for k, g in
                      phase_map(tiny, cuda_to_nvml, rank_devices).items()}
        if self._cache is not None:  # a file read before (`head`): kept, keyed anew
            self._cache = (self._cache[0], self._cache[1], self._keyed(*self._cache[:2]))
        return self

    def _keyed(self, i: int, ev: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
        """File i's prepared rows under each key `map_devices` gave it."""
        return {k: ev for k, j in self._keys.items() if j == i}

    def _load(self, i: int) -> dict[tuple[str, str], pd.DataFrame]:
        """File i read, prepared, its overlaps clamped (as the in-memory path has its rows),
        for each key that `map_devices` gave it (the rank's GPUs, its host's CPU where it is
        the host's lowest rank). The file holds one (host, rank) (`rank_scan.scan_file`), so
        `phase_map` of its rows would give every key all of them, in order: the one frame is
        shared, never copied per key (a day of one rank: 1.4 M rows a copy)."""
        if self._cache is None or self._cache[0] != i:
            self._cache = None  # one rank's rows in memory at a time
            source = self.sources[i]
            ev = (read_events(source, lines=True, siblings=False)
                  if isinstance(source, Path) else source.frame())
            check_time_units(pd.DataFrame({"t_ns": np.zeros(0, np.int64)}), ev, "trace",
                             str(self.sources[0]))
            # one step at a time: each step's input is let go before the next copies it
            ev = self._prepare(ev, self.any_compile)
            ev = timeline(ev)
            ev = clamp_events(ev, where=self._where or "events")
            if i == 0:
                self._head = ev.iloc[:1].copy()
            self._cache = (i, ev, self._keyed(i, ev))
        return self._cache[2]

    def only_idle(self, key: tuple[str, str]) -> bool:
        """Whether the key's rank has rows and all of them are `idle` phases."""
        i = self._keys[key]
        if i not in self._idle and not self._streamed(i):
            ev = self._load(i)[key]
            self._idle[i] = bool(len(ev) and (ev["phase"] == IDLE).all())
        return self._idle[i]

    def tree(self, key: tuple[str, str], where: str) -> AnyTree:
        """The key's rank's phase tree (`tree.phase_tree`; `where` names it in an error), built
        once for all the rank's devices; the rank's rows are then let go, not held while its
        devices are attributed (issue 43: a day of one rank, 1.4 M rows, ~0.26 GB; a key's
        rows asked for later are read again). A long rank's is built window by window
        (`_streamed`), its rows never held whole."""
        i = self._keys[key]
        if self._tree is None or self._tree[0] != i:
            self.drop_tree()  # one rank's tree at a time
            if not self._streamed(i):
                built = phase_tree(self._load(i)[key], where=where)
                self._tree, self._cache = (i, built), None
        assert self._tree is not None
        return self._tree[1]

    def head(self) -> pd.DataFrame:
        """The first row of the run's events (its run id, its columns)."""
        if self._head is None and not self._streamed(0):
            self._load(0)
        assert self._head is not None  # _load(0) or _streamed(0) set it
        return self._head

    def _streamed(self, i: int) -> bool:
        """File i's tree, idleness and (file 0) head from its rows read, put in start order and
        prepared a window at a time (`stream`), where the file is longer than `STREAM_ROWS`;
        whether they were. Not where a window finds an overlap: clamping (`clamp_events`) is
        done on the whole frame, which then also gives the error that names the rows."""
        if self._stream is None or self.scans[i]["rows"] <= STREAM_ROWS or i in self._whole:
            return False
        if self._tree is not None and self._tree[0] == i:
            return True  # built for the head already
        median = start_median(self.sources[i], self.scans[i])
        check_time_units(pd.DataFrame({"t_ns": np.zeros(0, np.int64)}),
                         pd.DataFrame({"start_ns": [median]}), "trace", str(self.sources[0]))
        seen = _Seen()
        self.drop_tree()  # one rank's tree at a time
        try:
            built = SpilledTree.build(tree_windows(seen.watch(self._stream(
                self.sources[i], self.any_compile)), STREAM_WINDOW_ROWS, self._where or "events"),
                self._spill_dir)
        except ContractError:
            self._whole.add(i)  # streamed once only: the whole frame from now on
            return False
        self._tree, self._cache, self._idle[i] = (i, built), None, seen.only_idle()
        if i == 0:
            self._head = clamp_events(seen.head.drop(columns=POS).reset_index(drop=True))
        return True

    def drop_tree(self) -> None:
        """Lets the rank's tree go (a spilled one's folder removed)."""
        if self._tree is not None and isinstance(self._tree[1], SpilledTree):
            self._tree[1].close()
        self._tree = None

    def close(self) -> None:
        """Lets the rank's tree go and removes the split files' parts."""
        self.drop_tree()
        self._cache = None
        self._scanned.close()

    def __getitem__(self, key: tuple[str, str]) -> pd.DataFrame:
        return self._load(self._keys[key])[key]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
