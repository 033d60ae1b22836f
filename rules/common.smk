# Helpers shared by the rules: the matrix of cells, each job's own config slice, the run's output
# paths and what each job asks the scheduler for. The logic lives in the package
# (wattlife.config: the typed, defaults-filled config CFG; wattlife.jobs: slices, sizes and the
# analysis commands' options; wattlife.launch: the measured job's command line). Rules read CFG,
# never `config.get(key, default)`: every default is the schema's.
import dataclasses
import json
import os
import re
import shlex
import sys
import types

import snakemake.rules

from wattlife import jobs as J
from wattlife import slurm_orphans as O
from wattlife import slurm_preflight as P
from wattlife import slurm_site as S
from wattlife.config import settings
from wattlife import custody as C
from wattlife.launch import LaunchSpec, run_files

CFG = settings(config)  # validated and defaults-filled by the Snakefile
RES = CFG.results_dir
EXE = CFG.execution
CELL_KEY = "{workload}/{storage}/ckpt-{checkpoint}/r{repeat}"
CELL = f"{RES}/runs/{CELL_KEY}"


def bench(step, key=""):
    """The benchmark file of a step (Snakemake's wall time, memory and CPU of the job), under
    <results>/benchmarks/<step>/; only CPU steps have one: on a measuring job (a training cell,
    a PFI cap, a transfer) Snakemake's polling of the job's processes would run inside the
    measured window and add load the CPU estimate and RAPL see, and the measurement's own
    trace and meta.json already give its time and energy."""
    return f"{RES}/benchmarks/{step}/{key or step}.tsv"


wildcard_constraints:
    workload="[A-Za-z0-9_.-]+",
    storage="shared|local",
    checkpoint="on|off|sync|async",
    repeat="[0-9]+",


# --- scheduler resources -------------------------------------------------------------------
# Site values (account, partitions) come from the config's `slurm` section, never from the rules.
SLURM = CFG.slurm


def site_resources(partition=None):
    r = {}
    if SLURM.account:
        r["slurm_account"] = SLURM.account
    if partition:
        r["slurm_partition"] = partition
    return r


# small CPU steps: in the CPU partition named in the config, else on the submit host (their
# local flag is CPU_LOCAL; measuring jobs are never local jobs of a Slurm run)
CPU_STEP = site_resources(SLURM.cpu_partition)
CPU_LOCAL = not SLURM.cpu_partition
# measuring jobs own their nodes, whatever their size (wattlife.slurm_site): Slurm's --exclusive,
# --mem=0 (SBATCH_MEM_PER_NODE), one CPU for the executor's step (the measurement runs in a
# whole-node step of its own, wattlife.launch); the partition / constraint of the job's hardware
# (`slurm.partitions`, `slurm.constraints`). A user's own sbatch flags (`slurm.extra`) are added
# after the suite's, on every measuring job.
# A local run: the declared `exclusive_node` resource (one at a time, profiles/local).
MEASURING_RULES = ("execute", "execute_tokenizer", "pfi_cap", "pfi_cap_multinode")


S.whole_node_memory(os.environ)  # sbatch without --mem (measuring jobs): each node's whole memory


def measuring(hardware=None):
    """The Slurm resources of a measuring job on `hardware` (a training cell: None)."""
    return {**S.measuring_resources(SLURM, hardware), "exclusive_node": 1}


def measuring_by(key, table):
    """Resources that differ between the wildcards `key` of a rule: each a function of them
    (None: not asked for this job)."""
    names = sorted({k for res in table.values() for k in res})
    return {n: (lambda wc, n=n: table[wc[key]].get(n)) for n in names}


def refuse_rule_slurm_extra():
    """A user's own sbatch flags go in `slurm.extra` (merged after the suite's by
    wattlife.slurm_site.measuring_resources); `--set-resources <rule>:slurm_extra=...` on a
    measuring rule would replace --exclusive, so it is refused with one line saying so."""
    over = workflow.resource_settings.overwrite_resources or {}
    named = sorted(r for r in MEASURING_RULES if "slurm_extra" in (over.get(r) or {}))
    if named:
        raise WorkflowError(
            f"--set-resources {named[0]}:slurm_extra=... would replace the flags every "
            "measuring job needs (--exclusive): give your own sbatch flags in the config "
            "instead, --config 'slurm={extra: \"...\"}' (or `slurm.extra` in config/site.yaml)"
        )


