# Helpers shared by the rules: the matrix of cells and the run's output paths.
import json
import os

RES = config["results_dir"]
EXE = config["execution"]
CELL = f"{RES}/runs/{{workload}}/{{storage}}/ckpt-{{checkpoint}}/r{{repeat}}"


wildcard_constraints:
    workload="[A-Za-z0-9_.-]+",
    storage="shared|local",
    checkpoint="on|off",
    repeat="[0-9]+",


def cells():
    """Every (workload, storage, checkpoint, repeat) of the execution matrix."""
    return [
        dict(workload=w, storage=s, checkpoint=c, repeat=r)
        for w in EXE["workloads"]
        for s in EXE.get("storage", ["shared", "local"])
        for c in EXE.get("checkpoint", ["on", "off"])
        for r in range(1, EXE.get("repeats", 1) + 1)
    ]


def cell_files(name):
    return [os.path.join(CELL.format(**c), name) for c in cells()]


def dataset_dir(workload):
    return os.path.join(config["storage"]["shared"], config["workloads"][workload]["dataset"])


def figure_targets():
    figs = ["fig1_phase_energy_time", "fig2_device_share", "fig3_storage_checkpoint"]
    if config.get("powercap", {}).get("jobs"):
        figs += ["fig6_power_throughput", "fig7_pfi", "fig8_allocation"]
    return [f"{RES}/figures/{f}.png" for f in figs]


def all_targets():
    out = figure_targets() + [f"{RES}/tables/phase_summary.csv"]
    if config.get("powercap", {}).get("jobs"):
        out += [f"{RES}/tables/pfi.csv", f"{RES}/tables/predictor.csv"]
    return out
