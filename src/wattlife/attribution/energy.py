"""trace x events -> the phases table: which rank drives which device, coverage, and the choice
of integration or deconvolution per device (`attribute_energy`, pure: tables in, table out)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from ..contracts import (
    GPU,
    IDLE,
    PHASES_COLUMNS,
    RESIDUAL,
    UNATTRIBUTED,
    ContractError,
    device_kind,
    is_per_rank,
)
from .busy import idle_floors, warn_busy
from .deconvolve import choose_method, deconvolve, estimate_response, estimate_window
from .gaps import GAP_PERIODS, add_gap_columns, phase_coverage, sensor_gaps
from .node_rest import NODE_KIND, NodeSensor, add_node_rest, node_rows
from .response import SensorResponse
from .series import (
    DeviceSeries,
    SpilledSeries,
    device_series,
    idle_power,
    too_few_readings,
)
from .settle import SensorSettle, integrate_held, settle_columns
from .time_units import check_time_units
from .tree import clamp_events, phase_tree, timeline
from .tree_spill import AnyTree, tree_segments


@runtime_checkable
class EventsByRank(Protocol):
    """A run's events read one rank at a time (`rank_events.RankEvents`); `tree` and
    `only_idle` answer for a key of its phase map."""

    run_ids: list[str]

    def head(self) -> pd.DataFrame: ...

    def map_devices(self, cuda_to_nvml: list[int] | None,
                    rank_devices: dict[int, list[int]] | None
                    ) -> Mapping[tuple[str, str], pd.DataFrame]: ...

    def tree(self, key: tuple[str, str], where: str) -> AnyTree: ...

    def only_idle(self, key: tuple[str, str]) -> bool: ...

PROGRESS_MIN_READINGS = 2_000_000  # show a progress bar when a trace has more readings


def _progress(n_devices: int, n_readings: int, desc: str) -> Any:
    """A tqdm bar over devices for large traces (stderr; silent when small or not a terminal)."""
    from tqdm.auto import tqdm

    return tqdm(total=n_devices, desc=desc, unit="device",
                disable=n_readings < PROGRESS_MIN_READINGS or None)


def phase_map(events: pd.DataFrame, cuda_to_nvml: list[int] | None = None,
              rank_devices: dict[int, list[int]] | None = None
              ) -> dict[tuple[str, str], pd.DataFrame]:
    """Which rank's events each (host, device) takes: the GPU of local rank k is CUDA device k,
    i.e. NVML index cuda_to_nvml[k] (k itself without a mapping), or every GPU of
    `rank_devices[k]` (one process driving several); CPU/DRAM <- the lowest rank on the host (it
    drives the host's work)."""
    ev = events.copy()
    if "local_rank" not in ev.columns or ev["local_rank"].isna().any():
        ev["local_rank"] = ev.groupby("host")["rank"].rank(method="dense").astype(int) - 1
    out: dict[tuple[str, str], pd.DataFrame] = {}
    for host, g in ev.groupby("host"):
        for lr, gg in g.groupby("local_rank"):
            k = int(lr)
            if rank_devices is not None:
                for d in rank_devices.get(k, []):
                    out[(host, GPU.device(d))] = gg
                continue
            if cuda_to_nvml is not None and k >= len(cuda_to_nvml):
                raise ContractError(f"events: local rank {k} on {host} has no GPU in meta.json's "
                                    f"cuda_to_nvml {cuda_to_nvml}")
            out[(host, GPU.device(cuda_to_nvml[k] if cuda_to_nvml is not None else k))] = gg
        low = g[g["rank"] == g["rank"].min()]
        out[(host, "host")] = low
    return out


def _idle_events(series: DeviceSeries, run_id: str) -> pd.DataFrame:
    """One `idle` interval over the whole trace: a GPU that no rank used."""
    return pd.DataFrame({"run_id": [run_id], "host": [series.host], "rank": [-1], "phase": [IDLE],
                         "start_ns": [int(series.t_ns[0])], "end_ns": [int(series.t_ns[-1])],
                         "step": [np.nan], "items": [np.nan]})


def _rank_key(series: DeviceSeries, pmap: Mapping[tuple[str, str], pd.DataFrame]
              ) -> tuple[str, str] | None:
    """The phase map's key of the rank driving this device; None when no rank drives it."""
    per_rank = is_per_rank(series.device)
    key = (series.host, series.device if per_rank else "host")
    if key in pmap:
        return key
    hosts = {h for h, _ in pmap}
    if series.host not in hosts and len(hosts) == 1:
        # one-host run whose trace and events name the host differently (e.g. container names)
        only = next(iter(hosts))
        key = (only, series.device if per_rank else "host")
        if key in pmap or not per_rank:
            return key
    return None


def _events_for(series: DeviceSeries, pmap: Mapping[tuple[str, str], pd.DataFrame],
                events: pd.DataFrame) -> pd.DataFrame:
    """The events of the rank driving this device; a GPU no rank uses: one `idle` interval."""
    key = _rank_key(series, pmap)
    if key is not None:
        return pmap[key]
    if is_per_rank(series.device):
        return _idle_events(series, str(events["run_id"].iloc[0]) if len(events) else "run")
    return events.iloc[:0]


def _tree_for(s: DeviceSeries, pmap: Mapping[tuple[str, str], pd.DataFrame],
              events: pd.DataFrame, floors: dict[tuple[str, str], float], strict: bool,
              where: str) -> AnyTree:
    """The device's rank's phase tree; a rank whose phases are all `idle` warns of a busy
    GPU (`busy.warn_busy`) first. From a `RankEvents` (`tree`): built once a rank, its rows then
    let go (not held while the device is attributed)."""
    key = _rank_key(s, pmap)
    if key is not None and isinstance(pmap, EventsByRank):
        if pmap.only_idle(key):
            warn_busy(s, floors, strict, where)
        return pmap.tree(key, f"events of {s.host}/{s.device}")
    ev = _events_for(s, pmap, events)
    if len(ev) and (ev["phase"] == IDLE).all():
        warn_busy(s, floors, strict, where)
    return phase_tree(ev, where=f"events of {s.host}/{s.device}")


def _estimate_device(s: DeviceSeries, tree: AnyTree, method: str, window_s: float | None,
                     response: SensorResponse | str | None, n_boot: int,
                     settles: Mapping[str, SensorSettle] | None = None
                     ) -> tuple[pd.DataFrame, SensorResponse | None]:
    """One device's phases by the method asked for (`auto`: `choose_method`), and the sensor
    response deconvolution used (None when integrated; `settle.integrate_held`)."""
    m = method
    if m == "deconvolve" and s.power_w is None:
        warnings.warn(f"{s.device}: only an energy counter, integrating instead of deconvolving",
                      stacklevel=3)
        m = "integrate"
    segs = None  # the tree's segments, made once for the choice, the estimates and the fit
    if m == "auto":
        segs = tree_segments(tree, s) if s.power_w is not None else None
        m = choose_method(s, tree, window_s or s.spacing_s, segs)
    if m != "deconvolve":
        del segs
        return integrate_held(s, tree, settles), None
    segs = segs or tree_segments(tree, s)
    if response == "estimate":
        r = estimate_response(s, tree, segs=segs)
    elif isinstance(response, SensorResponse) and GPU.forms(s.device):
        r = response
    else:
        r = SensorResponse.boxcar(window_s or estimate_window(s, tree, segs=segs))
    return deconvolve(s, tree, n_boot=n_boot, response=r, segs=segs), r


def _label_device(df: pd.DataFrame, s: DeviceSeries, frac: pd.Series,
                  idle_window: tuple[int, int] | None) -> pd.DataFrame:
    """One device's phases with its coverage, names and source, and the idle split if asked."""
    df["covered_fraction"] = df["phase"].map(frac).where(df["phase"] != RESIDUAL)
    df.loc[df["phase"] == UNATTRIBUTED, "covered_fraction"] = 1.0
    df["device"], df["host"] = s.device, s.host
    df["device_kind"] = device_kind(s.device)
    df["source"] = s.source
    if idle_window is not None:
        p_idle = idle_power(s, *idle_window)
        df["idle_power_w"] = p_idle
        df["static_j"] = np.where(df["phase"] == RESIDUAL, 0.0, p_idle * df["time_s"])
        df["dynamic_j"] = df["energy_j"] - df["static_j"]
    return df


def _n_readings(series: Sequence[DeviceSeries]) -> int:
    """Readings of all series (a `chunked.SpilledTrace` counts them without loading any)."""
    n = getattr(series, "n_readings", None)
    return int(n) if n is not None else sum(len(x.t_ns) for x in series)


def _attribute_devices(series: Sequence[DeviceSeries],
                       pmap: Mapping[tuple[str, str], pd.DataFrame], events: pd.DataFrame,
                       floors: dict[tuple[str, str], float], method: str, window_s: float | None,
                       response: SensorResponse | str | None, n_boot: int,
                       idle_window: tuple[int, int] | None, strict: bool, where: str,
                       settles: Mapping[str, SensorSettle] | None = None,
                       nodes: dict[str, NodeSensor] | None = None,
                       node_periods: Mapping[str, float] | None = None
                       ) -> tuple[list[pd.DataFrame], dict[tuple[str, str], SensorResponse],
                                  list[str], list[str]]:
    """Each device's phases table, the sensor responses used ({(host, device): response}),
    the devices whose phases lie partly outside the trace's span ('host/device share (s)') and
    the devices with sensor gaps (`Gaps.describe`); each host's node series into `nodes`."""
    frames = []
    used: dict[tuple[str, str], SensorResponse] = {}
    uncovered: list[str] = []
    gapped: list[str] = []
    bar = _progress(len(series), _n_readings(series), "attribute")
    for s in series:
        tree = _tree_for(s, pmap, events, floors, strict, where)
        gaps = sensor_gaps(s)
        if gaps.total_s > 0:
            gapped.append(gaps.describe())
        frac, overall, outside_s = phase_coverage(s, tree, gaps)
        # within a reading spacing of the trace's ends is what any sampler leaves (it starts
        # and stops around the command): only more is worth a warning
        if overall < 1.0 - 1e-9 and not outside_s <= 2 * np.nan_to_num(s.spacing_s):
            uncovered.append(f"{s.host}/{s.device} {1 - overall:.1%} ({outside_s:.3f} s)")
        df, r = _estimate_device(s, tree, method, window_s, response, n_boot, settles)
        if r is not None:
            used[(s.host, s.device)] = r
        if nodes is not None and device_kind(s.device) == NODE_KIND:
            df = node_rows(df, s, tree, nodes, node_periods)
        frames.append(add_gap_columns(_label_device(df, s, frac, idle_window), gaps, tree))
        bar.update(1)
    bar.close()
    return frames, used, uncovered, gapped


def _warn_uncovered(uncovered: list[str], strict: bool, where: str) -> None:
    """Phases' time outside the trace's span: a warning naming each device's uncovered share (an
    error with `strict`)."""
    if uncovered:
        msg = (f"{where + ': ' if where else ''}part of the phases' time lies outside the trace's "
               f"span and is not attributed (uncovered share: {', '.join(uncovered)}); "
               "column covered_fraction gives each phase's covered share")
        if strict:
            raise ContractError(msg)
        warnings.warn(msg, stacklevel=3)


def _warn_gaps(gapped: list[str], where: str) -> None:
    """Sensor gaps: a warning naming each device's gaps, never bridged silently (`gaps`)."""
    if gapped:
        warnings.warn(f"{where + ': ' if where else ''}the readings stop for longer than "
                      f"{GAP_PERIODS} reading periods ({'; '.join(gapped)}); the energy there is "
                      "bridged, not read: the phases it touches carry gap_s, gap_energy_j, a "
                      "covered_fraction below 1 and a widened interval", stacklevel=3)


def _short_devices(short: pd.DataFrame, where: str) -> list[pd.DataFrame]:
    """Devices with fewer than 2 readings (`too_few_readings`): kept, flagged (one
    `unattributed` row, energy NaN, not 0 J, covered_fraction 0), with a warning naming them."""
    if not len(short):
        return []
    warnings.warn(f"{where + ': ' if where else ''}{len(short)} device(s) with fewer than 2 "
                  "readings, no energy can be integrated: "
                  f"{', '.join(f'{r.host}/{r.device}' for r in short.itertuples())}; each has "
                  "one `unattributed` row with energy NaN and covered_fraction 0", stacklevel=3)
    return [short.assign(phase=UNATTRIBUTED, device_kind=short["device"].map(device_kind),
                         energy_j=np.nan, energy_lo_j=np.nan, energy_hi_j=np.nan,
                         time_s=0.0, method="integrate", covered_fraction=0.0)]


def _refuse_no_device(short: pd.DataFrame, where: str | None) -> None:
    """No device could be attributed: say why (too few readings, or none at all)."""
    if len(short):
        raise ContractError(
            f"{where or 'trace'}: no device has the 2 readings an energy needs ("
            + ", ".join(f"{r.host}/{r.device}: {r.count} reading(s)"
                        for r in short.itertuples()) + ")")
    raise ContractError(f"{where or 'trace'}: no GPU, CPU or DRAM power/energy readings to "
                        "attribute")


def _prepare_events(trace: pd.DataFrame | SpilledSeries, events: pd.DataFrame | EventsByRank,
                    run_id: str | None, where: str, cuda_to_nvml: list[int] | None,
                    rank_devices: dict[int, list[int]] | None
                    ) -> tuple[str, pd.DataFrame, Mapping[tuple[str, str], pd.DataFrame]]:
    """(run id, the events' first rows for `_events_for`, the phase map): events checked and
    clamped, or a `EventsByRank`, whose ranks are read and clamped as devices ask for them."""
    if isinstance(events, pd.DataFrame):
        ids = events["run_id"].astype(str).unique() if len(events) else []
    else:
        ids = events.run_ids
    if run_id is None:
        run_id = ids[0] if len(ids) == 1 else "run"
    check_time_units(trace if isinstance(trace, pd.DataFrame) else
                     pd.DataFrame({"t_ns": np.zeros(0, np.int64)}),
                     events if isinstance(events, pd.DataFrame) else events.head())
    if not isinstance(events, pd.DataFrame):
        return run_id, events.head(), events.map_devices(cuda_to_nvml, rank_devices)
    events = clamp_events(timeline(events), where=where or "events")
    return run_id, events, phase_map(events, cuda_to_nvml, rank_devices)


def attribute_energy(trace: pd.DataFrame | SpilledSeries, events: pd.DataFrame | EventsByRank,
                     method: str = "auto",
                     window_s: float | None = None, run_id: str | None = None,
                     idle_window: tuple[int, int] | None = None,
                     n_boot: int = 200,
                     response: SensorResponse | str | None = None,
                     strict: bool = False, cuda_to_nvml: list[int] | None = None,
                     where: str = "", rank_devices: dict[int, list[int]] | None = None,
                     floor_window: tuple[int, int] | None = None,
                     settles: Mapping[str, SensorSettle] | None = None,
                     node_periods: Mapping[str, float] | None = None) -> pd.DataFrame:
    """trace x events -> phases table (contract columns plus host, window_ms, identified,
    covered_fraction, and, with an idle window, idle_power_w / static_j / dynamic_j).

    Phases' time outside the trace's span cannot be attributed: `covered_fraction` is the share
    of each phase's time inside it, and an uncovered share is a warning naming it (an error with
    `strict`). A GPU that no rank uses (`cuda_to_nvml`: CUDA ordinal -> NVML index, from
    meta.json) gets one `idle` phase; `rank_devices` (local rank -> GPU numbers) gives a rank
    several GPUs. An unclaimed GPU whose mean power is well above its idle floor (over
    `floor_window`, else the host's lowest GPU reading) is a warning naming it and its mean power
    (an error with `strict`), never silently idle. `where` names the inputs in messages.

    `response` shapes deconvolution's reading window: None, a boxcar (`window_s`, else
    estimated); a `SensorResponse`, the GPU sensor's weights (for GPUs; CPU and DRAM keep the
    boxcar); "estimate", weights estimated per device from the run (`estimate_response`). The
    responses used are in `out.attrs["sensor_responses"]` ({(host, device): SensorResponse}).

    `trace`: the table, or a `chunked.SpilledTrace` (a trace read in chunks, its timestamps
    checked as it was read); `events`: the table, or a `rank_events.RankEvents` (one rank's
    file at a time, each prepared as the table is): the same table either way.
    `settles` ({device: SensorSettle}): see `settle.integrate_held`. `node_periods` {host: s}:
    see `node_rest.add_node_rest` (a host with a `node` device also gets `node_rest` rows)."""
    if isinstance(response, str) and response != "estimate":
        raise ValueError(f"response must be a SensorResponse, 'estimate' or None, got {response!r}")
    if method not in ("auto", "integrate", "deconvolve"):
        raise ValueError(f"method must be auto, integrate or deconvolve, got {method!r}")
    run_id, events, pmap = _prepare_events(trace, events, run_id, where, cuda_to_nvml,
                                           rank_devices)
    series: Sequence[DeviceSeries] = (device_series(trace) if isinstance(trace, pd.DataFrame)
                                      else trace)
    floors = idle_floors(series, floor_window or idle_window)
    nodes: dict[str, NodeSensor] = {}
    # one BLAS thread for tall, narrow least squares (nnls on 200 k x 12: 0.07 CPU s, not 0.52)
    with threadpool_limits(limits=1, user_api="blas"):
        frames, used, uncovered, gapped = _attribute_devices(
            series, pmap, events, floors, method, window_s, response, n_boot, idle_window,
            strict, where, settles, nodes, node_periods)
    short = (too_few_readings(trace, series) if isinstance(trace, pd.DataFrame)
             else trace.short())
    if not frames:
        _refuse_no_device(short, where)
    _warn_uncovered(uncovered, strict, where)
    _warn_gaps(gapped, where)
    frames += _short_devices(short, where)
    out = add_node_rest(settle_columns(pd.concat(frames, ignore_index=True), settles), nodes)
    return _finish(out, run_id, used)


def _finish(out: pd.DataFrame, run_id: str, used: dict[Any, SensorResponse]) -> pd.DataFrame:
    """The phases table's run id, mean power, column order and sensor responses used."""
    out["run_id"] = run_id
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mean_power_w"] = np.where(out["time_s"] > 0, out["energy_j"] / out["time_s"], np.nan)
    out = out[PHASES_COLUMNS + [c for c in out.columns if c not in PHASES_COLUMNS]]
    out.attrs["sensor_responses"] = used
    return out
