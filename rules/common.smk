# Helpers shared by the rules: the matrix of cells, each job's own config slice, the run's output
# paths and what each job asks the scheduler for. The logic lives in the package
# (wattlife.jobs: slices and sizes; wattlife.launch: the measured job's command line).
import json
import os
import re
import shlex

from wattlife import jobs as J
from wattlife.launch import LaunchSpec, build_command, run_files, train_args

RES = config["results_dir"]
EXE = config["execution"]
CELL = f"{RES}/runs/{{workload}}/{{storage}}/ckpt-{{checkpoint}}/r{{repeat}}"


wildcard_constraints:
    workload="[A-Za-z0-9_.-]+",
    storage="shared|local",
    checkpoint="on|off",
    repeat="[0-9]+",


# --- scheduler resources -------------------------------------------------------------------
# Site values (account, partitions) come from the config's `slurm` section, never from the rules.
SLURM = config.get("slurm", {}) or {}


def site_resources(partition=None):
    r = {}
    if SLURM.get("account"):
        r["slurm_account"] = SLURM["account"]
    if partition:
        r["slurm_partition"] = partition
    return r


# small CPU steps: in the CPU partition named in the config, else on the submit host (localrules)
CPU_STEP = site_resources(SLURM.get("cpu_partition"))
# measuring jobs own their node: the declared `exclusive_node` resource (a local run allows one at a
# time, the default below) and Slurm's --exclusive; they also take every local core, so nothing
# else runs beside a measurement on this machine
MEASURING = {**site_resources(SLURM.get("gpu_partition")), "exclusive_node": 1, "slurm_extra": "--exclusive"}
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


def slice_of(make):
    """params entry: the job's own config slice as sorted-keys JSON (a changed slice reruns it)."""
    return lambda wc: J.canonical(make(wc))


# --- preparation / post-execution (rules/prepare.smk) -------------------------------------
PREP = config.get("prepare", {})
CATALOGUE = {e["name"]: e for e in PREP.get("catalogue", [])}
XFER = f"{RES}/transfers/{{artefact}}"
SERVED = f"{RES}/prepare/served"
UPLOAD = PREP.get("upload", {})


def transfer_names():
    return list(CATALOGUE) + (["upload"] if UPLOAD.get("cell") else [])


def placement(where):
    """Resources of a transfer job placed `where` (login: a local rule; else a partition)."""
    return {} if where == "login" else site_resources(where)


def fetch_args(wc, input):
    """The client and its arguments for one catalogue entry."""
    e = CATALOGUE[wc.artefact]
    if e["source"] == "generated":
        sha = json.loads(open(input.manifest).read())[wc.artefact]["sha256"]
        rate = PREP.get("loopback", {}).get("rate_mbps")
        return (f"--url /{wc.artefact}.bin --serve-dir {shlex.quote(os.path.dirname(input.manifest))}"
                f" --sha256 {sha}"
                + (f" --rate-mbps {rate}" if rate else ""))
    flag = {"hf": "--hf", "kaggle": "--kaggle", "http": "--url", "path": "--path"}[e["source"]]
    extra = f" --sha256 {e['sha256']}" if e.get("sha256") else ""
    extra += f" --revision {e['revision']}" if e.get("revision") else ""
    return f"{flag} {shlex.quote(str(e['id']))}{extra}"


# --- the execution matrix -------------------------------------------------------------------
def cells():
    """Every (workload, storage, checkpoint, repeat) of the execution matrix."""
    return [
        dict(workload=w, storage=s, checkpoint=c, repeat=r)
        for w in EXE["workloads"]
        for s in EXE.get("storage", ["shared", "local"])
        for c in EXE.get("checkpoint", ["on", "off"])
        for r in range(1, EXE.get("repeats", 1) + 1)
    ]


CELL_SPEC = LaunchSpec(nodes=int(EXE.get("nodes", 1)), gpus_per_node=int(EXE.get("gpus_per_node", 1)),
                       launcher=EXE.get("launcher", "").strip(),
                       per_node=bool(EXE.get("per_node_sampler", False)))
CELL_FILES = run_files(CELL, CELL_SPEC)  # what a cell's launch writes, declared by `execute`


def cell_slice(wc):
    return J.cell_slice(config, wc.workload, wc.storage, wc.checkpoint, wc.repeat)


