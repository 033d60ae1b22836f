"""What each workflow job depends on, and what it asks a scheduler for.

A job of the workflow (a training cell, a download, one PFI cap of one cell) is given its own
*config slice*: exactly the config keys that change its result, serialised with sorted keys. The
rules pass the slice as the job's `params` (Snakemake reruns a job whose params changed) and the
job writes it beside its outputs and reads it as its config. So an analysis or figure key, or the
order of keys in the YAML, never reruns a measurement, and a change to one workload's key reruns
that workload's cells only.

Slices are valid configs (`config/schema.yaml`) except that the top-level required keys may be
absent; the `slice` key names the job and tells `load_config` so.

Pure functions of the (validated, defaults-filled) config; the rules only wire them. Slices are
cut from the config mapping (they are serialised as they are); every decision reads the typed
config (`wattlife.config.settings`), whose defaults are the schema's.
"""

from __future__ import annotations

import json
import math
import random
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from .config import Analysis, Attribution, settings
from .errors import InputError

Config = Mapping[str, Any]

# execution keys that change how a cell is launched (and so its measurement)
LAUNCH_KEYS = ("launcher", "gpus_per_node", "nodes", "per_node_sampler")
# powercap keys that change a PFI cap job's result
POWERCAP_KEYS = ("backend", "allow_real", "hardware", "steady_rule", "warmup_frac", "state_file")
# pfi_matrix keys shared by every cell (the protocol)
PROTOCOL_KEYS = ("dataset", "duration_s", "eval_at_s", "ckpt_at_s", "tokenizer_vocab")


