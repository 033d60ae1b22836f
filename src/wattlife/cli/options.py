"""Option types of the `wattlife` parsers and the guard that refuses an output equal to an input."""

from __future__ import annotations

import argparse
from pathlib import Path


def floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def positive_ms(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds > 0, got {text!r}")
    return v


def nonnegative_s(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (0 <= v < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return v


def sha256_digest(text: str) -> str:
    """A sha256 digest: 64 hexadecimal characters (checked before any download starts)."""
    import re

    if not re.fullmatch(r"[0-9a-fA-F]{64}", text.strip()):
        raise argparse.ArgumentTypeError(f"expected 64 hexadecimal characters, got {text!r} "
                                         f"({len(text.strip())} characters)")
    return text.strip().lower()


# Per command: (options naming outputs, options naming inputs). An output equal to an input is
# refused before anything runs, so raw data is never overwritten.
GUARDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "run": (("trace", "events", "meta"), ("config",)),
    "launch-node": (("trace", "events", "meta"), ("config",)),
    "attribute": (("output",), ("trace", "events", "sensor_response")),
    "pfi": (("output",), ("curves", "config")),
    "allocate": (("output",), ("curves", "pfi")),
    "predict": (("output",), ("curves", "pfi")),
    "calibrate-sim": (("output",), ("curves", "published")),
    "aggregate-curves": (("output",), ("curves",)),
    "merge-nodes": (("trace", "events_out"), ("traces", "events")),
    "aggregate": (("output",), ("phases",)),
    "prepare-tables": (("output",), ("config", "records", "phase_summary", "cell_summaries",
                                     "phases", "cell_metas")),
    "fetch": (("output", "record"), ("path",)),
    "upload": (("record", "copy"), ("src", "from_summary")),
    "sweep": (("output",), ("config",)),
    "pfi-sweep": (("output",), ("config",)),
    "figures": (("output",), ("tables",)),
    "gen-catalogue": (("output",), ("config",)),
}


def guard_outputs(a: argparse.Namespace) -> None:
    from ..contracts import refuse_overwrite

    outs, ins = GUARDS.get(a.command, ((), ()))
    inputs: list[str | Path] = []
    for name in ins:
        v = getattr(a, name, None)
        inputs += [str(x) for x in v] if isinstance(v, list) else [str(v)] if v else []
    for name in outs:
        v = getattr(a, name, None)
        if v:
            refuse_overwrite(v, inputs)
            inputs.append(v)  # two outputs of one command must differ too
    if a.command == "merge-nodes" and a.trace and a.events_out:
        refuse_overwrite(a.events_out, [a.trace])
