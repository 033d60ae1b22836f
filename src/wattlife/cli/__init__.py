"""The `wattlife` command: thin — parse, call one function, print.

One module per command group, each with its `cmd_*` functions and an `add_parsers(sub)` that adds
its commands' parsers: `runs` (run, attribute, aggregate, merge-nodes, launch-node, check),
`workloads` (train, gen-images, gen-text), `preparation` (fetch, upload, gen-catalogue,
prepare-tables), `power` (sweep, pfi-sweep, aggregate-curves, powercap), `pfi` (pfi, predict,
allocate, pfi-study, calibrate-sim), `outputs` (figures, bench), `slurm` (slurm-orphans),
`custody` (measure, cells, seal-derived), `emulators` (node-emulator); `options` holds the
option types, the output guard and the range checks at the edge. Each `cmd_*` imports what it
calls lazily, so `wattlife --help` loads no analysis, device or torch module."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TextIO

from ..diagnostics import install
from ..errors import EXIT_BUG, EXIT_USER
from . import custody, emulators, outputs, pfi, power, preparation, runs, slurm, workloads
from .options import GUARDS, guard_outputs
from .runs import load_sampler_cfg

__all__ = ["GUARDS", "guard_outputs", "load_sampler_cfg", "build_parser", "main"]

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The `wattlife` parser: every command group's parsers, in the order of `--help`."""
    from .options import OneLineParser

    p = OneLineParser(prog="wattlife", description=(
        "Where the energy of AI training goes, and how flexible its power is."),
        epilog=EXIT_EPILOG)
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an error (also WATTLIFE_DEBUG=1; default: off)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (runs, custody, workloads, preparation, power, pfi, outputs, slurm, emulators):
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
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


#: the top-level help's last line: what each exit status means
EXIT_EPILOG = "exit status: 0 ok, 2 bad input or setup, 70 a bug in wattlife, 130 interrupted"


def _user_errors() -> tuple[type[BaseException], ...]:
    """What the user (their files, options, site) caused, each said in one line: wattlife's own
    `WattlifeError`, and the errors the OS and the parsers of the user's files raise on their
    own (a missing/read-only path, a file that is not CSV/JSON/YAML). Anything else is a bug."""
    import json as _json

    import pandas as pd
    import yaml

    from ..errors import WattlifeError

    return (WattlifeError, OSError, _json.JSONDecodeError, pd.errors.ParserError,
            pd.errors.EmptyDataError, yaml.YAMLError)


def _bug_report(name: str, argv: list[str] | None, exc: BaseException) -> None:
    """A short bug report on stderr: the command, the exception, where its traceback went."""
    import shlex
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        fd, where = tempfile.mkstemp(prefix="wattlife-bug-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError:
        where = ""
    args = sys.argv[1:] if argv is None else argv
    log.error(f"{name}: internal error: {type(exc).__name__}: {_one_line(exc)}")
    log.error(f"{name}: command: wattlife {shlex.join(args)}")
    log.error(f"{name}: traceback: {where}" if where else text.rstrip("\n"))
    log.error(f"{name}: this is a bug in wattlife, please report it "
              "(the command, this message and the traceback)")


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input or a fault: one line on stderr naming the file/option, exit 2;
    anything else is a bug: a short bug report, exit `EXIT_BUG` (70). No traceback on stderr
    unless --debug or WATTLIFE_DEBUG=1 (which also logs at DEBUG). Warnings are one line each."""
    import warnings

    from .options import PipeTolerantStdout, check_options

    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("WATTLIFE_DEBUG", "") not in ("", "0")
    install(logging.DEBUG if debug else logging.INFO)
    name = f"wattlife {args.command}"

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        log.warning(f"{name}: warning: {' '.join(str(message).split())}")

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
            log.error(f"{name}: interrupted")
            return 130
        except _user_errors() as exc:
            if debug:
                raise
            log.error(f"{name}: error: {_one_line(exc)}")
            return EXIT_USER
        except Exception as exc:  # a bug, not bad input: a bug report, the traceback kept
            if debug:
                raise
            _bug_report(name, argv, exc)
            return EXIT_BUG
        finally:
            sys.stdout = stdout
