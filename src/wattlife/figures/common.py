"""What every figure shares: one style, the words for a table's sources (a label says when a value
is simulated (`sim`) or estimated (`estimate`), never letting them pass for measurements), the
lifecycle phases' order and colours, reading a table (`read_figure_table`), seeded jitter, the
`NothingToDraw` a figure raises for a table with nothing it can show, and saving as PNG and PDF
(byte-stable: the same tables give the same files)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from ..contracts import DRAWN_PHASES, PHASES
from ..contracts.sources import SOURCE_WORDS
from ..errors import InputError

#: the phases' order in the figures: the phase registry's drawn phases (`contracts.PHASES`)
PHASE_ORDER = list(DRAWN_PHASES)
# tab20's 20 colours, then dark ones of tab20b: one colour a phase for today's 25 (tab20 alone
# would repeat its first colours for the last phases); then the rest of tab20b and tab20c, and
# round again: a colour for any number of phases, the same one on every run
_COLOURS = sns.color_palette("tab20", 20) + [sns.color_palette("tab20b", 20)[i]
                                             for i in (0, 4, 8, 12, 16)]
_COLOURS += ([c for i, c in enumerate(sns.color_palette("tab20b", 20)) if i % 4]
             + sns.color_palette("tab20c", 20))


def _phase_colours() -> dict[str, tuple[float, float, float]]:
    """Each drawn phase's colour: its own (`PhaseSpec.colour`), else the palette's at its place
    in the order (cycling)."""
    specs = [s for s in PHASES if s.drawn]
    return {s.name: to_rgb(s.colour) if s.colour else tuple(_COLOURS[i % len(_COLOURS)])
            for i, s in enumerate(specs)}


PHASE_PALETTE = _phase_colours()
#: text columns of the run-level tables that may be empty (a run without a cell: no storage, no
#: checkpoint); read as text, empty as "", never as a float NaN column
TEXT_COLUMNS = ("workload", "storage", "checkpoint", "phase", "device_kind")
#: the seed of every random jitter of points: redrawing the same tables gives the same figure
JITTER_SEED = 0


class NothingToDraw(InputError):
    """A figure's table holds nothing the figure can show (the message says what is lacking);
    `draw_all` skips that figure with one line naming it and the table."""


def read_figure_table(path: Path) -> pd.DataFrame:
    """A table as the figures read it: `TEXT_COLUMNS` as text with "" where empty (pandas would
    read a column that is empty in every row as float NaN, and `+` of text and NaN fails)."""
    text = {c: str for c in TEXT_COLUMNS}
    df = pd.read_csv(path, dtype=text)
    for col in TEXT_COLUMNS:
        if col in df.columns:
            df[col] = df[col].fillna("")
    return df


@contextmanager
def seeded_jitter(seed: int = JITTER_SEED) -> Iterator[None]:
    """numpy's global random state seeded for the block, the caller's state restored after:
    seaborn's strip plots jitter their points with `np.random`, so a figure drawn inside this
    block is the same on every redraw."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                         "axes.titleweight": "bold", "legend.frameon": False})


def _sources(values: pd.Series) -> list[str]:
    """Distinct sources in a column whose cells may list several ('estimate,sim')."""
    return sorted(set(",".join(values.astype(str)).split(",")))


def _word(src: str, long: bool = False) -> str:
    w = SOURCE_WORDS.get(src, src)
    return f"{w} ({src})" if long else w.split(" (")[0]


def source_note(df: pd.DataFrame, by: str | None = "device_kind") -> str:
    """'GPU: SIMULATED (sim) · CPU: ESTIMATED (estimate)' from a table's source column."""
    if "source" not in df.columns:
        return "source unknown"
    groups = df.groupby(by)["source"] if by and by in df.columns else [("data", df["source"])]
    return " · ".join(f"{str(k).upper()}: " + ", ".join(_word(x, True) for x in _sources(s))
                      for k, s in groups)


def source_words(df: pd.DataFrame, by: str = "device_kind") -> str:
    """Short axis-label form: 'GPU SIMULATED, CPU ESTIMATED' (measured sources are named too)."""
    if "source" not in df.columns or by not in df.columns:
        return ""
    return ", ".join(f"{str(k).upper()} " + "/".join(_word(x) for x in _sources(s))
                     for k, s in df.groupby(by)["source"])


def source_tag(df: pd.DataFrame) -> str:
    """'(SIMULATED)', '(measured)', '(ESTIMATED, SIMULATED)' from a table's source column."""
    if "source" not in df.columns:
        return "(source unknown)"
    return "(" + ", ".join(_word(x) for x in _sources(df["source"])) + ")"


def save_figure(fig: Figure, out: Path) -> list[Path]:
    """The figure as `out`.png and `out`.pdf; the PDF without its creation date, so that the same
    tables give byte-identical files (the PNG carries no date)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.with_suffix(".png"), out.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    plt.close(fig)
    return paths


def phase_sort(phases: pd.Series) -> list[str]:
    known = [p for p in PHASE_ORDER if p in set(phases)]
    return known + sorted(set(phases) - set(known))
