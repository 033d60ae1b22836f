"""Energy attribution: trace x events -> per-phase energy (the `phases` contract).

One job per module, pure functions on tables except `files`:

- `series`: each device's readings as a cumulative-energy series (`device_series`);
- `chunked`, `windowed`: a trace read in chunks and spilled to disk per device, each device's
  series then read from there a window of readings at a time (long traces, issue 43);
- `tree`: one rank's phase tree, the nesting rule (`nest`, shared with `wattlife check`),
  overlap clamping, exclusive time and segments;
- `start_order`: one rank's events from the markers' end order into the tree's start order by
  an external sort (sorted runs spilled, merged k ways; long traces, issue 43);
- `tree_windows`: that stream's phase tree a window of events at a time, the ancestors open at
  a window's edge carried, its segments on the window those of the whole tree;
- `gaps`: a device's sensor gaps, never bridged silently (coverage, widened interval);
- `integrate`: per-phase energy by integration (the package's one energy integration);
- `response`: the sensor response (lag weights) and its CSV;
- `deconvolve`: per-phase mean power by deconvolution, with its estimators (window, response,
  method choice);
- `energy`: `attribute_energy`, which routes each device to its rank's phases and picks the
  method;
- `files`: `attribute_files`, trace + events + meta.json -> phases.csv.

docs/FORMULAS.md gives the formulas.
"""

from ..contracts import IDLE, RESIDUAL, WRAPPER_PHASES
from .deconvolve import choose_method, deconvolve, estimate_response, estimate_window
from .energy import attribute_energy
from .files import attribute_files, gpu_mapping
from .gaps import GAP_PERIODS, MAX_INVENTED_SHARE, Gaps, sensor_gaps
from .integrate import integrate, interval_energy
from .response import SensorResponse
from .series import DeviceSeries, device_series, idle_power
from .time_units import check_time_units, time_unit
from .tree import (
    OVERLAP_TOL_NS,
    PhaseTree,
    clamp_events,
    nest,
    phase_tree,
    resolve_overlaps,
    timeline,
)
from .wrappers import wrapper_events

__all__ = [
    "GAP_PERIODS", "IDLE", "MAX_INVENTED_SHARE", "Gaps",
    "OVERLAP_TOL_NS", "RESIDUAL", "WRAPPER_PHASES", "DeviceSeries",
    "PhaseTree", "SensorResponse", "attribute_energy", "attribute_files", "check_time_units",
    "choose_method", "clamp_events", "deconvolve", "device_series", "estimate_response",
    "estimate_window", "gpu_mapping", "idle_power", "integrate", "interval_energy", "nest",
    "phase_tree", "resolve_overlaps", "sensor_gaps", "time_unit", "timeline", "wrapper_events",
]
