"""The trace read in chunks for attribution (`SpilledTrace`): each chunk's power and energy
readings of every device of an attributed kind are appended to that device's files on disk
(t_ns int64, value float64, source int32: 20 bytes a reading), and the devices' series are then
built one at a time from their files, by the same functions as the in-memory path
(`series.power_series`, `series.energy_series`), so the series, and every number attributed from
them, are identical.
Peak memory: one chunk of the trace (`streaming.BATCH_BYTES` of CSV) or one device's series,
whichever is larger; never the whole trace. With a `window`, not even one device's series:
each is built and read on disk a window of readings at a time (`windowed.WindowedSeries`,
the same numbers)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, overload

import numpy as np
import pandas as pd

from ..contracts import (
    ENERGY_J,
    POWER_LIMIT_W,
    POWER_W,
    is_attributed,
    iter_trace,
    streaming,
)
from .series import (
    DeviceSeries,
    SpilledSeries,
    energy_series,
    power_series,
    series_metric,
)
from .time_sort import FIELDS, time_sorted
from .time_units import check_time_units
from .windowed import WindowedSeries, windowed_series

_TEXT = ("host", "device", "metric", "source")


class SpilledTrace(SpilledSeries):
    """The devices' series of a trace read in chunks (module docstring), loaded one at a time
    when iterated; `short()` lists the devices with fewer than 2 readings (`too_few_readings`).
    Use as a context manager (the spill folder is removed on exit)."""

    def __init__(self, path: str | Path, spill_dir: str | Path | None = None,
                 batch_bytes: int | None = None, read: bool = True,
                 window: int | None = None) -> None:
        """`read`: spill the trace at `path` now (`iter_trace`); False: an empty spill that the
        caller fills with its own batches (`add`, then `finish`; `wattlife check`'s chunks).
        `window` (readings): each device's series stays on disk, read that many readings at a
        time (`windowed.WindowedSeries`; readings out of time order put in order on disk
        first, `time_sort`); None: loaded whole."""
        self.path = Path(path)
        self.window = window
        self._built: dict[int, WindowedSeries] = {}
        self._dir = Path(tempfile.mkdtemp(prefix=".wattlife-spill-", dir=spill_dir))
        self.sources: list[str] = []
        self.limits: dict[tuple[str, str], float] = {}
        self.counts: dict[tuple[str, str, str], int] = {}
        self._ids: dict[tuple[str, str, str], int] = {}
        self._handles: dict[Path, IO[bytes]] = {}
        self._devices: list[tuple[str, str]] = []
        self.rows = 0
        if not read:
            return
        try:
            for batch in iter_trace(self.path, batch_bytes or streaming.BATCH_BYTES):
                check_time_units(batch, batch.iloc[:0], str(self.path))
                self.add(batch)
            self.finish()
        except BaseException:
            self.close()
            raise

    def _file(self, key: tuple[str, str, str], field: str) -> Path:
        return self._dir / f"{self._ids.setdefault(key, len(self._ids))}.{field}"

    def add(self, batch: pd.DataFrame) -> None:
        """A batch of trace rows (t_ns int64, value float64; host / device / metric / source
        made categorical where they are not), in file order, spilled."""
        text = [c for c in _TEXT if not isinstance(batch[c].dtype, pd.CategoricalDtype)]
        if text:
            batch = batch.astype({c: "category" for c in text})
        self.rows += len(batch)
        self._limits(batch)
        self._append(batch, self._handles)

    def finish(self) -> None:
        """Every batch added: the spill files closed, the devices' series ready."""
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()
        import pyarrow as pa

        pa.default_memory_pool().release_unused()  # the parser's buffers, kept by its allocator
        devices = sorted({(h, d) for h, d, _ in self.counts})
        self._devices = [k for k in devices if self._metric(k) is not None]

    def _limits(self, batch: pd.DataFrame) -> None:
        lim = batch[batch["metric"] == POWER_LIMIT_W]
        if len(lim):
            for (h, d), v in lim.groupby(["host", "device"], observed=True)["value"].max().items():
                old = self.limits.get((str(h), str(d)))
                self.limits[(str(h), str(d))] = float(v) if old is None else float(np.fmax(old, v))

    def _append(self, batch: pd.DataFrame, handles: dict[Path, IO[bytes]]) -> None:
        """The chunk's power/energy rows of devices of attributed kinds appended to their
        series' files, each series' rows in file order (one stable sort on a small integer key:
        a radix sort)."""
        src = batch["source"].cat
        codes = np.array([self._source_code(str(c)) for c in src.categories] + [-1], np.int32)
        dev, host, met = (batch[c].cat for c in ("device", "host", "metric"))
        devs, hosts, mets = (list(map(str, x.categories)) for x in (dev, host, met))
        keep_dev = np.array([is_attributed(d) for d in devs], dtype=bool)
        keep_met = met.categories.isin([POWER_W, ENERGY_J])
        dc, hc, mc = (x.codes.to_numpy(np.int64) for x in (dev, host, met))
        known = (dc >= 0) & (mc >= 0) & (hc >= 0)  # a Parquet null cell (CSV cells never are)
        rows = np.flatnonzero(known & keep_dev[dc] & keep_met[mc])
        key = (hc[rows] * len(devs) + dc[rows]) * len(mets) + mc[rows]
        if len(key) and key.max() < np.iinfo(np.int16).max:
            key = key.astype(np.int16)  # numpy sorts 16-bit keys stably by radix
        by_key = np.argsort(key, kind="stable")
        order, key = rows[by_key], key[by_key]
        cuts = np.concatenate([[0], np.flatnonzero(np.diff(key)) + 1, [len(key)]])
        cols = (batch["t_ns"].to_numpy(np.int64)[order],
                batch["value"].to_numpy(np.float64)[order],
                codes[src.codes.to_numpy()[order]])
        for a, b in zip(cuts[:-1], cuts[1:], strict=True) if len(order) else []:
            i = order[a]
            k = (hosts[hc[i]], devs[dc[i]], mets[mc[i]])
            self.counts[k] = self.counts.get(k, 0) + int(b - a)
            for (field, dtype), arr in zip(FIELDS, cols, strict=True):
                f = self._file(k, field)
                if f not in handles:
                    handles[f] = open(f, "ab")  # noqa: SIM115 (closed in finish or close)
                np.ascontiguousarray(arr[a:b], dtype=dtype).tofile(handles[f])

    def _source_code(self, name: str) -> int:
        if name not in self.sources:
            self.sources.append(name)
        return self.sources.index(name)

    def _metric(self, dev: tuple[str, str]) -> str | None:
        """The metric a device's series is made of (`series.series_metric`)."""
        return series_metric(dev[1], {m: self.counts.get((*dev, m), 0)
                                      for m in (POWER_W, ENERGY_J)})

    def _load(self, key: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t, v, s = (np.fromfile(self._file(key, f), dtype=dt) if self.counts.get(key) else
                   np.zeros(0, dt) for f, dt in FIELDS)
        return t, v, s

    def series(self, i: int) -> DeviceSeries:
        host, dev = self._devices[i]
        m = self._metric((host, dev))
        if self.window:
            if i not in self._built:
                w = self._windowed(host, dev, str(m))
                if w is None:  # fewer than 2 readings kept: loaded whole
                    return self._loaded(host, dev, m)
                self._built[i] = w
            return self._built[i]
        return self._loaded(host, dev, m)

    def _windowed(self, host: str, dev: str, m: str) -> WindowedSeries | None:
        """A device's series read from its files a window at a time (`windowed_series`), its
        readings put in time order on disk first where they are not (`time_sort`); None where
        fewer than 2 are kept."""
        key, window = (host, dev, m), self.window
        assert window is not None  # `series` asks only then
        files = (self._file(key, "t"), self._file(key, "v"), self._file(key, "s"))
        limit = self.limits.get((host, dev), np.inf) if m == POWER_W else None
        out = self._dir / f"{self._ids[key]}.w"
        w = windowed_series(host, dev, files, self.counts[key], self.sources, limit, out, window)
        if w is None and self.counts[key] >= 2:  # out of time order (or all but one repeat)
            files = time_sorted(files, self.counts[key], self._dir / f"{self._ids[key]}.sorted",
                                window)
            w = windowed_series(host, dev, files, self.counts[key], self.sources, limit, out,
                                window)
        return w

    def _loaded(self, host: str, dev: str, m: str | None) -> DeviceSeries:
        """A device's series loaded whole (`series.power_series`, `series.energy_series`)."""
        t, v, s = self._load((host, dev, str(m)))
        if m == POWER_W:
            return power_series(host, dev, t, v, s, self.sources,
                                self.limits.get((host, dev), np.inf))
        return energy_series(host, dev, t, v, s, self.sources)

    @overload
    def __getitem__(self, i: int) -> DeviceSeries: ...
    @overload
    def __getitem__(self, i: slice) -> list[DeviceSeries]: ...

    def __getitem__(self, i: int | slice) -> DeviceSeries | list[DeviceSeries]:
        if isinstance(i, slice):
            return [self.series(k) for k in range(len(self))[i]]
        return self.series(i)

    def __len__(self) -> int:
        return len(self._devices)

    def __iter__(self) -> Iterator[DeviceSeries]:
        return (self.series(i) for i in range(len(self)))

    @property
    def n_readings(self) -> int:
        """Power or energy readings in the devices' series (before duplicates are dropped)."""
        return sum(self.counts[(h, d, str(self._metric((h, d))))] for h, d in self._devices)

    def short(self) -> pd.DataFrame:
        """The devices with fewer than 2 power and 2 energy readings: host, device, count,
        source (as `series.too_few_readings`)."""
        rows = []
        for h, d in sorted({(h, d) for h, d, _ in self.counts} - set(self._devices)):
            src = np.concatenate([self._load((h, d, m))[2] for m in (POWER_W, ENERGY_J)])
            names = pd.Series([self.sources[c] for c in src])
            rows.append({"host": h, "device": d, "count": len(src),
                         "source": names.mode().iat[0]})
        return pd.DataFrame(rows, columns=["host", "device", "count", "source"])

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> SpilledTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
