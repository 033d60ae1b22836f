# Figures from tables (never from raw state).


rule figures:
    input:
        summary=f"{RES}/tables/phase_summary.csv",
        share=f"{RES}/tables/device_share.csv",
        deltas=f"{RES}/tables/storage_checkpoint.csv",
        elasticity=lambda wc: (
            [
                os.path.join(RES, "tables", t)
                for t in ("curves.csv", "pfi.csv", "predictor.csv", "allocation_summary.csv")
            ]
            if config.get("powercap", {}).get("jobs")
            else []
        ),
    output:
        [
            report(path, caption=f"../report/{os.path.basename(path).split('_')[0]}.rst", category="figures")
            for path in figure_targets()
        ],
    log:
        f"{RES}/logs/figures.log",
    conda:
        "../envs/wattlife.yaml"
    script:
        "../scripts/figures.py"
