# Attribution: each cell is checked against the file contracts and its seal (`wattlife check`, with
# its workload's kind), then trace x events -> phases.csv (sealed: phases.csv.seal.json names the
# published attempt it comes from); then the run-level tables, from verified cells only.


rule check:
    input:
        trace=f"{CELL}/trace.csv",
        events=f"{CELL}/events.csv",
        meta=f"{CELL}/meta.json",
        # (a cell whose slice changed is remade through these: link_cell takes its request)
        summary=f"{CELL}/work/summary.json",
    output:
        f"{CELL}/check.txt",
    log:
        f"{CELL}/check.log",
    benchmark:
        bench("check", CELL_KEY)
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        kind=lambda wc: CFG.workloads[wc.workload].kind,
        run_dir=lambda wc, input: os.path.dirname(input.meta),
    shell:
        # a failing check fails the job (pipefail) with every finding in the log
        "wattlife check --kind {params.kind} {params.run_dir:q} 2>&1 | tee {log:q} > {output:q}"


rule attribute:
    input:
        check=f"{CELL}/check.txt",
        trace=f"{CELL}/trace.csv",
        events=f"{CELL}/events.csv",
        meta=f"{CELL}/meta.json",
        response=sensor_response_file(),
        pointer=lambda wc: ancient(cell_pointer(wc)),  # the published attempt, named in the seal
    output:
        phases=f"{CELL}/phases.csv",
        seal=f"{CELL}/phases.csv.seal.json",  # size, rows, sha256: aggregate refuses a cut file
        response=estimated_response(f"{CELL}/phases.csv"),
    log:
        f"{CELL}/attribute.log",
    benchmark:
        bench("attribute", CELL_KEY)
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        options=attribute_options(),
    shell:
        "wattlife attribute --trace {input.trace:q} --events {input.events:q} -o {output.phases:q}"
        " --idle-split {params.options} > {log:q} 2>&1"
        " && wattlife seal-derived {output.phases:q} --pointer {input.pointer:q} >> {log:q} 2>&1"


rule aggregate_phases:
    input:
        phases=cell_files("phases.csv"),
        metas=cell_files("meta.json"),  # each cell's keys
        summaries=cell_files("work/summary.json"),  # each cell's throughput
        events=cell_files("events.csv"),  # each cell's items (its `step` rows)
    output:
        phases=report(
            f"{RES}/tables/phases.csv", caption="../report/tables-lifecycle.rst", category="tables"
        ),
        summary=report(
            f"{RES}/tables/phase_summary.csv",
            caption="../report/tables-lifecycle.rst",
            category="tables",
        ),
        share=report(
            f"{RES}/tables/device_share.csv",
            caption="../report/tables-lifecycle.rst",
            category="tables",
        ),
        deltas=report(
            f"{RES}/tables/storage_checkpoint.csv",
            caption="../report/tables-lifecycle.rst",
            category="tables",
        ),
        throughput=report(
            f"{RES}/tables/throughput.csv",
            caption="../report/tables-lifecycle.rst",
            category="tables",
        ),
    log:
        f"{RES}/logs/aggregate_phases.log",
    benchmark:
        bench("aggregate_phases")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    script:
        "../scripts/aggregate_phases.py"


rule waiting:
    input:
        phases=f"{RES}/tables/phases.csv",
        traces=cell_files("trace.csv"),  # each GPU's idle power with a CUDA context
        metas=cell_files("meta.json"),
    output:
        waiting=report(
            f"{RES}/tables/waiting.csv", caption="../report/tables-waiting.rst", category="tables"
        ),
        runs=report(
            f"{RES}/tables/waiting_runs.csv",
            caption="../report/tables-waiting.rst",
            category="tables",
        ),
        facility=report(
            f"{RES}/tables/waiting_facility.csv",
            caption="../report/tables-waiting.rst",
            category="tables",
        ),
        whatif=report(
            f"{RES}/tables/waiting_whatif.csv",
            caption="../report/tables-waiting.rst",
            category="tables",
        ),
    log:
        f"{RES}/logs/waiting.log",
    benchmark:
        bench("waiting")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        jobs_per_year=CFG.analysis.waiting_jobs_per_year,
        caps_w=list(CFG.analysis.waiting_caps_w or []),
    script:
        "../scripts/waiting_tables.py"
