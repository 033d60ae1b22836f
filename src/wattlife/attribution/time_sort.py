"""A device's spilled readings put in time order on disk (issue 43): a trace whose readings of
one device are not in time order (a user's own sampler, files joined by hand) had the device's
series loaded whole to be sorted (`series._by_time`: a stable sort by time). Here the readings
(t, value, source files, in file order) go through the external sort (`start_order.sorted_blocks`:
runs sorted in memory and spilled, merged k ways) by (t, position in the file): the order of a
stable sort by time, so the series built from the sorted files (`windowed.windowed_series`) is
the one built in memory, bit for bit. Memory: a run of the sort and a window of readings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .start_order import sorted_blocks
from .windowed import DiskArray

#: the spilled fields of a reading, in `chunked`'s files' order: time, value, source code
FIELDS = (("t", np.int64), ("v", np.float64), ("s", np.int32))


def _by_time(df: pd.DataFrame, first_row: int) -> dict[str, np.ndarray]:
    """The sort keys of a block of readings: time, then the reading's position (stable)."""
    return {"__wl_t": df["t"].to_numpy(np.int64),
            "__wl_row": np.arange(first_row, first_row + len(df), dtype=np.int64)}


def _windows(files: tuple[Path, Path, Path], n: int, window: int) -> Iterator[pd.DataFrame]:
    """The readings a window at a time, in file order."""
    arrays = [DiskArray(f, dt, n) for f, (_, dt) in zip(files, FIELDS, strict=True)]
    for a in range(0, n, window):
        yield pd.DataFrame({name: x.read(a, a + window)
                            for (name, _), x in zip(FIELDS, arrays, strict=True)})


def time_sorted(files: tuple[Path, Path, Path], n: int, out: Path, window: int
                ) -> tuple[Path, Path, Path]:
    """The `n` readings of `files` (t, value, source) sorted by time, ties in file order,
    written to `<out>.t`, `<out>.v`, `<out>.s` (the sort's runs spilled beside them)."""
    paths = tuple(Path(f"{out}.{name}") for name, _ in FIELDS)
    handles = [open(p, "wb") for p in paths]
    try:
        for block in sorted_blocks(_windows(files, n, window), _by_time, out.parent,
                                   run_rows=max(window, 1 << 10)):
            for (name, dt), fh in zip(FIELDS, handles, strict=True):
                fh.write(block[name].to_numpy(dt).tobytes())
    finally:
        for fh in handles:
            fh.close()
    return paths[0], paths[1], paths[2]
