"""The log of a Snakemake `script:` rule (issue 42: the rules declared a `log:` they never wrote).

`with script_log(snakemake): ...` sends everything the script and the libraries it calls print
(stdout and stderr at the file-descriptor level: print, warnings, logging, C extensions) to the
rule's `log:` file, between a first and a last line naming the rule; an exception is written there
with its traceback, then raised again for Snakemake to report."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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