refuse_rule_slurm_extra()
try:
    NODE_CORES = int(workflow.cores)
except Exception:  # a cluster run without --cores: the jobs' own sizes apply
    NODE_CORES = 1


def _global(name):
    v = workflow.global_resources.get(name)
    return getattr(v, "value", v)


# transfers one at a time unless the user raises it (`--resources transfers=N`). (`exclusive_node`
# has no global limit here: on Slurm each measuring job has its node to itself; profiles/local
# allows one at a time.)
if _global("transfers") is None:
    workflow.register_resource("transfers", 1)
TRANSFERS_AT_ONCE = _global("transfers")


def repeat_priority(wildcards):
    """A cell's priority from its repeat wildcard: earlier repeats first."""
    return J.repeat_priority(int(wildcards.repeat), EXE.repeats)


# Snakemake >= 9.27 evaluates a callable priority per job; 9.14.8 refuses anything but a number
REPEAT_PRIORITY = repeat_priority if hasattr(snakemake.rules.Rule, "expand_priority") else 0


def slice_of(make):
    """params entry: the job's own config slice as sorted-keys JSON (a changed slice reruns it)."""
    return lambda wc: J.canonical(make(wc))


def wanted(pointer, slice_doc):
    """The measurement request of a measuring job whose current pointer is missing
    (wattlife.custody.wanted, written by the main process only): an input of the rule below it
    that reads its pointer, so that any target below the measurement remakes it when its slice
    changed, with or without Snakemake's metadata; nothing where the pointer is there. Only a run
    writes it into the results folder; a dry run (or a DAG listing: `--summary`, `--dag`) writes
    it into Snakemake's own temporary folder, removed when it exits."""
    running = workflow.executor_plugin is not None and not workflow.dryrun
    scratch = None if running else workflow.snakemake_tmp_dir
    return C.wanted(RES, pointer, slice_doc, write=workflow.is_main_process, scratch=scratch)


# --- preparation / post-execution (rules/prepare.smk) -------------------------------------
PREP = CFG.prepare
CATALOGUE = {e["name"]: e for e in PREP.catalogue or ()}
XFER = f"{RES}/transfers/{{artefact}}"
SERVED = f"{RES}/prepare/served"


def transfer_names():
    return list(CATALOGUE) + (["upload"] if PREP.upload_cell else [])


def transfer_slice(artefact):
    """A transfer's config slice: a download's, or the upload's."""
    if artefact == "upload":
        return J.upload_slice(config, TRANSFERS_AT_ONCE)
    return J.download_slice(config, artefact, TRANSFERS_AT_ONCE)


def transfer_pointer(artefact):
    """The transfer's published pointer for its current slice (wattlife.custody), as a cell's."""
    folder = XFER.format(artefact=artefact)
    return f"{folder}/{C.pointer_name(C.slice_hash(transfer_slice(artefact)))}"


def transfer_wanted(artefact):
    """link_transfer's / link_upload's input: the transfer's request (as a cell's: every file
    below it, its phases.csv, the downloads tables, remakes a transfer whose slice changed)."""
    return wanted(transfer_pointer(artefact), transfer_slice(artefact))


def placement(where):
    """Resources of a transfer job placed `where` (login: a local rule; else a partition)."""
    return {} if where == "login" else site_resources(where)


def fetch_args(wc, input):
    """The client and its arguments for one catalogue entry."""
    e = CATALOGUE[wc.artefact]
    if e["source"] == "generated":
        sha = json.loads(open(input.manifest).read())[wc.artefact]["sha256"]
        rate = PREP.loopback_rate_mbps
        return (
            f"--url /{wc.artefact}.bin --serve-dir {shlex.quote(os.path.dirname(input.manifest))}"
            f" --sha256 {sha}" + (f" --rate-mbps {rate}" if rate else "")
        )
    flag = {"hf": "--hf", "kaggle": "--kaggle", "http": "--url", "path": "--path"}[e["source"]]
    extra = f" --sha256 {e['sha256']}" if e.get("sha256") else ""
    extra += f" --revision {e['revision']}" if e.get("revision") else ""
    return f"{flag} {shlex.quote(str(e['id']))}{extra}"


