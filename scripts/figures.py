"""Snakemake entry point of rule `figures`: run-level tables -> every figure (PNG + PDF).

Wiring only; the logic is `wattlife.figures.draw_all`."""

import os

from wattlife.figures import draw_all

snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
made = draw_all(snakemake.params.tables, os.path.dirname(snakemake.output[0]))
missing = [p for p in snakemake.output if p not in {str(m) for m in made}]
if missing:
    raise RuntimeError(f"figures not drawn (their tables are missing?): {missing}")
