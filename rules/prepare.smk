# Preparation (downloads) and post-execution (upload): each transfer under the sampler as its own
# run, attributed like a cell; then the size fit, facility-scale cache estimate and staging break-even.
# Where transfers run: on the submit host (`prepare.download_on` / `prepare.upload_on: login`, the
# study's choice: local rules of a Slurm run) or as jobs in a partition with network access; the
# upload's placement is its own. Transfers run one at a time (the `transfers` resource; raise it
# with `--resources transfers=N`), and each record says how many were allowed at once.
GENERATED = [n for n, e in CATALOGUE.items() if e["source"] == "generated"]


rule gen_catalogue:
    output:
        config=f"{SERVED}/catalogue.json",
        manifest=f"{SERVED}/manifest.json",
        files=expand(f"{SERVED}/{{name}}.bin", name=GENERATED),
    log:
        f"{RES}/logs/gen_catalogue.log",
    benchmark:
        bench("gen_catalogue")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        slice=slice_of(lambda wc: J.generated_slice(config)),
        out=lambda wc, output: os.path.dirname(output.manifest),
    shell:
        "printf '%s\\n' {params.slice:q} > {output.config:q} && wattlife gen-catalogue {output.config:q} -o {params.out:q} > {log:q} 2>&1"


# Custody (docs/CUSTODY.md), as a training cell's: a transfer's measuring job (`download`,
# `upload`) runs as an attempt of its own and publishes it into the transfer's folder; its one
# output (beside what the upload's loopback server receives) is the pointer
# sealed-<slice hash>.json, so a changed slice is a missing output and an unchanged one an
# existing output, whoever published it and whatever Snakemake's metadata says.
# `link_transfer` declares the transfer's files (links from the published attempt).


rule download:
    input:
        manifest=lambda wc: (
            f"{SERVED}/manifest.json" if CATALOGUE[wc.artefact]["source"] == "generated" else []
        ),
    output:
        pointer=f"{XFER}/sealed-{{slicehash}}.json",
    log:
        f"{XFER}/attempt-{{slicehash}}.log",
    wildcard_constraints:
        artefact="|".join(map(re.escape, CATALOGUE)) or "^$",
        slicehash="[0-9a-f]{16}",
    localrule: PREP.download_on == "login"  # the submit host: a local rule of a Slurm run
    conda:
        "../envs/training.yaml"
    threads: NODE_CORES  # a local run: nothing else on this machine while a transfer is measured
    resources:
        **placement(PREP.download_on),
        transfers=1,
        runtime=lambda wc: J.transfer_runtime_min(
            CATALOGUE[wc.artefact]["size_bytes"], PREP.min_rate_mbps
        ),
    params:
        slice=slice_of(lambda wc: transfer_slice(wc.artefact)),
        args=fetch_args,
        kind=lambda wc: CATALOGUE[wc.artefact]["kind"],
        dest=lambda wc: os.path.join(CFG.storage["shared"], "downloads", wc.artefact),
        at_once=TRANSFERS_AT_ONCE or 0,
        results=lambda wc: RES,
    shell:
        # an attempt of its own (wattlife.custody.others): sealed, published into this folder
        'wattlife attempt --results {params.results:q} --into "$(dirname {output.pointer:q})" --kind transfer'
        " --slice {params.slice:q} -- wattlife run --config @ATTEMPT@/config.json --trace @ATTEMPT@/trace.csv"
        " --events @ATTEMPT@/events.csv --meta @ATTEMPT@/meta.json --run-id download-{wildcards.artefact} --"
        " wattlife fetch {params.args} -o {params.dest:q} --kind {params.kind} --force"
        " --name {wildcards.artefact} --transfers-at-once {params.at_once}"
        " --record @ATTEMPT@/record.json > {log:q} 2>&1"


LOOPBACK_PUT = PREP.upload_to == "loopback-put"


rule upload:
    input:
        summary=f"{RES}/runs/{PREP.upload_cell or 'none'}/work/summary.json",
    output:
        pointer=f"{RES}/transfers/upload/sealed-{{slicehash}}.json",
    log:
        f"{RES}/transfers/upload/attempt-{{slicehash}}.log",
    wildcard_constraints:
        slicehash="[0-9a-f]{16}",
    localrule: PREP.upload_on == "login"
    conda:
        "../envs/training.yaml"
    threads: NODE_CORES
    resources:
        **placement(PREP.upload_on),
        transfers=1,
        runtime=J.transfer_runtime_min(PREP.upload_size_bytes, PREP.min_rate_mbps),
    params:
        slice=slice_of(lambda wc: transfer_slice("upload")),
        to=lambda wc, output: {
            # the loopback server's copy: part of the attempt (uploaded/), sealed with it
            "loopback-put": "--put /models --serve-put @ATTEMPT@/uploaded",
            "put": f"--put {shlex.quote(PREP.upload_target or '')}",
            "hf": f"--hf {shlex.quote(PREP.upload_target or '')}",
            "copy": f"--copy {shlex.quote(PREP.upload_target or '')}",
        }[PREP.upload_to],
        rate=lambda wc: (
            f"--rate-mbps {PREP.loopback_rate_mbps}"
            if PREP.loopback_rate_mbps and LOOPBACK_PUT
            else ""
        ),
        at_once=TRANSFERS_AT_ONCE or 0,
        results=lambda wc: RES,
    shell:
        # an attempt of its own (wattlife.custody.others): sealed, published into this folder
        'wattlife attempt --results {params.results:q} --into "$(dirname {output.pointer:q})" --kind transfer'
        " --slice {params.slice:q} -- wattlife run --config @ATTEMPT@/config.json --trace @ATTEMPT@/trace.csv"
        " --events @ATTEMPT@/events.csv --meta @ATTEMPT@/meta.json --run-id upload --"
        " wattlife upload --from-summary {input.summary:q} {params.to} {params.rate}"
        " --name model-upload --transfers-at-once {params.at_once} --record @ATTEMPT@/record.json > {log:q} 2>&1"
        # then the cell's checkpoint folder is removed (kept by its measuring job for this step)
        " && wattlife drop-checkpoint {input.summary:q} >> {log:q} 2>&1"