def canonical(obj: Any) -> str:
    """Sorted-keys JSON: the same slice always serialises to the same text."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def cell_id(workload: str, storage: str, checkpoint: str, repeat: int | str) -> str:
    return f"{workload}/{storage}/ckpt-{checkpoint}/r{repeat}"


def cell_slice(cfg: Config, workload: str, storage: str, checkpoint: str,
               repeat: int | str) -> dict[str, Any]:
    """A training cell: the sampler, storage paths, its workload and how it is launched."""
    ex = cfg["execution"]
    if workload not in cfg["workloads"]:
        raise InputError(f"execution.workloads: {workload!r} has no entry under workloads")
    return {"slice": "execute/" + cell_id(workload, storage, checkpoint, repeat),
            "sampler": _section(cfg, "sampler"), "storage": cfg["storage"],
            "execution": {"workloads": [workload], **{k: ex[k] for k in LAUNCH_KEYS if k in ex}},
            "workloads": {workload: cfg["workloads"][workload]}}


def _section(cfg: Config, key: str) -> dict[str, Any]:
    """A top-level section as the config has it (absent: empty)."""
    return dict(cfg.get(key) or {})


def _prep(cfg: Config) -> dict[str, Any]:
    return _section(cfg, "prepare")


def catalogue_entry(cfg: Config, name: str) -> dict[str, Any]:
    e: dict[str, Any]
    for e in _prep(cfg).get("catalogue") or []:
        if e["name"] == name:
            return e
    raise InputError(f"prepare.catalogue: no artefact named {name!r}")


def download_slice(cfg: Config, name: str, concurrent: int | None) -> dict[str, Any]:
    """One download: the sampler, where it lands, its catalogue entry, the loopback rate of a
    generated artefact, and how many transfers may run at once (it changes the throughput)."""
    e = catalogue_entry(cfg, name)
    prep: dict[str, Any] = {"catalogue": [e]}
    if e["source"] == "generated" and _prep(cfg).get("loopback"):
        prep["loopback"] = _prep(cfg)["loopback"]
    return {"slice": f"download/{name}", "sampler": _section(cfg, "sampler"),
            "storage": cfg["storage"], "prepare": prep, "transfers_at_once": concurrent}


def upload_slice(cfg: Config, concurrent: int | None) -> dict[str, Any]:
    prep: dict[str, Any] = {"upload": _prep(cfg).get("upload") or {}}
    if settings(cfg).prepare.upload_to == "loopback-put" and _prep(cfg).get("loopback"):
        prep["loopback"] = _prep(cfg)["loopback"]
    return {"slice": "upload", "sampler": _section(cfg, "sampler"), "prepare": prep,
            "transfers_at_once": concurrent}


def generated_slice(cfg: Config) -> dict[str, Any]:
    """The generated (loopback) artefacts of the demo catalogue."""
    gen = [e for e in _prep(cfg).get("catalogue") or [] if e["source"] == "generated"]
    return {"slice": "gen_catalogue", "prepare": {"catalogue": gen}}


def prepare_tables_slice(cfg: Config) -> dict[str, Any]:
    p = _prep(cfg)
    return {"slice": "prepare_tables",
            "prepare": {k: p[k] for k in ("catalogue", "facility") if k in p}}


def powercap_sweep_slice(cfg: Config) -> dict[str, Any]:
    """The simulated sweep of `powercap.jobs` (the demo's)."""
    return {"slice": "powercap_sweep", "powercap": _section(cfg, "powercap")}


def pfi_cap_slice(cfg: Config, cell: str, cap_w: float) -> dict[str, Any]:
    """One PFI cell at one cap: the sampler, storage, the cap controller and hardware profile, the
    protocol, the cell and the cap."""
    m = cfg["pfi_matrix"]
    if cell not in m["cells"]:
        raise InputError(f"pfi_matrix.cells.{cell}: no such cell (have: {sorted(m['cells'])})")
    pc = _section(cfg, "powercap")
    return {"slice": f"pfi/{cell}/cap-{cap_w:g}", "sampler": _section(cfg, "sampler"),
            "storage": cfg["storage"],
            "powercap": {k: pc[k] for k in POWERCAP_KEYS if k in pc},
            "pfi_matrix": {**{k: m[k] for k in PROTOCOL_KEYS if k in m},
                           "cells": {cell: m["cells"][cell]}},
            "pfi_cap_w": cap_w}


# -- what a job asks the scheduler for --------------------------------------------------------


def cell_caps(cfg: Config, name: str) -> list[float]:
    """A PFI cell's caps: its explicit `caps`, else its hardware profile's grid (`grid_w` up to
    `large_job_gpus` - 1 GPUs, `grid_large_w` from there): `Settings.cell_caps`."""
    s = settings(cfg)
    if s.pfi_matrix is None or name not in s.pfi_matrix.cells:
        raise InputError(f"pfi_matrix.cells.{name}: no such cell")
    return s.cell_caps(s.pfi_matrix.cells[name])


# -- the options of the analysis commands, from the config --------------------------------------


def attribute_options(a: Attribution) -> str:
    """`wattlife attribute` options from the `attribution` section."""
    return f"--method {a.method} --sensor-response {shlex.quote(a.sensor_response)}"


def allocate_options(a: Analysis) -> str:
    """`wattlife allocate` options from the `analysis` section (every one given: the schema's
    defaults, not the CLI's, decide a workflow run)."""
    return (f"--cuts {','.join(f'{c:g}' for c in a.allocation_cuts)}"
            f" --workloads {a.allocation_workloads} --jobs {a.allocation_jobs}"
            f" --mix {shlex.quote(a.allocation_mix)}")


def nodes_for(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) of a job of `gpus` GPUs on nodes of `gpus_per_node`."""
    if gpus < 1 or gpus_per_node < 1:
        raise InputError(f"gpus ({gpus}) and gpus_per_node ({gpus_per_node}) must be >= 1")
    nodes = -(-gpus // gpus_per_node)
    if gpus % nodes:
        raise InputError(f"{gpus} GPUs do not split evenly over {nodes} nodes of {gpus_per_node}")
    return nodes, gpus // nodes


def transfer_runtime_min(size_bytes: float, min_rate_mbps: float = 100.0, margin: float = 1.5,
                         floor_min: int = 30) -> int:
    """Wall-clock minutes to ask for a transfer of `size_bytes`: the time at the slowest rate the
    site expects (`prepare.min_rate_mbps`), times a margin, plus a floor for start-up."""
    if min_rate_mbps <= 0:
        raise InputError(f"prepare.min_rate_mbps must be > 0, got {min_rate_mbps}")
    return int(floor_min + math.ceil(margin * size_bytes * 8 / (min_rate_mbps * 1e6) / 60))


def pfi_runtime_min(duration_s: float, startup_min: int = 30, margin: float = 1.5) -> int:
    """Minutes for one PFI cap run: the protocol's duration with a margin, plus model start-up."""
    return int(startup_min + math.ceil(margin * duration_s / 60))


def pfi_run_id(cell: str, cap_w: float) -> str:
    """The run id of one `pfi_matrix` cell at one cap: the name of its runs and of its checkpoint
    folder, <storage.shared>/checkpoints/<run id>/ (workloads.cell.checkpoint_dir), which the
    rule declares temp() (rules/powercap.smk: `{pcell}-cap{cap}`, the cap as `:g` writes it)."""
    return f"{cell}-cap{float(cap_w):g}"


def repeat_priority(repeat: int, repeats: int) -> int:
    """Scheduler priority of a cell's repeat `repeat` of `repeats`: higher for earlier repeats
    (repeats - repeat), so repeat r of every cell runs before repeat r + 1 of any; 0 for the last,
    the priority of every other job."""
    return max(repeats - int(repeat), 0)


def round_orders(rounds: Mapping[int, Sequence[str]], seed: int) -> dict[int, list[str]]:
    """Each round's cells in the order they run: a permutation of the round's sorted cell ids,
    drawn from `seed` and the round (reproducible from the seed alone), drawn again while it is
    the previous round's order, so that no two consecutive rounds of 2 or more cells run in the
    same order (a position effect never lands on the same cells twice in a row)."""
    out: dict[int, list[str]] = {}
    last: list[int] | None = None  # the previous round's permutation of its sorted cells
    for r in sorted(rounds):
        rng = random.Random(f"wattlife-order/{int(seed)}/{int(r)}")
        ids = sorted(rounds[r])
        perm = list(range(len(ids)))
        rng.shuffle(perm)
        while len(perm) > 1 and perm == last:
            rng.shuffle(perm)
        out[r] = [ids[i] for i in perm]
        last = perm
    return out


def cell_positions(cells: Sequence[tuple[str, int]], seed: int | None, enforced: bool = False
                   ) -> dict[str, dict[str, Any]]:
    """cell id -> its place in its round (`cells`: every (cell id, repeat) of the matrix):
    `round_position` (1 = first), `round_cells`, `order_seed`, `order_enforced` (`enforced`:
    each cell waits for the one before it, rules/execute.smk; else the order is only the plan);
    a None seed: no order of the suite's (Snakemake's own), each position None."""
    rounds: dict[int, list[str]] = {}
    for cid, r in cells:
        rounds.setdefault(int(r), []).append(cid)
    if seed is None:
        return {cid: {"round_position": None, "round_cells": len(rounds[int(r)]),
                      "order_seed": None, "order_enforced": False} for cid, r in cells}
    return {cid: {"round_position": i, "round_cells": len(order), "order_seed": int(seed),
                  "order_enforced": bool(enforced)}
            for order in round_orders(rounds, seed).values()
            for i, cid in enumerate(order, start=1)}


def cell_slices(cfg: Config) -> dict[str, dict[str, Any]]:
    """cell id -> its current config slice, for every cell of the execution matrix (custody's
    `cells` compares them with the sealed slices)."""
    return {cell_id(c.workload, c.storage, c.checkpoint, c.repeat):
            cell_slice(cfg, c.workload, c.storage, c.checkpoint, c.repeat)
            for c in settings(cfg).cells()}


def measurement_slices(cfg: Config, transfers: int | None = 1
                       ) -> dict[str, tuple[str, dict[str, Any]]]:
    """ident -> (kind, its current slice) of every measuring job the workflow runs (custody's
    `cells`): a PFI run's caps (`pfi/<cell>/cap-<W>`), else the execution matrix's cells and,
    with a catalogue, its downloads and the upload (`transfers/<artefact>`); `transfers`: the
    run's `--resources transfers=N` (the profiles': 1), part of a transfer's slice."""
    s = settings(cfg)
    if s.pfi_run and s.pfi_matrix is not None:
        return {f"pfi/{name}/cap-{cap:g}": ("pfi-cap", pfi_cap_slice(cfg, name, float(cap)))
                for name, cell in s.pfi_matrix.cells.items() for cap in s.cell_caps(cell)}
    out = {cid: ("cell", sl) for cid, sl in cell_slices(cfg).items()}
    if s.prepare.catalogue:
        for e in s.prepare.catalogue:
            out[f"transfers/{e['name']}"] = ("transfer", download_slice(cfg, e["name"], transfers))
        if s.prepare.upload_cell:
            out["transfers/upload"] = ("transfer", upload_slice(cfg, transfers))
    return out


def slice_execution(slice_doc: Config) -> Any:
    """The typed `execution` section of a cell's sealed slice (None when it has none)."""
    return settings(slice_doc).execution
