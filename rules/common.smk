# Helpers shared by the rules: the matrix of cells and the run's output paths.
import json
import os
import re

RES = config["results_dir"]
EXE = config["execution"]
CELL = f"{RES}/runs/{{workload}}/{{storage}}/ckpt-{{checkpoint}}/r{{repeat}}"


wildcard_constraints:
    workload="[A-Za-z0-9_.-]+",
    storage="shared|local",
    checkpoint="on|off",
    repeat="[0-9]+",


# preparation / post-execution (rules/prepare.smk)
PREP = config.get("prepare", {})
CATALOGUE = {e["name"]: e for e in PREP.get("catalogue", [])}
XFER = f"{RES}/transfers/{{artefact}}"
SERVED = f"{RES}/prepare/served"
UPLOAD = PREP.get("upload", {})


def transfer_names():
    return list(CATALOGUE) + (["upload"] if UPLOAD.get("cell") else [])


def fetch_args(wc, input):
    """The client and its arguments for one catalogue entry."""
    e = CATALOGUE[wc.artefact]
    if e["source"] == "generated":
        sha = json.loads(open(input.manifest).read())[wc.artefact]["sha256"]
        rate = PREP.get("loopback", {}).get("rate_mbps")
        return (f"--url /{wc.artefact}.bin --serve-dir {os.path.dirname(input.manifest)} --sha256 {sha}"
                + (f" --rate-mbps {rate}" if rate else ""))
    flag = {"hf": "--hf", "kaggle": "--kaggle", "http": "--url", "path": "--path"}[e["source"]]
    extra = f" --sha256 {e['sha256']}" if e.get("sha256") else ""
    extra += f" --revision {e['revision']}" if e.get("revision") else ""
    return f"{flag} {e['id']}{extra}"


def cells():
    """Every (workload, storage, checkpoint, repeat) of the execution matrix."""
    return [
        dict(workload=w, storage=s, checkpoint=c, repeat=r)
        for w in EXE["workloads"]
        for s in EXE.get("storage", ["shared", "local"])
        for c in EXE.get("checkpoint", ["on", "off"])
        for r in range(1, EXE.get("repeats", 1) + 1)
    ]


def train_command(wc, input, output):
    """The cell's command. One node: `wattlife run -- [launcher] wattlife train ...`. Per-node
    sampling (`execution.nodes` > 1, or `per_node_sampler: true`): `srun` starts one
    `wattlife run` per node, each wrapping that node's torchrun (c10d rendezvous on the first
    node), writing nodes/<host>/{trace,events,meta}; `wattlife merge-nodes` then merges them into
    the cell's trace and events and checks the nodes' clocks (clock_offsets.csv)."""
    d = os.path.dirname(output.trace)
    run_id = f"{wc.workload}-{wc.storage}-ckpt{wc.checkpoint}-r{wc.repeat}"
    cell = json.dumps(dict(wc.items()))
    train = (f"train --config {input.config} --workload {wc.workload} --storage {wc.storage}"
             f" --checkpoint {wc.checkpoint} --workdir {os.path.dirname(output.summary)}")
    nodes = int(EXE.get("nodes", 1))
    if nodes == 1 and not EXE.get("per_node_sampler", False):
        launcher = EXE.get("launcher", "").strip()
        torchrun = launcher.split()[:1] and launcher.split()[0].endswith("torchrun")
        prog = "-m wattlife.cli" if torchrun else "wattlife"  # torchrun runs Python modules
        return (f"wattlife run --config {input.config} --trace {output.trace} --events {output.events}"
                f" --meta {output.meta} --run-id {run_id} --cell '{cell}' -- {launcher} {prog} {train}")
    g = int(EXE.get("gpus_per_node", 1))
    node_dir = f"{d}/nodes/$h"
    per_node = (f"h=$(hostname -s); mkdir -p {node_dir}; wattlife run --config {input.config}"
                f" --trace {node_dir}/trace.csv --events {node_dir}/events.csv --meta {node_dir}/meta.json"
                f" --run-id {run_id} --cell '\\''{cell}'\\'' -- torchrun --nnodes={nodes} --nproc-per-node={g}"
                f" --rdzv-backend=c10d --rdzv-endpoint=$head:29500 -m wattlife.cli {train}")
    return (f"head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -1); export head;"
            f" srun --overlap --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c '{per_node}'"
            f" && wattlife merge-nodes --traces {d}/nodes/*/trace.csv --events {d}/nodes/*/events.csv"
            f" --trace {output.trace} --events-out {output.events}"
            f" && cp \"$(ls {d}/nodes/*/meta.json | head -1)\" {output.meta}")


ATTRIBUTION = config.get("attribution", {})


def attribute_options():
    """`wattlife attribute` options from the `attribution` section."""
    return (f"--method {ATTRIBUTION.get('method', 'auto')} "
            f"--sensor-response {ATTRIBUTION.get('sensor_response', 'boxcar')}")


def sensor_response_file():
    """The sensor-response CSV as an input (a changed response reruns the attribution)."""
    r = ATTRIBUTION.get("sensor_response", "boxcar")
    return [] if r in ("boxcar", "estimate") else [r]


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
