"""`python -m snakemake` for the live Slurm tests, run as `python tests/slurm_controller.py ARGS`
(conftest.SLURM_SNAKEMAKE): Snakemake's own command line, whose Slurm executor asks Slurm about
its jobs every `--slurm-init-seconds-before-status-checks` seconds (conftest.SLURM_POLL: 2 s) for
as long as a job runs. Nothing else changes: no job, flag or file of a run.

Why: snakemake-executor-plugin-slurm (2.x) adds 10 s to its wait after every status check that
sees no job end (up to 180 s) and only goes back to the initial wait when one has ended. A tiny
CI job of ~25 s was asked about 1, 13 and 35 s after its submission: seen ~10 s after it ended,
in every Slurm-profile run of the suite. Where the executor has no such attribute (another
plugin version), the command runs as it is, only slower."""

from __future__ import annotations

import os
import sys


def poll_at_the_initial_interval() -> None:
    """Cap the Slurm executor's next wait at its initial one (the plugin's setting)."""
    try:
        from snakemake_executor_plugin_slurm import Executor
    except ImportError:
        return
    grown = getattr(Executor, "next_seconds_between_status_checks", None)
    if not isinstance(grown, property) or grown.fset is None:
        return
    setter = grown.fset

    def capped(self: Executor, seconds: float) -> None:
        first = getattr(self.workflow.executor_settings, "init_seconds_before_status_checks", None)
        setter(self, seconds if first is None else min(seconds, first))

    Executor.next_seconds_between_status_checks = property(grown.fget, capped)


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # as `python -m snakemake` has it: the workflow, not tests/
    poll_at_the_initial_interval()
    from snakemake.cli import main

    sys.argv[0] = "snakemake"
    sys.exit(main())
