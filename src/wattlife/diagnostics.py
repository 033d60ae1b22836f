"""Diagnostics (warnings, notes) through `logging`: one `wattlife` logger hierarchy.

Every module logs with `logging.getLogger(__name__)`; the `wattlife` logger writes each record's
message, as is, to the `sys.stderr` of the moment (so `script_log`'s redirection and a test's
captured stderr get it), which keeps the text byte-identical to the `print(..., file=sys.stderr)`
lines it replaced. `install()` runs when the package is imported, so a Snakemake script or a
`python -m wattlife.x` child process says the same as the CLI; the CLI's `--debug` lowers the level
to DEBUG. The logger does not propagate: an application that configures the root logger does not
see each line twice.

The log of a Snakemake `script:` rule (issue 42: the rules declared a `log:` they never wrote):
`with script_log(snakemake): ...` sends everything the script and the libraries it calls print
(stdout and stderr at the file-descriptor level: print, warnings, logging, C extensions) to the
rule's `log:` file, between a first and a last line naming the rule; an exception is written there
with its traceback, then raised again for Snakemake to report."""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOGGER_NAME = "wattlife"


class StderrHandler(logging.Handler):
    """Writes a record's message and a newline to the current `sys.stderr`, then flushes it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # logging's own contract: report, never raise
            self.handleError(record)


def install(level: int = logging.INFO, name: str = LOGGER_NAME,
            fmt: str = "%(message)s") -> logging.Logger:
    """The logger `name` with one `StderrHandler` (added once) writing `fmt`, at `level`; a
    logger below `wattlife` given its own (e.g. `wattlife.measure`'s "name: LEVEL: message")
    says its records in that format only."""
    log = logging.getLogger(name)
    if not any(isinstance(h, StderrHandler) for h in log.handlers):
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter(fmt))
        log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    return log


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@contextmanager
def log_to(path: str | os.PathLike[str], name: str) -> Iterator[None]:
    """Stdout and stderr of this process go to `path` (overwritten) while the block runs."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(target, "w", buffering=1) as log:
        saved = os.dup(1), os.dup(2)
        streams = sys.stdout, sys.stderr  # not fd 1 and 2 where something replaced them
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        try:
            print(f"wattlife: {name} started {_stamp()}", flush=True)
            try:
                yield
            except BaseException:
                traceback.print_exc()
                print(f"wattlife: {name} failed {_stamp()}", flush=True)
                raise
            print(f"wattlife: {name} finished {_stamp()}", flush=True)
        finally:
            log.flush()
            sys.stdout, sys.stderr = streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def script_log(snakemake: Any) -> Any:
    """`log_to` the rule's first `log:` file, the lines naming the rule."""
    return log_to(snakemake.log[0], f"rule {snakemake.rule}")