# --- the execution matrix -------------------------------------------------------------------
def cells():
    """Every (workload, storage, checkpoint, repeat) of the execution matrix."""
    return [dataclasses.asdict(c) for c in CFG.cells()]


CELL_SPEC = LaunchSpec.for_execution(EXE)
CELL_FILES = run_files(CELL, CELL_SPEC)  # what a cell's launch writes, declared by `execute`


def cell_slice(wc):
    return J.cell_slice(config, wc.workload, wc.storage, wc.checkpoint, wc.repeat)


def cell_pointer(wc):
    """The cell's published pointer for its current slice (wattlife.custody): its name holds the
    slice's hash, so a changed slice is a missing file."""
    cell = CELL.format(
        workload=wc.workload, storage=wc.storage, checkpoint=wc.checkpoint, repeat=wc.repeat
    )
    return f"{cell}/{C.pointer_name(C.slice_hash(cell_slice(wc)))}"


def cell_wanted(wc):
    """link_cell's input: the cell's request (every file below it, its linked files, check.txt,
    phases.csv, the tables and figures, remakes a cell whose slice changed)."""
    return wanted(cell_pointer(wc), cell_slice(wc))


# Rounds of repeats (rules/execute.smk, `round_done`): repeat r + 1 of a cell waits for the end
# of round r, an ancient() input (a re-measured earlier cell reruns no later round)
ROUND = f"{RES}/rounds/r{{round}}.done"


def round_gate(wc):
    """The end of the previous round, for a cell's repeat >= 2 (none for repeat 1)."""
    r = int(wc.repeat)
    return [ancient(ROUND.format(round=r - 1))] if r > 1 else []


def round_pointers(wc):
    """The published pointers of every cell of round `wc.round`."""
    return [
        cell_pointer(types.SimpleNamespace(**c))
        for c in cells()
        if int(c["repeat"]) == int(wc.round)
    ]


# The order within a round (execution.order_seed): each round's cells run in a seeded permutation
# (wattlife.jobs.round_orders, a new one per round), recorded in each cell's meta.json (`cell`).
# Snakemake 9.14.8 starts ready jobs of equal priority in no order of the workflow's (its sets
# of jobs hash by memory address: not the order of the inputs that request them, not the same
# from one run to the next), so where measurements run one at a time anyway (a global
# `exclusive_node` limit of 1: profiles/local) the order is enforced: the cell at position p
# waits for the turn file of position p - 1 (`turn_done`, an ancient() input, as a round's end:
# a re-measured cell reruns no later one). On a cluster nothing waits (a round's cells run side by
# side): the position is the plan, recorded as such (`order_enforced` false).
ORDER_SEED = EXE.order_seed if EXE is not None else None
ORDER_ENFORCED = ORDER_SEED is not None and _global("exclusive_node") == 1
ORDER = J.cell_positions([(c.id, c.repeat) for c in CFG.cells()], ORDER_SEED, ORDER_ENFORCED)
TURN = f"{RES}/rounds/r{{round}}/p{{position}}.done"
TURNS = {
    (c.repeat, ORDER[c.id]["round_position"]): dataclasses.asdict(c)
    for c in CFG.cells()
    if ORDER[c.id]["round_position"]
}


def _cell_of(wc):
    return J.cell_id(wc.workload, wc.storage, wc.checkpoint, wc.repeat)


def order_gate(wc):
    """The turn of the cell before this one in its round (none: the first, or not enforced)."""
    pos = ORDER[_cell_of(wc)]["round_position"]
    if not ORDER_ENFORCED or pos == 1:
        return []
    return [ancient(TURN.format(round=int(wc.repeat), position=pos - 1))]


def turn_pointer(wc):
    """The published pointer of the cell at position `wc.position` of round `wc.round`."""
    return cell_pointer(types.SimpleNamespace(**TURNS[(int(wc.round), int(wc.position))]))


def cell_order(wc):
    """params entry: the cell's place in its round as JSON (`wattlife measure --order`)."""
    return J.canonical(ORDER[_cell_of(wc)])


