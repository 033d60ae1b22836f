"""Snakemake entry point of rule `aggregate_phases`: every cell's phases.csv -> run-level tables.

Wiring only; the logic is `wattlife.analysis.aggregate.write_phase_tables`. Each cell's meta.json
and summary.json are inputs of the rule, passed by name (not found by path)."""

import os

from wattlife.analysis.aggregate import write_phase_tables

snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
out = snakemake.output
assert all(os.path.dirname(p) == os.path.dirname(out.phases) for p in out), "tables in one folder"
write_phase_tables(list(snakemake.input.phases), os.path.dirname(out.phases),
                   metas=list(snakemake.input.metas), summaries=list(snakemake.input.summaries))
