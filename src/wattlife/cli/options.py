"""The `wattlife` options: their types, the guard that refuses an output equal to an input, and
their range checks at the edge, before a command runs (issue #29).

`RANGES` gives every numeric option of every command its accepted range; `check_options` refuses
a value outside it (NaN, infinite, negative, absurdly large) with one line naming the option and
the range, and checks the few options whose form argparse cannot express (`pfi --compare`).
`OneLineParser` makes argparse's own errors (`--bootstrap abc`) one line too."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

from ..errors import InputError


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


SEED = (0, 2**32 - 1, "a seed")
# (command, option dest) -> (lowest, highest, what); both ends accepted. A float range whose
# lowest is 0 but 0 itself is refused is written with a tiny positive lowest.
POSITIVE = 1e-9
RANGES: dict[tuple[str, str], tuple[float, float, str]] = {
    ("run", "interval_ms"): (POSITIVE, 3_600_000, "milliseconds"),
    ("run", "idle_s"): (0, 86_400, "seconds"),
    ("attribute", "sensor_window_ms"): (POSITIVE, 3_600_000, "milliseconds"),
    ("attribute", "bootstrap"): (2, 100_000, "bootstrap replicates"),
    ("merge-nodes", "warn_ms"): (0, 3_600_000, "milliseconds"),
    ("launch-node", "cap"): (POSITIVE, 100_000, "watts"),
    ("check", "max_rows"): (0, 1_000_000, "rows"),
    ("gen-images", "classes"): (1, 100_000, "classes"),
    ("gen-images", "train_per_class"): (1, 1_000_000, "images"),
    ("gen-images", "val_per_class"): (0, 1_000_000, "images"),
    ("gen-images", "size"): (8, 8192, "pixels"),
    ("gen-images", "seed"): SEED,
    ("gen-images", "workers"): (1, 1024, "processes"),
    ("gen-text", "words"): (1, 10**10, "words"),
    ("gen-text", "seed"): SEED,
    ("fetch", "retries"): (0, 1000, "retries"),
    ("fetch", "rate_mbps"): (POSITIVE, 10**7, "Mbit/s"),
    ("fetch", "transfers_at_once"): (0, 100_000, "transfers (0: no limit)"),
    ("upload", "rate_mbps"): (POSITIVE, 10**7, "Mbit/s"),
    ("upload", "transfers_at_once"): (0, 100_000, "transfers (0: no limit)"),
    ("pfi-sweep", "cap"): (POSITIVE, 100_000, "watts"),
    ("aggregate-curves", "caps"): (POSITIVE, 100_000, "watts"),
    ("pfi", "grid"): (POSITIVE, 100_000, "watts"),
    ("pfi", "subgrid"): (POSITIVE, 100_000, "watts"),
    ("pfi", "mc"): (0, 10**7, "Monte Carlo draws (0: none)"),
    ("pfi", "seed"): SEED,
    ("allocate", "cuts"): (0, 0.99, "fractions of the power cut"),
    ("allocate", "workloads"): (1, 10**6, "workloads"),
    ("allocate", "jobs"): (1, 10**5, "jobs per workload"),
    ("allocate", "seed"): SEED,
    ("pfi-study", "cuts"): (0, 0.99, "fractions of the power cut"),
    ("pfi-study", "workloads"): (1, 10**6, "workloads"),
    ("pfi-study", "jobs"): (1, 10**5, "jobs per workload"),
    ("pfi-study", "seed"): SEED,
    ("pfi-study", "sensitivity_workloads"): (0, 10**6, "workloads (0: no sensitivity grid)"),
    ("slurm-orphans", "poll_s"): (POSITIVE, 86_400, "seconds"),
    ("measure", "poll_s"): (POSITIVE, 86_400, "seconds"),
    ("attempt", "poll_s"): (POSITIVE, 86_400, "seconds"),
    ("calibrate-sim", "tdp"): (POSITIVE, 100_000, "watts"),
    ("calibrate-sim", "noise"): (0, 1, "relative noise"),
    ("calibrate-sim", "seed"): SEED,
    ("bench", "scale"): (POSITIVE, 100, "fraction of the full size"),
    ("cells", "transfers"): (1, 100_000, "transfers at once (the run's --resources transfers=N)"),
    ("node-emulator", "period_ms"): (POSITIVE, 3_600_000, "milliseconds"),
    ("node-emulator", "base_w"): (0, 100_000, "watts"),
    ("node-emulator", "disk_w_per_mbps"): (0, 1000, "watts per MB/s"),
    ("node-emulator", "net_w_per_mbps"): (0, 1000, "watts per MB/s"),
    ("node-emulator", "cpu_idle_w"): (0, 100_000, "watts"),
    ("node-emulator", "cpu_max_w"): (0, 100_000, "watts"),
    ("node-emulator", "gpus"): (0, 1024, "GPUs"),
    ("node-emulator", "mem_share"): (0, 1, "a share"),
    ("node-emulator", "cap_w"): (POSITIVE, 100_000, "watts"),
    ("node-emulator", "parent"): (1, 2**22, "a process id"),
}


def _range_text(lo: float, hi: float, what: str) -> str:
    low = "> 0" if lo == POSITIVE else f">= {lo:g}"
    return f"{what}, {low} and <= {hi:g}"


def option_name(parser: argparse.ArgumentParser, command: str, dest: str) -> str:
    """The option string (`--sensor-window-ms`) of `dest` in `command`'s parser."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for act in sub.choices[command]._actions:
        if act.dest == dest:
            return act.option_strings[-1] if act.option_strings else dest.upper()
    return dest


def check_options(a: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """ValueError (one line: option, accepted range, value) for the first option of `a` outside
    its range; `pfi --compare` must be two GPU models."""
    for (command, dest), (lo, hi, what) in RANGES.items():
        if command != a.command:
            continue
        value = getattr(a, dest, None)
        for v in value if isinstance(value, list) else [value]:
            if v is None:
                continue
            if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
                raise InputError(f"{option_name(parser, command, dest)}: expected "
                                 f"{_range_text(lo, hi, what)}, got {v!r}")
    if a.command == "pfi" and a.compare is not None:
        parts = [p.strip() for p in a.compare.split(",")]
        if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
            raise InputError(f"--compare: expected two different GPU models, e.g. 'H200,H100', "
                             f"got {a.compare!r}")


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors in one line (`wattlife attribute: error: argument --bootstrap: ...`),
    exit 2, like every other error of the command."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise SystemExit(status)


def numeric_actions(parser: argparse.ArgumentParser) -> list[tuple[str, Any]]:
    """(command, action) of every option whose value is a number or a list of numbers (what
    `RANGES` must cover)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for command, p in sub.choices.items():
        for act in p._actions:
            t = act.type
            name = getattr(t, "__name__", "")
            if t in (int, float) or name in ("positive_ms", "nonnegative_s", "floats"):
                out.append((command, act))
    return out


class PipeTolerantStdout:
    """sys.stdout for one command: once the reader has gone (`wattlife pfi ... | head -1`), what
    is printed is dropped instead of failing the command with "Broken pipe" (its files are
    written all the same); fd 1 then points at /dev/null so the exit's flush is quiet too."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.broken = False

    def _gone(self) -> None:
        import os

        self.broken = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.inner.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return int(self.inner.write(text))
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.inner.flush()
            except BrokenPipeError:
                self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
