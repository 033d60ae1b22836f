# wattlife — the experiment matrix as a Snakemake workflow.
# Demo:    snakemake --profile profiles/local            (config/config.yaml)
# Cluster: snakemake --profile profiles/slurm --configfile config/paper.yaml
from snakemake.utils import min_version, validate

from wattlife.config import validate_config

min_version("9.0")


report: "report/workflow.rst"


configfile: "config/config.yaml"


validate_config(config)  # names the offending key and what was expected
validate(config, "config/schema.yaml")  # Snakemake's own check; fills the schema's defaults


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/execute.smk"
include: "rules/attribute.smk"
include: "rules/powercap.smk"
include: "rules/prepare.smk"
include: "rules/report.smk"
include: "rules/pfi_study.smk"


rule all:
    input:
        all_targets(),
    default_target: True