rule link_transfer:
    input:
        # not ancient(): after a job of `download` / `upload` (one adopting an orphan's result
        # included) this and what follows run again (as link_cell's)
        pointer=lambda wc: transfer_pointer(wc.artefact),
        # where the current slice's pointer is missing: the request (as link_cell's)
        wanted=lambda wc: transfer_wanted(wc.artefact),
    output:
        config=f"{XFER}/config.json",
        trace=f"{XFER}/trace.csv",
        events=f"{XFER}/events.csv",
        meta=f"{XFER}/meta.json",
        record=f"{XFER}/record.json",
        run_log=f"{XFER}/run.log",  # the measured command's output
    log:
        f"{XFER}/link.log",
    benchmark:
        bench("link_transfer", "{artefact}")
    wildcard_constraints:
        artefact="|".join(map(re.escape, CATALOGUE)) or "^$",
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        folder=lambda wc: f"transfers/{wc.artefact}",
        results=lambda wc: RES,
    shell:
        "wattlife relink {params.results:q} {params.folder:q} > {log:q} 2>&1"


rule link_upload:
    input:
        pointer=transfer_pointer("upload"),
        wanted=lambda wc: transfer_wanted("upload"),  # as link_transfer's
    output:
        config=f"{RES}/transfers/upload/config.json",
        trace=f"{RES}/transfers/upload/trace.csv",
        events=f"{RES}/transfers/upload/events.csv",
        meta=f"{RES}/transfers/upload/meta.json",
        record=f"{RES}/transfers/upload/record.json",
        received=directory(f"{RES}/transfers/upload/uploaded") if LOOPBACK_PUT else [],
        run_log=f"{RES}/transfers/upload/run.log",  # the measured command's output
    log:
        f"{RES}/transfers/upload/link.log",
    benchmark:
        bench("link_transfer", "upload")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        results=lambda wc: RES,
    shell:
        "wattlife relink {params.results:q} transfers/upload > {log:q} 2>&1"


rule check_transfer:
    input:
        trace=f"{XFER}/trace.csv",
        events=f"{XFER}/events.csv",
        meta=f"{XFER}/meta.json",
        record=f"{XFER}/record.json",
    output:
        f"{XFER}/check.txt",
    log:
        f"{XFER}/check.log",
    benchmark:
        bench("check_transfer", "{artefact}")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        run_dir=lambda wc, input: os.path.dirname(input.meta),
    shell:
        # a transfer is no training workload: no required training phases (--kind none)
        "wattlife check --kind none {params.run_dir:q} 2>&1 | tee {log:q} > {output:q}"


rule attribute_transfer:
    input:
        check=f"{XFER}/check.txt",
        trace=f"{XFER}/trace.csv",
        events=f"{XFER}/events.csv",
        meta=f"{XFER}/meta.json",
        response=sensor_response_file(),
    output:
        phases=f"{XFER}/phases.csv",
        seal=f"{XFER}/phases.csv.seal.json",  # the published attempt it comes from (custody)
        response=estimated_response(f"{XFER}/phases.csv"),
    log:
        f"{XFER}/attribute.log",
    benchmark:
        bench("attribute_transfer", "{artefact}")
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
        " && wattlife seal-derived {output.phases:q} >> {log:q} 2>&1"


rule prepare_tables:
    input:
        records=expand(f"{XFER}/record.json", artefact=transfer_names()),
        phases=expand(f"{XFER}/phases.csv", artefact=transfer_names()),
        summary=f"{RES}/tables/phase_summary.csv",
        cells=cell_files("work/summary.json"),
        metas=cell_files("meta.json"),  # the cells' keys
    output:
        config=f"{RES}/prepare/tables-config.json",
        downloads=report(
            f"{RES}/tables/downloads.csv",
            caption="../report/tables-prepare.rst",
            category="tables",
        ),
        fit=report(
            f"{RES}/tables/download_fit.csv",
            caption="../report/tables-prepare.rst",
            category="tables",
        ),
        facility=report(
            f"{RES}/tables/facility_cache.csv",
            caption="../report/tables-prepare.rst",
            category="tables",
        ),
        staging=report(
            f"{RES}/tables/staging_breakeven.csv",
            caption="../report/tables-prepare.rst",
            category="tables",
        ),
    log:
        f"{RES}/logs/prepare_tables.log",
    benchmark:
        bench("prepare_tables")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        slice=slice_of(lambda wc: J.prepare_tables_slice(config)),
        tables=lambda wc, output: os.path.dirname(output.downloads),
    shell:
        "printf '%s\\n' {params.slice:q} > {output.config:q} && wattlife prepare-tables --config {output.config:q} --records {input.records:q}"
        " --phases {input.phases:q} --phase-summary {input.summary:q} --cell-summaries {input.cells:q}"
        " --cell-metas {input.metas:q} -o {params.tables:q} > {log:q} 2>&1"
