"""Diagnostics (warnings, notes) through `logging`: one `wattlife` logger hierarchy.

Every module logs with `logging.getLogger(__name__)`; the `wattlife` logger writes each record's
message, as is, to the `sys.stderr` of the moment (so `scriptlog.script_log`'s redirection and a
test's captured stderr get it), which keeps the text byte-identical to the `print(...,
file=sys.stderr)` lines it replaced. `install()` runs when the package is imported, so a Snakemake
script or a `python -m wattlife.x` child process says the same as the CLI; the CLI's `--debug`
lowers the level to DEBUG. The logger does not propagate: an application that configures the
root logger does not see each line twice."""

from __future__ import annotations

import logging
import sys

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
