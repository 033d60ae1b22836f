# Execution stage: one job per cell of workload x storage x checkpoint x repeat, under the sampler.
# Each cell's params are its own config slice (wattlife.jobs.cell_slice), written beside its
# outputs as config.json and read by the cell as its config: a change to another workload, to the
# analysis, or to the order of keys reruns nothing here.
# Repeats are spread in time: one rule per repeat index (`execute` is repeat 1, `execute_r<N>`
# repeat N), each with a priority that falls with N (wattlife.jobs.repeat_priority), so the
# scheduler runs repeat r of every cell before repeat r + 1 of any (locally, where measuring jobs
# run one at a time; on Slurm, the order in which they are submitted and queued).
# Rerun one cell (measured again, and everything downstream of it):
#   snakemake --profile profiles/local --forcerun <results>/runs/<workload>/<storage>/ckpt-<off|sync|async|on>/r<N>/trace.csv


def _tokenizer_workloads():
    """Causal-LM workloads that train their tokenizer in the cell's work folder."""
    return [
        w
        for w in EXE.workloads
        if CFG.workloads[w].kind == "causal_lm" and not CFG.workloads[w].pretrained
    ]


EXECUTE_KINDS = {
    "execute": [w for w in EXE.workloads if w not in _tokenizer_workloads()],
    "execute_tokenizer": _tokenizer_workloads(),
}

for (_kind, _workloads), _repeat in itertools.product(
    EXECUTE_KINDS.items(), range(1, EXE.repeats + 1)
):
    if not _workloads:
        continue
    _name = _kind if _repeat == 1 else f"{_kind}_r{_repeat}"

    rule:
        name:
            _name
        input:
            data=lambda wc: dataset_input(wc.workload),
        output:
            config=f"{CELL}/config.json",
            trace=CELL_FILES["trace"],
            events=CELL_FILES["events"],
            meta=CELL_FILES["meta"],
            summary=f"{CELL}/work/summary.json",
            ranks=CELL_FILES.get("ranks", []),
            nodes=directory(CELL_FILES["nodes"]) if "nodes" in CELL_FILES else [],
            clock=CELL_FILES.get("clock", []),
            tokenizer=(
                f"{CELL}/work/tokenizer/tokenizer.json" if _kind == "execute_tokenizer" else []
            ),
        log:
            f"{CELL}/run.log",
        wildcard_constraints:
            workload="|".join(map(re.escape, _workloads)),
            repeat=str(_repeat),
        priority: J.repeat_priority(_repeat, EXE.repeats)
        conda:
            "../envs/wattlife.yaml"
        threads: NODE_CORES  # a local run: the whole machine, nothing else beside a measurement
        resources:
            **measuring(),  # whole nodes: --exclusive, every CPU and all memory (common.smk)
            **({"gres": f"gpu:{cell_gpus()}"} if cell_gpus() else {}),  # per node: --gres=gpu:N
            nodes=EXE.nodes,
            runtime=EXE.runtime_min,
        params:
            slice=slice_of(cell_slice),
            cmd=train_command,
        shell:
            "printf '%s\\n' {params.slice:q} > {output.config:q} && ({params.cmd}) > {log:q} 2>&1"
