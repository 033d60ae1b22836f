"""The `wattlife` command: thin — parse, call one function, print.

One module per command group, each with its `cmd_*` functions and an `add_parsers(sub)` that adds
its commands' parsers: `runs` (run, attribute, aggregate, merge-nodes, launch-node, check),
`workloads` (train, gen-images, gen-text), `preparation` (fetch, upload, gen-catalogue,
prepare-tables), `power` (sweep, pfi-sweep, aggregate-curves, powercap), `pfi` (pfi, predict,
allocate, pfi-study, calibrate-sim), `outputs` (figures, bench), `slurm` (slurm-orphans),
`custody` (measure, cells, seal-derived); `options` holds the option types and the output
guard, `checks` the range checks at the edge. Each `cmd_*` imports what it calls lazily, so
`wattlife --help` loads no analysis, device or torch module."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from . import custody, outputs, pfi, power, preparation, runs, slurm, workloads
from .options import GUARDS, guard_outputs
from .runs import load_sampler_cfg

__all__ = ["GUARDS", "guard_outputs", "load_sampler_cfg", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The `wattlife` parser: every command group's parsers, in the order of `--help`."""
    from .checks import OneLineParser

    p = OneLineParser(prog="wattlife", description=(
        "Where the energy of AI training goes, and how flexible its power is."))
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an error (also WATTLIFE_DEBUG=1; default: off)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (runs, custody, workloads, preparation, power, pfi, outputs, slurm):
        group.add_parsers(sub)
    return p


def _one_line(exc: BaseException) -> str:
    """One line that names the file/option and what went wrong, for any error a command meets."""
    import json as _json

    import pandas as pd

    if isinstance(exc, OSError) and exc.filename is not None:
        what = exc.strerror or type(exc).__name__
        hint = {"EROFS": "read-only file system: choose another output path",
                "ENOSPC": "no space left on the device: free space or choose another path",
                "EISDIR": "is a directory: give a file path",
                "EACCES": "permission denied"}
        import errno as _errno

        name = _errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.filename}: {hint.get(name, what[:1].lower() + what[1:])}"
    if isinstance(exc, _json.JSONDecodeError):
        return f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, pd.errors.EmptyDataError):
        return f"empty CSV file (no header): {exc}"
    if isinstance(exc, KeyError):
        return f"missing key or column {exc}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input or a fault: one line on stderr naming the file/option, exit 2
    (1 for an unexpected internal error), no traceback unless --debug or WATTLIFE_DEBUG=1.
    Warnings are one line each too."""
    import os
    import warnings

    import pandas as pd
    import yaml

    from .checks import PipeTolerantStdout, check_options

    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("WATTLIFE_DEBUG", "") not in ("", "0")
    name = f"wattlife {args.command}"

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        print(f"{name}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    stdout, sys.stdout = sys.stdout, PipeTolerantStdout(sys.stdout)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        if not debug:
            warnings.showwarning = show
        try:
            check_options(args, parser)
            guard_outputs(args)
            return int(args.fn(args) or 0)
        except KeyboardInterrupt:
            print(f"{name}: interrupted", file=sys.stderr)
            return 130
        except (ValueError, OSError, RuntimeError, KeyError, pd.errors.ParserError,
                pd.errors.EmptyDataError, yaml.YAMLError) as exc:
            if debug:
                raise
            print(f"{name}: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        except Exception as exc:  # a bug, not bad input: still one line, the traceback on demand
            if debug:
                raise
            print(f"{name}: internal error: {type(exc).__name__}: {_one_line(exc)} "
                  "(rerun with --debug or WATTLIFE_DEBUG=1 for the traceback)", file=sys.stderr)
            return 1
        finally:
            sys.stdout = stdout
