# Power elasticity: cap sweeps -> curves -> PFI -> predictor -> allocation simulation.


PFI_CELLS = config.get("pfi_matrix", {}).get("cells", {})

if PFI_CELLS:  # the PFI study's matrix: one sweep job per cell, on that cell's GPUs

    rule pfi_cell_sweep:
        input:
            config=f"{RES}/config.yaml",
        output:
            f"{RES}/pfi/{{pcell}}/curves.csv",
        log:
            f"{RES}/pfi/{{pcell}}/sweep.log",
        wildcard_constraints:
            pcell="|".join(map(re.escape, PFI_CELLS)),
        conda:
            "../envs/wattlife.yaml"
        threads: 256  # a whole node: nothing else may share the GPUs while caps change
        resources:
            gpu=lambda wc: min(PFI_CELLS[wc.pcell]["gpus"], 8),  # per node: the plugin's --gpus
            nodes=lambda wc: -(-PFI_CELLS[wc.pcell]["gpus"] // 8),
            runtime=lambda wc: 60 + 8 * int(config["pfi_matrix"].get("duration_s", 1800)) // 60,
        shell:
            "wattlife pfi-sweep --config {input.config} --cell {wildcards.pcell} -o {output} > {log} 2>&1"

    rule pfi_curves:
        input:
            expand(f"{RES}/pfi/{{pcell}}/curves.csv", pcell=PFI_CELLS),
        output:
            f"{RES}/tables/curves.csv",
        log:
            f"{RES}/logs/pfi_curves.log",
        conda:
            "../envs/wattlife.yaml"
        shell:
            "wattlife aggregate-curves {input} -o {output} > {log} 2>&1"

else:

    rule powercap_sweep:
        input:
            config=f"{RES}/config.yaml",
        output:
            f"{RES}/tables/curves.csv",
        log:
            f"{RES}/logs/powercap_sweep.log",
        conda:
            "../envs/wattlife.yaml"
        shell:
            "wattlife sweep --config {input.config} -o {output} > {log} 2>&1"


rule pfi:
    input:
        f"{RES}/tables/curves.csv",
    output:
        f"{RES}/tables/pfi.csv",
    log:
        f"{RES}/logs/pfi.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        mc=config.get("analysis", {}).get("pfi_mc", 2000),
    shell:
        "wattlife pfi {input} -o {output} --mc {params.mc} > {log} 2>&1"


rule predictor:
    input:
        curves=f"{RES}/tables/curves.csv",
        pfi=f"{RES}/tables/pfi.csv",
    output:
        table=f"{RES}/tables/predictor.csv",
        features=f"{RES}/tables/predictor_features.csv",
    log:
        f"{RES}/logs/predictor.log",
    conda:
        "../envs/wattlife.yaml"
    shell:
        "wattlife predict {input.curves} --pfi {input.pfi} -o {output.table} > {log} 2>&1"


rule allocate:
    input:
        curves=f"{RES}/tables/curves.csv",
        pfi=f"{RES}/tables/pfi.csv",
    output:
        rows=f"{RES}/tables/allocation.csv",
        summary=f"{RES}/tables/allocation_summary.csv",
    log:
        f"{RES}/logs/allocate.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        a=config.get("analysis", {}),
        cuts=",".join(str(c) for c in config.get("analysis", {}).get("allocation_cuts", [0, 0.1, 0.2, 0.3, 0.4])),
    shell:
        "wattlife allocate {input.curves} --pfi {input.pfi} -o {output.rows} --cuts {params.cuts}"
        " --workloads {params.a[allocation_workloads]} --jobs {params.a[allocation_jobs]}"
        " --mix {params.a[allocation_mix]} > {log} 2>&1"
