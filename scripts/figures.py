"""Snakemake entry point of rule `figures` (the `wattlife figures` command's function): run-level
tables -> every figure (PNG + PDF); an error names any figure of the rule's outputs not drawn."""

import os

from wattlife.diagnostics import script_log
from wattlife.figures import draw_all

snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
with script_log(snakemake):  # the rule's log: everything printed, any traceback
    draw_all(snakemake.params.tables, os.path.dirname(snakemake.output[0]),
             expect=list(snakemake.output))
