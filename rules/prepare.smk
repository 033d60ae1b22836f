# Where downloads run: on the login node (`prepare.download_on: login`, the study's choice, as
# local rules of a Slurm run) or as jobs in a partition with network access.
if PREP.get("download_on", "login") == "login":

    localrules:
        gen_catalogue,
        download,
        upload,


# Preparation (downloads) and post-execution (upload): each transfer under the sampler as its own
# run, attributed like a cell; then the size fit, facility-scale cache estimate and staging break-even.
rule gen_catalogue:
    input:
        config=f"{RES}/config.yaml",
    output:
        manifest=f"{SERVED}/manifest.json",
    log:
        f"{RES}/logs/gen_catalogue.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        out=lambda wc, output: os.path.dirname(output.manifest),
    shell:
        "wattlife gen-catalogue {input.config} -o {params.out} > {log} 2>&1"


rule download:
    input:
        config=f"{RES}/config.yaml",
        manifest=lambda wc: (
            f"{SERVED}/manifest.json" if CATALOGUE[wc.artefact]["source"] == "generated" else []
        ),
    output:
        trace=f"{XFER}/trace.csv",
        events=f"{XFER}/events.csv",
        meta=f"{XFER}/meta.json",
        record=f"{XFER}/record.json",
    log:
        f"{XFER}/run.log",
    wildcard_constraints:
        artefact="|".join(map(re.escape, CATALOGUE)) or "^$",
    conda:
        "../envs/wattlife.yaml"
    params:
        args=fetch_args,
        kind=lambda wc: CATALOGUE[wc.artefact]["kind"],
        dest=lambda wc: os.path.join(config["storage"]["shared"], "downloads", wc.artefact),
    threads: 256  # one transfer at a time while it is measured
    resources:
        slurm_partition=lambda wc: PREP.get("download_on", "login"),
    shell:
        "wattlife run --config {input.config} --trace {output.trace} --events {output.events}"
        " --meta {output.meta} --run-id download-{wildcards.artefact} --"
        " wattlife fetch {params.args} -o {params.dest} --kind {params.kind} --force"
        " --name {wildcards.artefact} --record {output.record} > {log} 2>&1"


rule upload:
    input:
        config=f"{RES}/config.yaml",
        summary=f"{RES}/runs/{UPLOAD.get('cell', 'none')}/work/summary.json",
    output:
        trace=f"{RES}/transfers/upload/trace.csv",
        events=f"{RES}/transfers/upload/events.csv",
        meta=f"{RES}/transfers/upload/meta.json",
        record=f"{RES}/transfers/upload/record.json",
    log:
        f"{RES}/transfers/upload/run.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        to=lambda wc: {
            "loopback-put": f"--put /models --serve-put {RES}/prepare/uploaded",
            "put": f"--put {UPLOAD.get('target', '')}",
            "hf": f"--hf {UPLOAD.get('target', '')}",
            "copy": f"--copy {UPLOAD.get('target', '')}",
        }[UPLOAD.get("to", "loopback-put")],
        rate=lambda wc: (
            f"--rate-mbps {PREP['loopback']['rate_mbps']}"
            if PREP.get("loopback", {}).get("rate_mbps") and UPLOAD.get("to", "loopback-put") == "loopback-put"
            else ""
        ),
    threads: 256
    shell:
        "wattlife run --config {input.config} --trace {output.trace} --events {output.events}"
        " --meta {output.meta} --run-id upload --"
        " wattlife upload --from-summary {input.summary} {params.to} {params.rate}"
        " --name model-upload --record {output.record} > {log} 2>&1"


rule attribute_transfer:
    input:
        trace=f"{XFER}/trace.csv",
        events=f"{XFER}/events.csv",
        meta=f"{XFER}/meta.json",
        response=sensor_response_file(),
    output:
        f"{XFER}/phases.csv",
    log:
        f"{XFER}/attribute.log",
    params:
        options=attribute_options(),
    conda:
        "../envs/wattlife.yaml"
    shell:
        "wattlife attribute --trace {input.trace} --events {input.events} -o {output}"
        " --idle-split {params.options} > {log} 2>&1"


rule prepare_tables:
    input:
        config=f"{RES}/config.yaml",
        records=expand(f"{XFER}/record.json", artefact=transfer_names()),
        phases=expand(f"{XFER}/phases.csv", artefact=transfer_names()),
        summary=f"{RES}/tables/phase_summary.csv",
        cells=cell_files("work/summary.json"),
        metas=cell_files("meta.json"),  # the cells' keys, beside each summary
    output:
        downloads=f"{RES}/tables/downloads.csv",
        fit=f"{RES}/tables/download_fit.csv",
        facility=f"{RES}/tables/facility_cache.csv",
        staging=f"{RES}/tables/staging_breakeven.csv",
    log:
        f"{RES}/logs/prepare_tables.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        tables=lambda wc, output: os.path.dirname(output.downloads),
    shell:
        "wattlife prepare-tables --config {input.config} --records {input.records}"
        " --phase-summary {input.summary} --cell-summaries {input.cells} -o {params.tables} > {log} 2>&1"
