"""Snakemake entry point of rule `waiting`: the run-level phases table and each cell's trace and
meta.json -> the waiting-energy tables (wattlife.analysis.waiting.write_waiting_tables)."""

import os

from wattlife.analysis.waiting import write_waiting_tables
from wattlife.diagnostics import script_log

snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
with script_log(snakemake):  # the rule's log: everything printed, any traceback
    write_waiting_tables(snakemake.input.phases, os.path.dirname(snakemake.output.waiting),
                         snakemake.params.jobs_per_year, traces=list(snakemake.input.traces),
                         metas=list(snakemake.input.metas), caps_w=list(snakemake.params.caps_w))
