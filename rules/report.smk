# Figures from tables (never from raw state).


rule figures:
    input:
        phases=lambda wc: (
            []
            if pfi_run()
            else [
                os.path.join(RES, "tables", t)
                for t in (
                    "phase_summary.csv",
                    "device_share.csv",
                    "storage_checkpoint.csv",
                    "waiting_runs.csv",
                    "waiting.csv",
                )
            ]
        ),
        elasticity=lambda wc: (
            [
                os.path.join(RES, "tables", t)
                for t in ("curves.csv", "pfi.csv", "predictor.csv", "allocation_summary.csv")
            ]
            if CFG.powercap.jobs
            else []
        ),
        prepare=lambda wc: (
            [
                os.path.join(RES, "tables", t)
                for t in ("downloads.csv", "download_fit.csv", "staging_breakeven.csv")
            ]
            if PREP.catalogue and not pfi_run()
            else []
        ),
    output:
        [
            report(
                path,
                caption=f"../report/{os.path.basename(path).split('_')[0]}.rst",
                category="figures",
            )
            for path in figure_targets()
        ],
        pdf=[re.sub(r"\.png$", ".pdf", path) for path in figure_targets()],
    log:
        f"{RES}/logs/figures.log",
    benchmark:
        bench("figures")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        tables=lambda wc, input: os.path.join(RES, "tables"),
    script:
        "../scripts/figures.py"
