"""Figures, each drawn from one table (never from raw state, never by running an analysis), PNG
and PDF, one style, one module per study: `lifecycle` (figs. 1-3), `preparation` (figs. 4-5),
`pfi` (figs. 6-7, PFI against the published values), `allocation` (fig. 8, the sensitivity grid),
`waiting` (fig. 9), `reference` (the committed reference results); `common` holds the style and
the source words, `draw` draws every figure of a folder of tables.

Every figure carries the sources of its numbers: a label says when a value is simulated (`sim`)
or estimated (`estimate`), never letting them pass for measurements.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before any submodule imports pyplot: figures are files, never windows

from .allocation import fig_allocation, fig_sensitivity, worse_than_equal_note  # noqa: E402
from .common import (  # noqa: E402
    PHASE_ORDER,
    source_note,
    source_tag,
    source_words,
    style,
)
from .draw import draw_all  # noqa: E402
from .lifecycle import effect_caption, fig_device_share, fig_phase_energy, fig_storage_checkpoint  # noqa: E402
from .pfi import fig_curves, fig_pfi, fig_pfi_published  # noqa: E402
from .preparation import fig_downloads, fig_staging  # noqa: E402
from .reference import draw_reference, fig_h200_attribution, fig_h200_sampler  # noqa: E402
from .waiting import fig_waiting  # noqa: E402

__all__ = ["PHASE_ORDER", "draw_all", "draw_reference", "effect_caption",
           "fig_allocation", "fig_curves", "fig_device_share", "fig_downloads",
           "fig_h200_attribution", "fig_h200_sampler", "fig_phase_energy", "fig_pfi",
           "fig_pfi_published", "fig_sensitivity", "fig_staging", "fig_storage_checkpoint",
           "fig_waiting", "source_note", "source_tag", "source_words", "style",
           "worse_than_equal_note"]
