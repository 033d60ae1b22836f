# Execution stage: one job per cell of workload x storage x checkpoint x repeat, under the sampler.


rule execute:
    input:
        config=f"{RES}/config.yaml",
        data=lambda wc: dataset_input(wc.workload),
    output:
        trace=f"{CELL}/trace.csv",
        events=f"{CELL}/events.csv",
        meta=f"{CELL}/meta.json",
        summary=f"{CELL}/work/summary.json",
    log:
        f"{CELL}/run.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        cmd=train_command,
    threads: 256  # scaled down to --cores: one cell at a time, cells must not share a machine while measured
    resources:
        # the Slurm plugin turns `gpu` into --gpus=N; a simulated GPU asks for none
        gpu=lambda wc: 0 if config["sampler"].get("gpu") in ("sim", "none") else EXE.get("gpus_per_node", 1),
        nodes=lambda wc: int(EXE.get("nodes", 1)),
    shell:
        "({params.cmd}) > {log} 2>&1"