def cell_gpus():
    """GPUs per node a cell asks for: none for the simulated GPU."""
    return 0 if CFG.sampler.gpu == "sim" else EXE.gpus_per_node


ATTRIBUTION = CFG.attribution


def attribute_options():
    """`wattlife attribute` options from the `attribution` section."""
    return J.attribute_options(ATTRIBUTION)


def sensor_response_file():
    """The sensor-response CSV as an input (a changed response reruns the attribution)."""
    return [ATTRIBUTION.response_file] if ATTRIBUTION.response_file else []


def estimated_response(path):
    """With `sensor_response: estimate` attribution writes the estimated lag weights beside its
    output: declared."""
    if ATTRIBUTION.sensor_response != "estimate":
        return []
    return [re.sub(r"\.csv$", "_sensor_response.csv", path)]


def cell_files(name):
    return [os.path.join(CELL.format(**c), name) for c in cells()]


def prepared_by_rule(dataset):
    """What a cell reading `dataset` waits for: the folder where a rule makes it (the demo's
    generated data), the download's record where the catalogue names it (a training cell never
    starts before its dataset is fetched); a dataset prepared outside the workflow is checked by
    the workload itself (a clear error)."""
    if dataset in CFG.data.defined:
        return [os.path.join(CFG.storage["shared"], dataset)]
    if dataset in CATALOGUE:
        return [os.path.join(XFER.format(artefact=dataset), "record.json")]
    return []


def dataset_input(workload):
    return prepared_by_rule(CFG.workloads[workload].dataset)


def pfi_run():
    """A config with `pfi_matrix` is a PFI run: its targets are the sweeps and what follows them."""
    return CFG.pfi_run


def figure_targets():
    if pfi_run():
        return [
            f"{RES}/figures/{f}.png"
            for f in ("fig6_power_throughput", "fig7_pfi", "fig8_allocation")
        ]
    figs = ["fig1_phase_energy_time", "fig2_device_share"]
    if (
        "shared" in EXE.storage
        and "off" in EXE.checkpoint
        and len(EXE.storage) * len(EXE.checkpoint) > 1
    ):
        figs += ["fig3_storage_checkpoint"]  # a cell beside the shared / checkpoint-off baseline
    figs += ["fig9_waiting"]
    if PREP.catalogue:
        figs += ["fig4_download_size", "fig5_staging_breakeven"]
    if CFG.powercap.jobs:
        figs += ["fig6_power_throughput", "fig7_pfi", "fig8_allocation"]
    return [f"{RES}/figures/{f}.png" for f in figs]


def all_targets():
    if pfi_run():
        return figure_targets() + [
            f"{RES}/tables/{t}.csv" for t in ("pfi", "predictor", "allocation_summary")
        ]
    out = figure_targets() + [f"{RES}/tables/phase_summary.csv"]
    if CFG.powercap.jobs:
        out += [f"{RES}/tables/pfi.csv", f"{RES}/tables/predictor.csv"]
    if PREP.catalogue:
        out += [f"{RES}/tables/download_fit.csv", f"{RES}/tables/facility_cache.csv"]
    return out


# --- the PFI matrix (rules/powercap.smk): one job per (cell, cap) ----------------------------
PFI_MATRIX = CFG.pfi_matrix
PFI_CELLS = PFI_MATRIX.cells if PFI_MATRIX else {}
PCAP = f"{RES}/pfi/{{pcell}}/cap-{{cap}}"
# where a (cell, cap) job's training writes its checkpoint: <storage.shared>/checkpoints/<run id>
PFI_CHECKPOINT = os.path.join(
    os.path.expandvars(CFG.storage["shared"]), "checkpoints", "{pcell}-cap{cap}"
)
PFI_CAPS = {name: CFG.cell_caps(cell) for name, cell in PFI_CELLS.items()}


def pfi_shape(name):
    """(nodes, GPUs per node) of a PFI cell: its GPUs over its hardware profile's nodes."""
    cell = PFI_CELLS[name]
    return J.nodes_for(cell.gpus, CFG.cell_hardware(cell).gpus_per_node)


def pfi_cap_files(name):
    return [f"{RES}/pfi/{name}/cap-{c:g}/curve-point.csv" for c in PFI_CAPS[name]]


