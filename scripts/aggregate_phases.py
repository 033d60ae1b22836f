"""Snakemake entry point of rule `aggregate_phases`: every cell's phases.csv -> run-level tables.

Wiring only; the logic is `wattlife.analysis.aggregate.write_phase_tables`."""

import os

from wattlife.analysis.aggregate import write_phase_tables

snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
write_phase_tables(list(snakemake.input.phases), os.path.dirname(snakemake.output.phases))
