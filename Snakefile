# wattlife — the experiment matrix as a Snakemake workflow.
# Demo:    snakemake --profile profiles/local            (config/config.yaml)
# Cluster: snakemake --profile profiles/slurm --configfile config/paper.yaml \
#              --config 'slurm={account: <account>, gpu_partition: <gpu partition>}'
# Measure one cell again (then everything downstream of it):
#          wattlife retire results/demo resnet/local/ckpt-on/r1
#          snakemake --profile profiles/local --forcerun results/demo/runs/resnet/local/ckpt-on/r1/trace.csv
# Each cell's state (current, stale, other-code, damaged, missing, unsealed): wattlife cells --config C
from snakemake.utils import min_version, validate

from wattlife.config import check_config_files, validate_config

min_version("9.14.8")  # the oldest Snakemake tested: the one of requirements/lock.txt


report: "report/workflow.rst"


configfile: "config/config.yaml"


check_config_files(workflow.configfiles)  # a duplicated key: its file, line and key
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
    default_target: True
    input:
        all_targets(),


# Small CPU steps: on the submit host unless the config names a CPU partition (`slurm.cpu_partition`);
# never in the GPU partition. Transfers on `login` are local too (rules/prepare.smk).
CPU_RULES = [
    "all",
    "gen_images",
    "gen_text",
    "gen_catalogue",
    "link_cell",
    "link_cell_tokenizer",
    "check",
    "check_transfer",
    "attribute",
    "attribute_transfer",
    "aggregate_phases",
    "waiting",
    "prepare_tables",
    "pfi",
    "predictor",
    "allocate",
    "figures",
    "powercap_sweep",
    "pfi_curve",
    "pfi_curves",
]
LOCAL_RULES = [r for r in CPU_RULES if not SLURM.cpu_partition or r == "all"]
LOCAL_RULES += [
    r
    for r, where in (("download", PREP.download_on), ("upload", PREP.upload_on))
    if where == "login"
]
workflow.localrules(*(r for r in LOCAL_RULES if r in {x.name for x in workflow.rules}))
