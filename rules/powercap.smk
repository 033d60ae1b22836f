# Power elasticity: cap sweeps -> curves -> PFI -> predictor -> allocation simulation.
# (The PFI matrix's cells, caps and shapes: rules/common.smk.)


if PFI_CELLS:  # the PFI study's matrix: one job per (cell, cap), on that cell's GPUs
    # Custody (docs/CUSTODY.md), as a training cell's: the measuring job (`pfi_cap`) runs as an
    # attempt of its own and publishes it into the cap's folder; its one output is the pointer
    # sealed-<slice hash>.json, so a changed slice is a missing output (the cap is measured again)
    # and an unchanged one an existing output, whoever published it and whatever Snakemake's
    # metadata says. `link_pfi_cap` declares the cap's files (links from the published attempt).
    # Measure a cap again (a recorded failure: the device refused the cap): `wattlife retire
    # <results> pfi/<cell>/cap-<W>`, then --forcerun its curve-point.csv.

    for _name, _cells in (
        ("pfi_cap", [n for n in PFI_CELLS if n not in PFI_MULTI]),
        ("pfi_cap_multinode", sorted(PFI_MULTI)),
    ):
        if not _cells:
            continue

        rule:
            name:
                _name
            input:
                data=pfi_dataset_input(),
            output:
                pointer=f"{PCAP}/sealed-{{slicehash}}.json",
            log:
                f"{PCAP}/attempt-{{slicehash}}.log",
            wildcard_constraints:
                pcell="|".join(map(re.escape, _cells)),
                cap="[0-9.]+",
                slicehash="[0-9a-f]{16}",
            conda:
                "../envs/training.yaml"
            threads: NODE_CORES  # a local run: the whole machine while caps change and it is measured
            resources:
                **measuring_by("pcell", PFI_RES),  # whole nodes of the cell's hardware (common.smk)
                gres=lambda wc: f"gpu:{pfi_shape(wc.pcell)[1]}",  # per node: --gres=gpu:N
                nodes=lambda wc: pfi_shape(wc.pcell)[0],
                runtime=J.pfi_runtime_min(PFI_MATRIX.duration_s),
            params:
                slice=slice_of(pfi_cap_slice),
                results=lambda wc: RES,
                checkpoint=lambda wc: PFI_CHECKPOINT.format(pcell=wc.pcell, cap=wc.cap),
            shell:
                # an attempt of its own (wattlife.custody.others): sealed, published into this folder.
                # The run's model + optimizer checkpoint (the protocol writes one to the shared
                # storage, wattlife.jobs.pfi_run_id names it; hundreds of GB for the 32B-70B cells):
                # no study reads it, so it is deleted when the job ends, whatever its exit status
                "mkdir -p {params.checkpoint:q} && rc=0 && "
                'wattlife attempt --results {params.results:q} --into "$(dirname {output.pointer:q})" --kind pfi-cap'
                " --slice {params.slice:q} -- wattlife pfi-sweep --config @ATTEMPT@/config.json"
                " --cell {wildcards.pcell} --cap {wildcards.cap} -o @ATTEMPT@/curve-point.csv > {log:q} 2>&1"
                " || rc=$?; rm -rf {params.checkpoint:q}; exit $rc"

        rule:
            name:
                f"link_{_name}"
            input:
                # not ancient(): after a job of `pfi_cap` (one adopting an orphan's result
                # included) this and what follows run again (as link_cell's)
                pointer=pfi_cap_pointer,
                # where the current slice's pointer is missing: the request (as link_cell's)
                wanted=pfi_cap_wanted,
            output:
                config=f"{PCAP}/config.json",
                point=f"{PCAP}/curve-point.csv",
                workload=f"{PCAP}/workload.json",
                trace=f"{PCAP}/trace.csv",
                events=f"{PCAP}/events.csv",
                meta=f"{PCAP}/meta.json",
                work=directory(f"{PCAP}/work"),
                nodes=directory(f"{PCAP}/nodes") if _name == "pfi_cap_multinode" else [],
                clock=f"{PCAP}/clock_offsets.csv" if _name == "pfi_cap_multinode" else [],
                run_log=f"{PCAP}/run.log",  # the measured command's output
            log:
                f"{PCAP}/link.log",
            benchmark:
                bench(f"link_{_name}", "{pcell}-cap{cap}")
            wildcard_constraints:
                pcell="|".join(map(re.escape, _cells)),
                cap="[0-9.]+",
            localrule: CPU_LOCAL
            conda:
                "../envs/analysis.yaml"
            resources:
                **CPU_STEP,
            params:
                folder=lambda wc: f"pfi/{wc.pcell}/cap-{wc.cap}",
                results=lambda wc: RES,
            shell:
                "wattlife relink {params.results:q} {params.folder:q} > {log:q} 2>&1"

    rule pfi_curve:
        input:
            lambda wc: pfi_cap_files(wc.pcell),
        output:
            f"{RES}/pfi/{{pcell}}/curves.csv",
        log:
            f"{RES}/pfi/{{pcell}}/curves.log",
        benchmark:
            bench("pfi_curve", "{pcell}")
        wildcard_constraints:
            pcell="|".join(map(re.escape, PFI_CELLS)),
        localrule: CPU_LOCAL
        conda:
            "../envs/analysis.yaml"
        resources:
            **CPU_STEP,
        params:
            caps=lambda wc: ",".join(f"{c:g}" for c in PFI_CAPS[wc.pcell]),
        shell:
            "wattlife aggregate-curves {input:q} --job {wildcards.pcell} --caps {params.caps}"
            " -o {output:q} > {log:q} 2>&1"

    rule pfi_curves:
        input:
            expand(f"{RES}/pfi/{{pcell}}/curves.csv", pcell=PFI_CELLS),
        output:
            report(
                f"{RES}/tables/curves.csv", caption="../report/tables-pfi.rst", category="tables"
            ),
        log:
            f"{RES}/logs/pfi_curves.log",
        benchmark:
            bench("pfi_curves")
        localrule: CPU_LOCAL
        conda:
            "../envs/analysis.yaml"
        resources:
            **CPU_STEP,
        shell:
            "wattlife aggregate-curves {input:q} -o {output:q} > {log:q} 2>&1"

