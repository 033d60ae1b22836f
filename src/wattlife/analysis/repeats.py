"""Run-to-run statistics of the execution matrix: n, mean and a 95 % t interval across repeats,
Welch's interval of a difference of two cells, and energy per item of the per-step phases.

Each repeat of a cell is one independent run. With n repeats of a cell the interval of its mean
is the t interval `mean ± t(0.975, n − 1) · sd / √n` (`INTERVAL`); an effect (cell minus the
baseline cell) is a difference of two independent samples of repeats with Welch's interval
(`EFFECT_INTERVAL`). Neither is defined with a single repeat: the columns are NaN then (never
invented), and `significant` is empty. These intervals say nothing of the per-run measurement
interval of attribution (`energy_lo_j`, `energy_hi_j`), which the tables carry in their own
columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

#: the across-repeat interval of a mean, as named in the tables' `interval` column
INTERVAL = "t95 across repeats"
#: the interval of a difference of two cells' means (`effect_interval` column)
EFFECT_INTERVAL = "Welch t95 across repeats"
#: phases marked inside every training step: their energy is also given per item trained
#: the unit of per-item energy by the throughput's item (`images/s`, `tokens/s`): (label, items)
# `items`: one's own script's `step(items=...)`, whatever it counts
ITEM_UNITS = {"images": ("J/image", 1.0), "tokens": ("J/1k tokens", 1000.0),
              "items": ("J/item", 1.0)}


def t_interval(values: Sequence[float] | np.ndarray) -> tuple[int, float, float, float, float]:
    """(n, mean, sd, lo, hi) of the values' mean, 95 % t interval; sd, lo, hi are NaN for n < 2
    (and for NaN values, which are left out)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return n, mean, math.nan, math.nan, math.nan
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return n, mean, sd, mean - half, mean + half


def welch_interval(a: Sequence[float] | np.ndarray,
                   b: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """(mean(a) − mean(b), lo, hi): Welch's 95 % interval of the difference of two independent
    samples; lo, hi NaN when either has fewer than 2 values. Both without spread (sd 0): the
    interval is the difference itself."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if len(x) == 0 or len(y) == 0:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - y.mean())
    if len(x) < 2 or len(y) < 2:
        return diff, math.nan, math.nan
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))
    half = float(stats.t.ppf(0.975, dof)) * se
    return diff, diff - half, diff + half


def significant(lo: float, hi: float) -> bool | None:
    """Whether a 95 % interval excludes zero; None without an interval (n = 1)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return bool(lo > 0 or hi < 0)


def item_unit(throughput_unit: object) -> tuple[str, float]:
    """('J/image', 1) or ('J/1k tokens', 1000) from a throughput unit ('images/s (all ranks)');
    ('', NaN) for an unknown or missing one."""
    word = str(throughput_unit).split("/")[0].strip()
    return ITEM_UNITS.get(word, ("", math.nan))


def interval_columns(values: pd.Series, prefix: str, unit: str) -> dict[str, float]:
    """{`<prefix>` mean, `<prefix>_sd`, `<prefix>_lo`, `<prefix>_hi`} (+ unit suffix) of one
    cell's repeats: e.g. prefix `energy`, unit `_j` -> energy_j, energy_sd_j, repeat_lo_j…"""
    _, mean, sd, lo, hi = t_interval(values.to_numpy(float))
    return {f"{prefix}{unit}": mean, f"{prefix}_sd{unit}": sd,
            f"{prefix}_repeat_lo{unit}": lo, f"{prefix}_repeat_hi{unit}": hi}