def train_command(wc, output):
    """The cell's command line, from the one launch builder (wattlife.launch)."""
    run_id = f"{wc.workload}-{wc.storage}-ckpt{wc.checkpoint}-r{wc.repeat}"
    inner = train_args(output.config, wc.workload, wc.storage, wc.checkpoint,
                       os.path.dirname(output.summary))
    return build_command(CELL_SPEC, config=output.config, run_dir=os.path.dirname(output.trace),
                         run_id=run_id, cell=dict(wc.items()), inner=inner)


def cell_gpus():
    """GPUs per node a cell asks for: none for the simulated GPU."""
    return 0 if config["sampler"].get("gpu") == "sim" else int(EXE.get("gpus_per_node", 1))


ATTRIBUTION = config.get("attribution", {})


def attribute_options():
    """`wattlife attribute` options from the `attribution` section."""
    return (f"--method {ATTRIBUTION.get('method', 'auto')} "
            f"--sensor-response {shlex.quote(str(ATTRIBUTION.get('sensor_response', 'boxcar')))}")


def sensor_response_file():
    """The sensor-response CSV as an input (a changed response reruns the attribution)."""
    r = ATTRIBUTION.get("sensor_response", "boxcar")
    return [] if r in ("boxcar", "estimate") else [r]


def estimated_response(path):
    """With `sensor_response: estimate` attribution writes the estimated lag weights beside its
    output: declared."""
    if ATTRIBUTION.get("sensor_response", "boxcar") != "estimate":
        return []
    return [re.sub(r"\.csv$", "_sensor_response.csv", path)]


def cell_files(name):
    return [os.path.join(CELL.format(**c), name) for c in cells()]


def dataset_dir(workload):
    return os.path.join(config["storage"]["shared"], config["workloads"][workload]["dataset"])


def dataset_input(workload):
    """The dataset folder as an input where a rule makes it (the demo's generated data); a
    dataset prepared outside the workflow is checked by the workload itself (a clear error)."""
    made = {d.get("name") for d in config.get("data", {}).values() if isinstance(d, dict)}
    return dataset_dir(workload) if config["workloads"][workload]["dataset"] in made else []


def pfi_run():
    """A config with `pfi_matrix` is a PFI run: its targets are the sweeps and what follows them."""
    return bool(config.get("pfi_matrix", {}).get("cells"))


def figure_targets():
    if pfi_run():
        return [f"{RES}/figures/{f}.png" for f in ("fig6_power_throughput", "fig7_pfi", "fig8_allocation")]
    figs = ["fig1_phase_energy_time", "fig2_device_share", "fig3_storage_checkpoint"]
    if config.get("prepare", {}).get("catalogue"):
        figs += ["fig4_download_size", "fig5_staging_breakeven"]
    if config.get("powercap", {}).get("jobs"):
        figs += ["fig6_power_throughput", "fig7_pfi", "fig8_allocation"]
    return [f"{RES}/figures/{f}.png" for f in figs]


def all_targets():
    if pfi_run():
        return figure_targets() + [f"{RES}/tables/{t}.csv" for t in ("pfi", "predictor", "allocation_summary")]
    out = figure_targets() + [f"{RES}/tables/phase_summary.csv"]
    if config.get("powercap", {}).get("jobs"):
        out += [f"{RES}/tables/pfi.csv", f"{RES}/tables/predictor.csv"]
    if config.get("prepare", {}).get("catalogue"):
        out += [f"{RES}/tables/download_fit.csv", f"{RES}/tables/facility_cache.csv"]
    return out


# --- the PFI matrix (rules/powercap.smk): one job per (cell, cap) ----------------------------
PFI_MATRIX = config.get("pfi_matrix", {})
PFI_CELLS = PFI_MATRIX.get("cells", {})
PCAP = f"{RES}/pfi/{{pcell}}/cap-{{cap}}"
PFI_CAPS = {name: J.cell_caps(config, name) for name in PFI_CELLS}


def pfi_shape(name):
    """(nodes, GPUs per node) of a PFI cell: its GPUs over its hardware profile's nodes."""
    cell = PFI_CELLS[name]
    return J.nodes_for(cell["gpus"], J.cell_hardware(config, cell).get("gpus_per_node", 8))


def pfi_cap_files(name):
    return [f"{RES}/pfi/{name}/cap-{c:g}/curve-point.csv" for c in PFI_CAPS[name]]


PFI_MULTI = {n for n in PFI_CELLS if pfi_shape(n)[0] > 1}


def pfi_dataset_input():
    """The protocol's dataset as an input where a rule makes it (tests, demo data)."""
    made = {d.get("name") for d in config.get("data", {}).values() if isinstance(d, dict)}
    ds = PFI_MATRIX.get("dataset")
    return os.path.join(config["storage"]["shared"], ds) if ds in made else []