def pfi_cap_slice(wc):
    return J.pfi_cap_slice(config, wc.pcell, float(wc.cap))


def pfi_cap_pointer(wc):
    """The cap's published pointer for its current slice (wattlife.custody): as a cell's, its
    name holds the slice's hash, so a changed slice is a missing file."""
    cap = PCAP.format(pcell=wc.pcell, cap=wc.cap)
    return f"{cap}/{C.pointer_name(C.slice_hash(pfi_cap_slice(wc)))}"


def pfi_cap_wanted(wc):
    """link_pfi_cap's input: the cap's request (its curve point, the cell's curves.csv and the
    PFI tables remake a cap whose slice changed)."""
    return wanted(pfi_cap_pointer(wc), pfi_cap_slice(wc))


PFI_MULTI = {n for n in PFI_CELLS if pfi_shape(n)[0] > 1}


def measurement_pointers():
    """Every measuring job's pointer for its current slice (wattlife.custody.cells.matrix: a PFI
    run's caps, else the cells and, with a catalogue, the transfers). Snakemake (9.x) remakes a
    missing file only for a job that runs: as inputs of a target rule (`all`, `measurements`), a
    changed slice's missing pointer makes its measuring job and all that follows run, whatever
    Snakemake's metadata says."""
    if pfi_run():
        return [
            pfi_cap_pointer(types.SimpleNamespace(pcell=name, cap=f"{cap:g}"))
            for name, caps in PFI_CAPS.items()
            for cap in caps
        ]
    out = [cell_pointer(types.SimpleNamespace(**c)) for c in cells()]
    if PREP.catalogue:
        out += [transfer_pointer(a) for a in transfer_names()]
    return out


# each cell's Slurm resources: on the partition / constraint of its hardware profile
PFI_RES = {n: measuring(c.hardware or CFG.powercap.hardware) for n, c in PFI_CELLS.items()}


def pfi_dataset_input():
    """The protocol's dataset as an input where a rule makes it (tests, demo data)."""
    return prepared_by_rule(PFI_MATRIX.dataset)


# Site values checked before anything is submitted (wattlife.slurm_preflight): each unknown
# partition, feature or account and each path that cannot exist is said when the controller
# reads the Snakefile (a dry run too); a Slurm run stops at its start (onstart), before any sbatch.
SITE_FACTS = None
SITE_PROBLEMS = []
if workflow.is_main_process:
    if P.names_slurm_values(SLURM, PREP):
        SITE_FACTS = P.query_facts()
    SITE_PROBLEMS = P.site_problems(SLURM, PREP, CFG.storage, SITE_FACTS)
    for _line in SITE_PROBLEMS + P.unchecked_notes(SLURM, SITE_FACTS):
        print(f"wattlife: {_line}", file=sys.stderr)


onstart:
    # the controller only: a Slurm run on a cluster without accounting would wait forever for
    # sacct to see its first job end; say which flag to add instead
    plugin = workflow.executor_plugin
    on_slurm = plugin is not None and plugin.name == "slurm"
    if on_slurm:
        why = S.status_preflight(getattr(workflow.executor_settings, "status_command", None))
        if why:
            raise WorkflowError(why)
        # the site values (above) stop a Slurm run here; a local run only says them (figures
        # from cached tables, say, touch no storage)
        problems = P.start_problems(SLURM, PREP, CFG.storage, SITE_FACTS or P.query_facts())
        if problems:
            raise WorkflowError(P.stop_message(problems))
    # one controller per results folder (wattlife.custody.controller), whatever Snakemake's locks
    try:
        C.take_controller(RES)
    except RuntimeError as exc:
        raise WorkflowError(str(exc)) from None
    if on_slurm:  # this run's jobs, for `wattlife slurm-orphans RESULTS` (its log's run ID)
        name = O.run_name_from_logs(log)
        if name:
            O.record_run(RES, name)
        else:
            print(
                f"wattlife: no SLURM run ID in {log}: `wattlife slurm-orphans {RES}` will not "
                "know this run's jobs (--name <run ID> will)",
                file=sys.stderr,
            )


onsuccess:
    C.release_controller(RES)


onerror:
    C.release_controller(RES)