else:

    rule powercap_sweep:
        output:
            config=f"{RES}/powercap/config.json",
            curves=report(
                f"{RES}/tables/curves.csv", caption="../report/tables-pfi.rst", category="tables"
            ),
        log:
            f"{RES}/logs/powercap_sweep.log",
        benchmark:
            bench("powercap_sweep")
        localrule: CPU_LOCAL
        conda:
            "../envs/analysis.yaml"
        resources:
            **CPU_STEP,
        params:
            slice=slice_of(lambda wc: J.powercap_sweep_slice(config)),
        shell:
            "printf '%s\\n' {params.slice:q} > {output.config:q} && wattlife sweep --config {output.config:q} -o {output.curves:q} > {log:q} 2>&1"


rule pfi:
    input:
        f"{RES}/tables/curves.csv",
    output:
        report(f"{RES}/tables/pfi.csv", caption="../report/tables-pfi.rst", category="tables"),
    log:
        f"{RES}/logs/pfi.log",
    benchmark:
        bench("pfi")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        mc=CFG.analysis.pfi_mc,
    shell:
        "wattlife pfi {input:q} -o {output:q} --mc {params.mc} > {log:q} 2>&1"


rule predictor:
    input:
        curves=f"{RES}/tables/curves.csv",
        pfi=f"{RES}/tables/pfi.csv",
    output:
        table=report(
            f"{RES}/tables/predictor.csv", caption="../report/tables-pfi.rst", category="tables"
        ),
        features=report(
            f"{RES}/tables/predictor_features.csv",
            caption="../report/tables-pfi.rst",
            category="tables",
        ),
    log:
        f"{RES}/logs/predictor.log",
    benchmark:
        bench("predictor")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    shell:
        "wattlife predict {input.curves:q} --pfi {input.pfi:q} -o {output.table:q} > {log:q} 2>&1"


rule allocate:
    input:
        curves=f"{RES}/tables/curves.csv",
        pfi=f"{RES}/tables/pfi.csv",
    output:
        rows=report(
            f"{RES}/tables/allocation.csv", caption="../report/tables-pfi.rst", category="tables"
        ),
        summary=report(
            f"{RES}/tables/allocation_summary.csv",
            caption="../report/tables-pfi.rst",
            category="tables",
        ),
    log:
        f"{RES}/logs/allocate.log",
    benchmark:
        bench("allocate")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        options=J.allocate_options(CFG.analysis),
    shell:
        "wattlife allocate {input.curves:q} --pfi {input.pfi:q} -o {output.rows:q} {params.options}"
        " > {log:q} 2>&1"
