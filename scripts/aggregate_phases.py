"""Snakemake entry point of rule `aggregate_phases` (the `wattlife aggregate` command's function):
every cell's phases.csv -> the run-level tables. Each cell's meta.json, summary.json and
events.csv are inputs of the rule, passed by name (not found by path)."""

import os

from wattlife.analysis.aggregate import write_phase_tables
from wattlife.diagnostics import script_log

snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
with script_log(snakemake):  # the rule's log: everything printed, any traceback
    write_phase_tables(list(snakemake.input.phases), os.path.dirname(snakemake.output.phases),
                       metas=list(snakemake.input.metas), summaries=list(snakemake.input.summaries),
                       events=list(snakemake.input.events))
