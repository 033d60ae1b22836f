# Execution stage: one job per cell of workload x storage x checkpoint x repeat, under the sampler.
# Custody (wattlife.custody, docs/ARCHITECTURE.md "Custody of a measurement"): the measuring job
# (`wattlife measure`) writes an attempt folder of its own, <results>/attempts/<cell>/<id>/, which
# no rule declares (so Snakemake never deletes it), seals it and publishes it: hard links in the
# cell folder and the pointer sealed-<slice hash>.json, the one output of `execute`. The slice
# hash is in the pointer's name: a changed slice is a missing output (the cell is measured again),
# an unchanged one an existing output, whoever published it (an orphan of a killed controller
# too). A job that finds a live earlier attempt of its cell waits for it, and one that finds a
# sealed result of its slice adopts it (measures nothing). The launcher's command line is built
# inside the job from the slice, so a change in how it is built reruns nothing by itself.
# `link_cell` declares the cell's files (what the downstream rules read): links from the published
# attempt, made again whenever it runs. Each cell's params are its own config slice
# (wattlife.jobs.cell_slice), written into the attempt as config.json and read as its config.
# Repeats are spread in time: one rule per repeat index (`execute` is repeat 1, `execute_r<N>`
# repeat N), each with a priority that falls with N (wattlife.jobs.repeat_priority), so the
# scheduler runs repeat r of every cell before repeat r + 1 of any (locally, where measuring jobs
# run one at a time; on Slurm, the order in which they are submitted and queued).
# Measure one cell again (and everything downstream of it): `wattlife retire <results> <cell>`,
# then `snakemake ... --forcerun <results>/runs/<cell>/trace.csv` (a --forcerun alone adopts the
# sealed result again: a cell is never measured twice by accident).


# causal-LM workloads that train their tokenizer in the cell's work folder
_TOKENIZER_WORKLOADS = [
    w
    for w in EXE.workloads
    if CFG.workloads[w].kind == "causal_lm" and not CFG.workloads[w].pretrained
]
EXECUTE_KINDS = {
    "execute": [w for w in EXE.workloads if w not in _TOKENIZER_WORKLOADS],
    "execute_tokenizer": _TOKENIZER_WORKLOADS,
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
            pointer=f"{CELL}/sealed-{{slicehash}}.json",
        log:
            f"{CELL}/execute-{{slicehash}}.log",
        wildcard_constraints:
            workload="|".join(map(re.escape, _workloads)),
            repeat=str(_repeat),
            slicehash="[0-9a-f]{16}",
        priority: J.repeat_priority(_repeat, EXE.repeats)
        conda:
            "../envs/training.yaml"
        threads: NODE_CORES  # a local run: the whole machine, nothing else beside a measurement
        resources:
            **measuring(),  # whole nodes: --exclusive --mem=0, any node size (common.smk)
            **S.node_request(EXE.nodes, cell_gpus()),  # --nodes=N, --gres=gpu:G or --ntasks=N
            runtime=EXE.runtime_min,
        params:
            slice=slice_of(cell_slice),
            cell=lambda wc: J.cell_id(wc.workload, wc.storage, wc.checkpoint, wc.repeat),
            results=lambda wc: RES,
        shell:
            "wattlife measure --results {params.results:q} --cell {params.cell:q}"
            " --slice {params.slice:q} --pointer {output.pointer:q} > {log:q} 2>&1"


for _kind, _workloads in EXECUTE_KINDS.items():
    if not _workloads:
        continue

    rule:
        name:
            f"link_cell{_kind[len('execute'):]}"
        input:
            # not ancient(): after a job of `execute` (one adopting an orphan's result included)
            # this and everything after it run again (the pointer is dated as the attempt's
            # oldest file, so an unchanged publication reruns nothing)
            pointer=cell_pointer,
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
            run_log=f"{CELL}/run.log",  # the measured command's output
        log:
            f"{CELL}/link.log",
        wildcard_constraints:
            workload="|".join(map(re.escape, _workloads)),
        conda:
            "../envs/analysis.yaml"
        resources:
            **CPU_STEP,
        params:
            cell=lambda wc: J.cell_id(wc.workload, wc.storage, wc.checkpoint, wc.repeat),
            results=lambda wc: RES,
        shell:
            "wattlife relink {params.results:q} {params.cell:q} > {log:q} 2>&1"
