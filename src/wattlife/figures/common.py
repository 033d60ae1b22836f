"""What every figure shares: one style, the words for a table's sources (a label says when a value
is simulated (`sim`) or estimated (`estimate`), never letting them pass for measurements), the
lifecycle phases' order and colours, and saving as PNG and PDF."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ..contracts import COMPILE, LIFECYCLE_PHASES, UNATTRIBUTED, WARMUP

SOURCE_WORDS = {"sim": "SIMULATED", "estimate": "ESTIMATED", "measured": "measured",
                "simulated/calibrated": "SIMULATED (calibrated to published PFIs)",
                "nvml-samples": "measured (NVML samples)",
                "nvml-counter": "measured (NVML counter)",
                "nvml-poll": "measured (NVML)", "rapl": "measured (RAPL)"}
PHASE_ORDER = (["idle_baseline", "process_startup"] + LIFECYCLE_PHASES[:3] + ["tokenize"]
               + LIFECYCLE_PHASES[3:] + [COMPILE, WARMUP, "step", "process_exit", UNATTRIBUTED])
_PALETTE = dict(zip(PHASE_ORDER, sns.color_palette("tab20", len(PHASE_ORDER)), strict=True))


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


def _save(fig: plt.Figure, out: Path) -> list[Path]:
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.with_suffix(".png"), out.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


def _phase_sort(phases: pd.Series) -> list[str]:
    known = [p for p in PHASE_ORDER if p in set(phases)]
    return known + sorted(set(phases) - set(known))
