"""A GPU that no rank claims: its idle floor, and a warning (an error with `strict`) when its
mean power says it was busy, never silently labelled idle (`energy.attribute_energy`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ..contracts import GPU, ContractError
from .series import DeviceSeries, idle_power


def unclaimed_busy(series: DeviceSeries, floor_w: float) -> str | None:
    """A GPU no rank claims whose mean power is well above its idle floor (mean >= floor +
    max(30 W, 25 % of the floor)): the message naming it and its mean power, else None."""
    p = series.power_w
    if p is None or len(p) == 0 or not np.isfinite(floor_w):
        return None
    mean = series.p_mean()
    if mean < floor_w + max(30.0, 0.25 * floor_w):
        return None
    return (f"{series.host}/{series.device}: no rank claims this GPU, but its mean power "
            f"{mean:.0f} W is well above its idle floor {floor_w:.0f} W (a process driving "
            "several GPUs? meta.json's gpus can give one local rank several devices); its "
            "energy is labelled idle")


def idle_floors(series: Sequence[DeviceSeries], window: tuple[int, int] | None
                 ) -> dict[tuple[str, str], float]:
    """Each GPU's idle floor: its mean power over the idle baseline `window`, else the lowest
    power reading of any GPU on its host (GPUs of one host idle alike). One pass over `series`
    (a `SpilledSeries` loads each device once)."""
    low: dict[str, float] = {}
    own = {}
    for s in series:
        if not GPU.forms(s.device) or s.power_w is None:
            continue
        if len(s.power_w):
            low[s.host] = min(low.get(s.host, np.inf), s.p_min())
        own[(s.host, s.device)] = idle_power(s, *window) if window is not None else np.nan
    return {k: f if np.isfinite(f) else low.get(k[0], np.nan) for k, f in own.items()}


def warn_busy(s: DeviceSeries, floors: dict[tuple[str, str], float], strict: bool,
               where: str) -> None:
    """A busy GPU no rank claimed (`unclaimed_busy`): a warning (`strict`: an error)."""
    busy = unclaimed_busy(s, floors.get((s.host, s.device), np.nan))
    if busy is not None:
        if strict:
            raise ContractError(f"{where + ': ' if where else ''}{busy}")
        # stacklevel: attribute_energy's caller (through its _attribute_devices and _tree_for)
        warnings.warn(f"{where + ': ' if where else ''}{busy}", stacklevel=5)
