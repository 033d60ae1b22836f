# The PFI study's allocation experiment on its own 25 jobs (curves of the simulated GPU calibrated
# to the published PFIs) with the public A100 sweeps beside it. Not part of `all`; ask for it:
#   snakemake --cores 2 pfi_study          -> {RES}/pfi-study/ (tables + figures)
# The committed copy in results/reference/pfi-study/ came from `wattlife pfi-study` (its README).


rule pfi_study:
    input:
        jobs="results/reference/pfi-study/published/pfi-study-jobs.csv",
        a100="results/reference/a100-emerald/dvfs_sweep.csv",
    output:
        gaps=f"{RES}/pfi-study/gap_recovered.csv",
        summary=f"{RES}/pfi-study/allocation_summary.csv",
        pfi=f"{RES}/pfi-study/pfi_calibrated.csv",
        a100=f"{RES}/pfi-study/allocation_a100_summary.csv",
        figure=f"{RES}/pfi-study/fig_allocation_calibrated.png",
        sensitivity=f"{RES}/pfi-study/sensitivity.csv",
    log:
        f"{RES}/logs/pfi_study.log",
    benchmark:
        bench("pfi_study")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        out=lambda wc, output: os.path.dirname(output.gaps),
        workloads=CFG.analysis.pfi_study_workloads,
        jobs=CFG.analysis.pfi_study_jobs,
    shell:
        "wattlife pfi-study -o {params.out:q} --a100 {input.a100:q} --workloads {params.workloads}"
        " --jobs {params.jobs} > {log:q} 2>&1"
