# Attribution: each cell's trace x events -> phases.csv; then the run-level tables.


rule attribute:
    input:
        trace=f"{CELL}/trace.csv",
        events=f"{CELL}/events.csv",
        meta=f"{CELL}/meta.json",
        response=sensor_response_file(),
    output:
        phases=f"{CELL}/phases.csv",
        response=estimated_response(f"{CELL}/phases.csv"),
    log:
        f"{CELL}/attribute.log",
    params:
        options=attribute_options(),
    resources:
        **CPU_STEP,
    conda:
        "../envs/wattlife.yaml"
    shell:
        "wattlife attribute --trace {input.trace:q} --events {input.events:q} -o {output.phases:q}"
        " --idle-split {params.options} > {log:q} 2>&1"


rule aggregate_phases:
    input:
        phases=cell_files("phases.csv"),
        metas=cell_files("meta.json"),  # each cell's keys
        summaries=cell_files("work/summary.json"),  # each cell's throughput
    output:
        phases=f"{RES}/tables/phases.csv",
        summary=f"{RES}/tables/phase_summary.csv",
        share=f"{RES}/tables/device_share.csv",
        deltas=f"{RES}/tables/storage_checkpoint.csv",
    log:
        f"{RES}/logs/aggregate_phases.log",
    resources:
        **CPU_STEP,
    conda:
        "../envs/wattlife.yaml"
    script:
        "../scripts/aggregate_phases.py"
