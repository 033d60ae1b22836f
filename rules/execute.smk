# Execution stage: one job per cell of workload x storage x checkpoint x repeat, under the sampler.
# Custody (wattlife.custody, docs/CUSTODY.md "Custody of a measurement"): the measuring job
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
# One measuring rule per workload kind (`execute`; `execute_tokenizer`: causal LMs that train
# their tokenizer), the repeat a wildcard. Repeats run in rounds (`round_done` below): repeat r of
# every cell before repeat r + 1 of any, on any Snakemake; where Snakemake evaluates a priority
# function per job (9.27.1; not 9.14.8, the lock's), the repeat's priority
# (wattlife.jobs.repeat_priority) also says it. Within a round the cells run in a seeded order
# (`execution.order_seed`; `turn_done` below chains them where measurements run one at a time:
# common.smk, ORDER_ENFORCED), each cell's place recorded in its meta.json (`--order`).
# Checkpoints: `wattlife measure` removes the cell's checkpoint folder
# (<storage root>/checkpoints/<run id>/, wattlife.workloads.checkpoint_space) when the job ends,
# but the upload cell's, which `upload` removes once it is sealed.
# Measure one cell again (and everything downstream of it): `wattlife retire <results> <cell>`,
# then `snakemake ... --forcerun <results>/runs/<cell>/trace.csv` (a --forcerun alone adopts the
# sealed result again: a cell is never measured twice by accident).


# the execution matrix's workloads (a PFI run has none: its targets are the sweeps); causal-LM
# workloads that train their tokenizer in the cell's work folder
_MATRIX_WORKLOADS = [] if pfi_run() else list(EXE.workloads)
_TOKENIZER_WORKLOADS = [
    w
    for w in _MATRIX_WORKLOADS
    if CFG.workloads[w].kind == "causal_lm" and not CFG.workloads[w].pretrained
]
EXECUTE_KINDS = {
    "execute": [w for w in _MATRIX_WORKLOADS if w not in _TOKENIZER_WORKLOADS],
    "execute_tokenizer": _TOKENIZER_WORKLOADS,
}


# Rounds of repeats: repeat r + 1 of a cell starts after repeat r of every cell has ended
# (`round_done`, a local step listing round r's pointers), whatever the Snakemake (9.14.8 takes
# no priority of the wildcards). Its file is an ancient() input: a later round is never rerun
# because an earlier cell was (Snakemake skips a job whose inputs from a rerun job are all
# ancient and present). A cell that fails holds back the later rounds until it is measured.
if _MATRIX_WORKLOADS and EXE.repeats > 1:

    rule round_done:
        input:
            round_pointers,
        output:
            ROUND,
        wildcard_constraints:
            round="[0-9]+",
        localrule: True
        shell:
            "printf '%s\\n' {input:q} > {output:q}"


# Turns within a round (common.smk, ORDER_ENFORCED): the end of the cell at position p of round
# r, which the cell at p + 1 waits for (an ancient() input, as a round's end).
if _MATRIX_WORKLOADS and ORDER_ENFORCED:

    rule turn_done:
        input:
            turn_pointer,
        output:
            TURN,
        wildcard_constraints:
            round="[0-9]+",
            position="[0-9]+",
        localrule: True
        shell:
            "printf '%s\\n' {input:q} > {output:q}"


for _kind, _workloads in EXECUTE_KINDS.items():
    if not _workloads:
        continue

    rule:
        name:
            _kind
        input:
            data=lambda wc: dataset_input(wc.workload),
            after=round_gate,
            turn=order_gate,
        output:
            pointer=f"{CELL}/sealed-{{slicehash}}.json",
        log:
            f"{CELL}/execute-{{slicehash}}.log",
        wildcard_constraints:
            workload="|".join(map(re.escape, _workloads)),
            slicehash="[0-9a-f]{16}",
        priority: REPEAT_PRIORITY
        conda:
            "../envs/training.yaml"
        threads: NODE_CORES  # a local run: the whole machine, nothing else beside a measurement
        resources:
            **measuring(),  # whole nodes: --exclusive --mem=0 + slurm.extra, any node size (common.smk)
            **S.node_request(EXE.nodes, cell_gpus()),  # --nodes=N, --gres=gpu:G or --ntasks=N
            runtime=EXE.runtime_min,
        params:
            slice=slice_of(cell_slice),
            cell=lambda wc: J.cell_id(wc.workload, wc.storage, wc.checkpoint, wc.repeat),
            order=cell_order,  # its place in its round (recorded in meta.json)
            results=lambda wc: RES,
            # the cell's checkpoint folder is removed when the job ends, but the upload cell's
            # (the upload step reads it, then removes it: rules/prepare.smk)
            keep=lambda wc: (
                "--keep-checkpoint"
                if J.cell_id(wc.workload, wc.storage, wc.checkpoint, wc.repeat) == PREP.upload_cell
                else ""
            ),
        shell:
            "wattlife measure --results {params.results:q} --cell {params.cell:q}"
            " --slice {params.slice:q} --pointer {output.pointer:q} --order {params.order:q}"
            " {params.keep}"
            " > {log:q} 2>&1"


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
            # where the current slice's pointer is missing (a changed slice): a request written
            # now, so a cell's file asked for alone (its trace.csv, meta.json) remakes the cell
            wanted=cell_wanted,
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
        benchmark:
            bench(f"link_cell{_kind[len('execute'):]}", CELL_KEY)
        wildcard_constraints:
            workload="|".join(map(re.escape, _workloads)),
        localrule: CPU_LOCAL
        conda:
            "../envs/analysis.yaml"
        resources:
            **CPU_STEP,
        params:
            cell=lambda wc: J.cell_id(wc.workload, wc.storage, wc.checkpoint, wc.repeat),
            results=lambda wc: RES,
        shell:
            "wattlife relink {params.results:q} {params.cell:q} > {log:q} 2>&1"
