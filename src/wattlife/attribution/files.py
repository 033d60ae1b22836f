"""The file-level API: trace + events + meta.json -> phases.csv (`attribute_files`), with the
intervals `wattlife run` itself knows (`wrapper_events`) and the GPU mapping it recorded."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd

from ..contracts import (
    META_FILE,
    PHASES_COLUMNS,
    SUMMARY_FILE,
    ContractError,
    RunMeta,
    StreamUnreadable,
    read_events,
    read_meta,
    read_trace,
    refuse_overwrite,
    write_table,
)
from ..errors import InputError
from ..pathlock import one_writer
from . import rank_events, windowed
from .chunked import SpilledTrace
from .energy import attribute_energy
from .node_rest import node_periods
from .prepare_windows import stream_file
from .rank_events import RankEvents
from .rank_split import RankPart
from .response import SensorResponse
from .settle import settle_by_device
from .time_units import check_time_units
from .wrappers import prepared_frame


def _rank_numbers(meta: RunMeta) -> list[tuple[int, int]] | None:
    """(local rank, N of `gpu<N>`) per entry of meta.json's `gpus` (`RunMeta.gpu_identities`);
    None when it has no entries. An entry without both is a ContractError."""
    ids = meta.gpu_identities
    if not ids:
        return None
    pairs = [(g.local_rank, g.number) for g in ids]
    if any(r is None or n is None for r, n in pairs):
        raise ContractError(f"meta.json: gpus entries need device 'gpu<N>' and local_rank, "
                            f"got {meta.gpus!r}")
    return [(int(r), int(n)) for r, n in pairs if r is not None and n is not None]


def gpu_mapping(meta: RunMeta) -> list[int] | None:
    """Local rank -> the GPU's number in the trace's device names (`gpu<N>`), from meta.json.

    `wattlife run` records `gpus` (`contracts.gpus.GpuIdentity`: device, local rank, visible
    ordinal, vendor index, ...); its trace names each GPU by visible (CUDA) ordinal, so rank k
    drives `device` of the entry whose local_rank is k. An explicit `cuda_to_nvml` list (top
    level or under `gpu_mapping`) is for traces named by NVML index. None if meta.json has
    neither (then rank k drives gpu k)."""
    pairs = _rank_numbers(meta)
    if pairs is not None:
        by_rank = dict(pairs)
        ranks = [r for r, _ in pairs]
        if len(set(ranks)) == len(ranks) and sorted(by_rank) == list(range(len(by_rank))):
            return [by_rank[k] for k in range(len(by_rank))]
    m = meta.get("cuda_to_nvml")
    if m is None and isinstance(meta.get("gpu_mapping"), dict):
        m = meta.get("gpu_mapping").get("cuda_to_nvml")
    if m is None:
        return None
    if not isinstance(m, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in m):
        raise ContractError(f"meta.json: cuda_to_nvml must be a list of NVML indices (non-negative "
                            f"integers), got {m!r}")
    return list(m)


def rank_devices(meta: RunMeta) -> dict[int, list[int]] | None:
    """Local rank -> every GPU it drives (`gpu<N>` numbers), when meta.json's `gpus` names a
    local rank for more than one device (one process driving several GPUs: `device_map="auto"`,
    pipeline or tensor parallel in one process; `wattlife run` records it so for a single
    process). None otherwise (one GPU per rank: `gpu_mapping`)."""
    out: dict[int, list[int]] = {}
    for r, n in _rank_numbers(meta) or []:
        out.setdefault(r, []).append(n)
    return out if any(len(v) > 1 for v in out.values()) else None


def run_compiled(trace: str | Path) -> bool:
    """Whether the run's summary (`work/summary.json`, else `summary.json`, beside the trace)
    says the model was compiled (`compile: true`); False when there is no summary."""
    import json

    for p in (Path(trace).parent / SUMMARY_FILE, Path(trace).with_name("summary.json")):
        if p.exists():
            try:
                return bool(json.loads(p.read_text()).get("compile"))
            except (json.JSONDecodeError, AttributeError):
                return False
    return False


def attribute_files(trace: str | Path, events: str | Path, out: str | Path, method: str = "auto",
                    window_ms: float | None = None, idle_split: bool = False,
                    n_boot: int = 200, sensor_response: str = "boxcar",
                    strict: bool = False, warmup_labels: bool = True) -> pd.DataFrame:
    """Read trace, events and meta.json beside the trace; write phases.csv (refused if it is
    one of the inputs). `strict`: phases' time outside the trace is an error, not a warning (and
    so is a busy GPU that no rank claims).

    `warmup_labels` (default): the events as the phase tables read them (`warmup.label_warmup`:
    `compile` and `warmup` rows of their own, forward/backward etc. over the post-warm-up steps; a
    compiled run, per its summary, without `compile` rows has its first forward and backward
    read as `compile`). False: the phase names as recorded.

    `sensor_response`: "boxcar", "estimate" (the estimated weights are written beside the output
    as `<stem>.<host>.<device>.sensor_response.csv`, reusable on other runs), or such a CSV."""
    meta_path = Path(trace).with_name(META_FILE)  # read too: never written over
    refuse_overwrite(out, [trace, events, meta_path] + ([sensor_response] if sensor_response not in
                                                         ("boxcar", "estimate") else []))
    with one_writer(out, "attribute"):  # one attribution per output at a time
        return _attribute_files(trace, events, out, method, window_ms, idle_split, n_boot,
                                sensor_response, strict, meta_path, warmup_labels)


def _attribute_files(trace: str | Path, events: str | Path, out: str | Path, method: str,
                     window_ms: float | None, idle_split: bool, n_boot: int,
                     sensor_response: str, strict: bool, meta_path: Path,
                     warmup_labels: bool) -> pd.DataFrame:
    """`attribute_files` once its output is locked."""
    response: SensorResponse | str | None = None
    if sensor_response == "estimate":
        response = "estimate"
    elif sensor_response != "boxcar":
        response = SensorResponse.from_csv(sensor_response)
    with ExitStack() as stack:
        trace_in = _open_trace(trace, out, stack)
        return _attribute_read(trace_in, trace, events, out, method, window_ms, idle_split,
                               n_boot, response, strict, meta_path, warmup_labels)


def _open_trace(trace: str | Path, out: str | Path, stack: ExitStack
                ) -> pd.DataFrame | SpilledTrace:
    """The trace read in chunks, its devices' series spilled beside `out` (removed on exit of
    `stack`) and read from there a window at a time (`windowed.WINDOW` readings); the
    in-memory table where the streaming parser cannot take it (`contracts.StreamUnreadable`:
    the contract's reader decides)."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    try:
        return stack.enter_context(SpilledTrace(trace, spill_dir=Path(out).parent,
                                                window=windowed.WINDOW))
    except StreamUnreadable:
        return read_trace(trace)


def _streamed(path: Path | RankPart, meta: RunMeta, has_meta: bool, warmup_labels: bool,
              compiled: bool) -> Iterator[pd.DataFrame]:
    """A rank's file prepared as `prepared_frame` prepares it, a start-ordered window at a time
    (`prepare_windows.stream_file`; its sort's sizes from `rank_events.STREAM_SORT`)."""
    return stream_file(path, meta, has_meta, warmup_labels, compiled, None, None,
                       **rank_events.STREAM_SORT)


def _events_in(trace_in: pd.DataFrame | SpilledTrace, trace: str | Path, events: str | Path,
               meta: RunMeta, has_meta: bool, warmup_labels: bool,
               spill_dir: Path) -> pd.DataFrame | RankEvents:
    """The run's events prepared (`prepared_frame`): for a trace read in chunks, one rank's file at
    a time where the files allow it (`RankEvents`), else all at once."""
    compiled = run_compiled(trace)
    if not isinstance(trace_in, pd.DataFrame):
        ranks = RankEvents.open(events, lambda ev, any_compile: prepared_frame(
            ev, meta, has_meta, warmup_labels, compiled and not any_compile), f"{trace} x {events}",
            lambda path, any_compile: _streamed(path, meta, has_meta, warmup_labels,
                                                compiled and not any_compile),
            spill_dir=spill_dir)
        if ranks is not None:
            return ranks
    events_df = read_events(events, lines=True)
    if not len(events_df):
        warnings.warn(f"{events}: no phases (header only): the command's time is `unattributed` "
                      "(the idle baseline of meta.json, where there is one, its own row; "
                      "without meta.json the GPUs' time is `idle`)", stacklevel=4)
    check_time_units(trace_in if isinstance(trace_in, pd.DataFrame) else  # checked as read
                     pd.DataFrame({"t_ns": np.zeros(0, np.int64)}), events_df, str(trace),
                     str(events))
    return prepared_frame(events_df, meta, has_meta, warmup_labels, compiled)


def _attribute_read(trace_in: pd.DataFrame | SpilledTrace, trace: str | Path,
                    events: str | Path, out: str | Path, method: str, window_ms: float | None,
                    idle_split: bool, n_boot: int, response: SensorResponse | str | None,
                    strict: bool, meta_path: Path, warmup_labels: bool) -> pd.DataFrame:
    """`_attribute_files` once the trace is open."""
    has_meta = meta_path.exists()
    meta = read_meta(meta_path) if has_meta else RunMeta()
    idle = None
    if idle_split:
        idle = meta.idle_window
        if idle is None:
            raise InputError(f"--idle-split needs an idle baseline window in {meta_path} "
                             "(sampler.idle_baseline_s > 0)")
    window_s = window_ms / 1000.0 if window_ms else None  # None: estimated per device
    events_df = _events_in(trace_in, trace, events, meta, has_meta, warmup_labels,
                           Path(out).parent)  # a long rank's tree spilled beside the output
    try:
        df = attribute_energy(trace_in, events_df, method, window_s, meta.run_id, idle, n_boot,
                              response, strict=strict, cuda_to_nvml=gpu_mapping(meta),
                              where=f"{trace} x {events}", rank_devices=rank_devices(meta),
                              floor_window=meta.idle_window,
                              settles=settle_by_device(meta.gpu_identities, meta.gpu_model),
                              node_periods=node_periods(meta.sampler, meta.host))
    finally:
        if isinstance(events_df, RankEvents):
            events_df.close()
    write_table(df, out, PHASES_COLUMNS)
    out = Path(out)
    for (host, device), r in df.attrs["sensor_responses"].items():
        if r.estimated:
            r.to_csv(out.with_name(f"{out.stem}.{host}.{device}.sensor_response.csv"))
    return df
