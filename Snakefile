# wattlife — the experiment matrix as a Snakemake workflow.
# Demo:    snakemake --profile profiles/local            (config/config.yaml)
# Cluster: snakemake --profile profiles/slurm --configfile config/paper.yaml \
#              --config 'slurm={account: <account>, gpu_partition: <gpu partition>}'
# Measure one cell again (then everything downstream of it):
#          wattlife retire results/demo resnet/local/ckpt-on/r1
#          snakemake --profile profiles/local --forcerun results/demo/runs/resnet/local/ckpt-on/r1/trace.csv
# Each cell's state (current, stale, other-code, damaged, missing, unsealed): wattlife cells --config C
from snakemake.utils import min_version, validate

from wattlife.config import ConfigError, check_config_files, validate_config

min_version("9.14.8")  # the oldest Snakemake tested: the one of requirements/lock.txt


report: "report/workflow.rst"


# The demo's config only when no --configfile is given: each preset (config/paper.yaml,
# config/pfi.yaml, ...) is complete and runs exactly its own matrix; an overlay (config/site.yaml)
# goes after its preset.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


check_config_files(workflow.configfiles)  # a duplicated key: its file, line and key
try:
    validate_config(config)  # names the offending key and what was expected
except ConfigError as exc:
    if workflow.overwrite_configfiles and "missing required key" in str(exc):
        raise ConfigError(
            f"{exc} (with --configfile the demo's config/config.yaml is not read: give a "
            "complete preset, or config/config.yaml first and your overlay after it)"
        ) from None
    raise
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
    default_target: True
    input:
        all_targets(),
        # every measurement's pointer for its current slice (custody): a changed slice is a
        # missing input here, so its job runs with or without Snakemake's metadata
        measurement_pointers(),
    localrule: True


# the measurements alone (training cells, PFI caps, transfers), each as its current slice asks
rule measurements:
    input:
        measurement_pointers(),
    localrule: True
