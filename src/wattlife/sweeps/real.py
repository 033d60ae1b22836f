"""The real power-cap sweep: run a command under the sampler at each cap, set through the
power-cap controller before the command starts, and reduce its step events and trace to curve
points (steady-state throughput and aggregate GPU power of its training steps).

- `sweep_command`: one command at every cap of a grid (`PowerCapController`, any backend);
- `sweep_matrix_cap`: one `pfi_matrix` cell at one cap, on every GPU of every node of its job
  (`wattlife pfi-sweep`; the launch through `wattlife.launch`);
- `curve_point`: one run's steady-state point; `assemble_curve`: a cell's curve from its points
  (`wattlife aggregate-curves`).
With the `simulated` backend the command still runs for real; only its GPU readings are the
simulated GPU's (`sim`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..analysis.curves import steady_state, steady_state_se
from ..config import SamplerSettings, Settings, schema_default
from ..contracts import CURVES_COLUMNS, CURVES_TELEMETRY_COLUMNS, write_csv, write_table
from ..devices.powercap import PowerCapController, cap_backend
from ..errors import InputError, SetupError
from ..sampler import with_sim_gpu_cap
from ..simgpu_model import SimGpuModel
from .failures import InfrastructureFailure, classify, run_logged
from .pfi_matrix import matrix_cell_workload


def _steps_from_run(trace_path: Path, events_path: Path) -> pd.DataFrame:
    """Per-step throughput (items/s) and aggregate GPU power (W, summed over GPUs) of one run."""
    from ..attribution import device_series
    from ..contracts import read_events, read_trace
    from ..contracts.kinds import GPU

    ev = read_events(events_path)
    steps = ev[(ev["phase"] == "step") & (ev["rank"] == ev["rank"].min())].sort_values("start_ns")
    if steps.empty:
        raise InputError(f"{events_path}: no `step` phases; mark steps with wattlife.markers.step")
    if steps["items"].isna().all():
        raise InputError(f"{events_path}: steps carry no `items`; use step(items=...)")
    dt = (steps["end_ns"] - steps["start_ns"]).to_numpy() / 1e9
    world = ev["rank"].nunique()
    out = pd.DataFrame({"throughput": steps["items"].to_numpy() * world / dt})
    tr = read_trace(trace_path)
    gpus = [s for s in device_series(tr) if GPU.forms(s.device)]
    if not gpus:
        raise InputError(f"{trace_path}: no GPU power in the trace")
    a, b = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    out["power_w"] = sum((s.energy_at(b) - s.energy_at(a)) / dt for s in gpus)
    out.attrs["source"] = ",".join(sorted({s.source for s in gpus}))
    tele = tr[tr["metric"].isin(CURVES_TELEMETRY_COLUMNS)]
    out.attrs["telemetry"] = tele.groupby("metric")["value"].mean().to_dict()
    out.attrs["n_gpus"] = len(gpus)
    return out


def sweep_command(job: str, cmd: list[str], caps: list[float], controller: PowerCapController,
                  out_dir: str | Path, sampler_settings: SamplerSettings,
                  rule: str = schema_default("powercap", "steady_rule"),
                  warmup_frac: float = schema_default("powercap", "warmup_frac"),
                  unit: str = "items/s", gpu_model: str | None = None) -> pd.DataFrame:
    """Run `cmd` once per cap under the sampler, the cap set before it starts (so before it
    creates its CUDA context), and extract steady-state throughput and aggregate GPU power of
    its training steps (validation and checkpoint are not steps, so they are excluded).
    A failed cap is recorded (`status`) and the sweep goes on; the limits are restored at the end
    whatever happens. `sampler_settings`: the typed `sampler` settings of every run (under the
    simulated backend, the simulated GPU's cap follows each cap). `rule`, `warmup_frac`: the
    schema's `powercap.steady_rule`, `warmup_frac` unless given."""
    from ..run import run_under_sampler

    out_dir = Path(out_dir)
    rows = []
    with controller:
        for cap in tqdm(sorted(caps, reverse=True), desc=f"sweep {job}", unit="cap"):
            run_dir = out_dir / f"{job}_cap{cap:g}"
            row: dict[str, Any] = {"job": job, "cap_w": cap, "throughput_unit": unit}
            try:
                controller.set_cap(cap)
                run_settings = sampler_settings
                if cap_backend(controller.backend).simulated:
                    run_settings = with_sim_gpu_cap(sampler_settings, controller.dev.get(0))
                rc = run_under_sampler(cmd, run_dir / "trace.csv", run_dir / "events.csv",
                                       settings=run_settings, run_id=run_dir.name,
                                       cell={"job": job, "cap_w": cap}, reraise_signals=True)
                if rc != 0:
                    raise SetupError(f"command exited with {rc}")
                row.update(curve_point(run_dir / "trace.csv", run_dir / "events.csv", rule,
                                       warmup_frac))
            except Exception as exc:  # recorded; the sweep goes on
                row.update(throughput=np.nan, power_w=np.nan, source="", status=f"failed: {exc}")
            rows.append(row)
    df = pd.DataFrame(rows)
    simulated = cap_backend(controller.backend).simulated
    meta_gpu = gpu_model or (SimGpuModel().name if simulated else "GPU")
    df["gpu_model"] = meta_gpu
    if "n_gpus" not in df.columns:
        df["n_gpus"] = np.nan
    df["n_gpus"] = df["n_gpus"].fillna(df["n_gpus"].max())
    # telemetry columns describe the uncapped (highest-cap) run only
    top = df["cap_w"] == df["cap_w"].max()
    for col in CURVES_TELEMETRY_COLUMNS:
        if col in df.columns:
            df.loc[~top, col] = np.nan
    write_csv(df, out_dir / f"{job}_curves.csv")
    return df[CURVES_COLUMNS + [c for c in df.columns if c not in CURVES_COLUMNS]]


def curve_point(trace: str | Path, events: str | Path,
                rule: str = schema_default("powercap", "steady_rule"),
                warmup_frac: float = schema_default("powercap", "warmup_frac")) -> dict[str, Any]:
    """Steady-state throughput and aggregate GPU power of one run's training steps, with their
    standard errors (`steady_state_se`, the curves contract's `throughput_sd` / `power_sd`), the
    GPUs seen, the power source and the run's telemetry means. `rule`, `warmup_frac`: the
    schema's `powercap.steady_rule`, `warmup_frac` unless given."""
    st = _steps_from_run(Path(trace), Path(events))
    thr, pwr = st["throughput"].to_numpy(float), st["power_w"].to_numpy(float)
    return dict(throughput=steady_state(thr, rule, warmup_frac),
                power_w=steady_state(pwr, rule, warmup_frac),
                throughput_sd=steady_state_se(thr, rule, warmup_frac),
                power_sd=steady_state_se(pwr, rule, warmup_frac), n_steps=len(st),
                n_gpus=st.attrs["n_gpus"], source=st.attrs["source"], status="ok",
                **st.attrs["telemetry"])


def device_label(device: str | None, profile_gpu: str, simulated: bool, cell: str = "") -> str:
    """A curve row's `gpu_model`: the device that ran it (meta.json's `gpu_model`), checked
    against the cell's hardware profile. A real device matches when the profile's model (the last
    word of its `gpu_model`, e.g. H100) is a word of the device's name ("NVIDIA H100 80GB HBM3")
    and is labelled with the profile's name; a mismatch is refused (ValueError: the job ran on
    other hardware than the cell names). The simulated GPU ("... (sim)") stands in for any
    profile and is labelled with its own name. No device seen (nothing measured): the simulated
    GPU's name under the simulated backend, else the profile's."""
    if not device:
        return SimGpuModel().name if simulated else profile_gpu
    if device.endswith("(sim)"):
        return device
    model = profile_gpu.split()[-1].lower()
    if model not in device.lower().replace("-", " ").split():
        raise InputError(f"pfi_matrix.cells.{cell}: its hardware is {profile_gpu} but the job ran "
                         f"on {device} (place it with slurm.partitions / slurm.constraints)")
    return profile_gpu


def sweep_matrix_cap(s: Settings, config_path: str | Path, cell: str, cap_w: float,
                     out: str | Path, backend: str | None = None) -> pd.DataFrame:
    """One `pfi_matrix` cell of the typed config `s` trained at one per-GPU cap: the cap set on
    every GPU of every node of the job, the run under a sampler per node (wattlife.launch), its
    steady state written as one curve point (`status` ok, or failed with the reason: the job
    itself succeeds so the curve shows the failed cap; `snakemake --forcerun <point>` reruns it
    alone). A failure of the infrastructure (signal, lost node, NCCL: `failures.classify`) writes
    no point and raises `InfrastructureFailure`. `config_path`: the file `s` was read from, named
    to the launched command (`launch-node --config`). Writes beside `out`: workload.json (the
    training config), trace.csv, events.csv, meta.json, work/ (and nodes/<host>/,
    clock_offsets.csv across nodes)."""
    import json

    from ..jobs import nodes_for, pfi_run_id
    from ..launch import LaunchSpec, build_command, train_args
    from ..runlock import run_folder_lock

    w, c, prof = matrix_cell_workload(s, cell)
    pc = s.powercap
    out = Path(out)
    d = out.parent
    d.mkdir(parents=True, exist_ok=True)
    wl = d / "workload.json"
    wl.write_text(json.dumps({"slice": f"pfi/{cell}/cap-{cap_w:g}/train", "storage": s.storage,
                              "workloads": {cell: w}}, indent=1, sort_keys=True))
    nodes, per_node = nodes_for(c.gpus, prof.gpus_per_node)
    spec = LaunchSpec(nodes=nodes, gpus_per_node=per_node, per_node=nodes > 1, cap_w=float(cap_w),
                      powercap_backend=backend or pc.backend, allow_real=pc.allow_real)
    cmd = build_command(spec, config=str(config_path), run_dir=str(d),
                        run_id=pfi_run_id(cell, cap_w), cell={"pfi_cell": cell},
                        inner=train_args(str(wl), cell, "shared", "on", str(d / "work")))
    simulated = cap_backend(spec.powercap_backend).simulated
    row: dict[str, Any] = {"job": cell, "gpu_model": device_label(None, prof.gpu_model, simulated),
                           "n_gpus": c.gpus,
                           "cap_w": float(cap_w), "throughput_unit": "tokens/s",
                           "category": c.task, "set": c.set or "main"}  # the schema: main = own
    if c.paper_job:  # the study's label: PFI tables put the published value beside it
        row["paper_job"] = c.paper_job
        row["hardware"] = c.hardware or pc.hardware
    (d / "work").mkdir(exist_ok=True)
    print(cmd, flush=True)
    with run_folder_lock(d):  # one job per (cell, cap) folder: an orphan's twin refuses here
        rc, tail = run_logged(cmd)
    kind, why = classify(rc, tail)
    if kind == "infrastructure":  # no point written: the job fails, retries / requeue act
        raise InfrastructureFailure(f"pfi_matrix.cells.{cell} at {cap_w:g} W: {why}; no point")
    try:
        if rc != 0:
            raise SetupError(f"the run exited with {rc}: {why} (see run.log)")
        device = json.loads((d / "meta.json").read_text()).get("gpu_model")
        row["gpu_model"] = device_label(device, prof.gpu_model, simulated, cell)
        row["device"] = device or ""
        row.update(curve_point(d / "trace.csv", d / "events.csv", pc.steady_rule, pc.warmup_frac))
    except Exception as exc:  # recorded: the curve shows the failed cap
        row.update(throughput=np.nan, power_w=np.nan, source="", status=f"failed: {exc}")
        _placeholders(d, spec.multi, rc, row["status"])
    df = pd.DataFrame([row])
    write_table(df[CURVES_COLUMNS + [k for k in df.columns if k not in CURVES_COLUMNS]], out,
                CURVES_COLUMNS)
    return df


def _placeholders(d: Path, multi: bool, rc: int, status: str) -> None:
    """A failed cap still leaves every file its job declares: an empty trace/events (nothing was
    measured), a meta.json that says why, so the job succeeds and the curve shows the failure."""
    import json

    from ..contracts import EVENTS_COLUMNS, TRACE_COLUMNS

    for name, cols in (("trace.csv", TRACE_COLUMNS), ("events.csv", EVENTS_COLUMNS)):
        if not (d / name).exists():
            (d / name).write_text(",".join(cols) + "\n")
    if not (d / "meta.json").exists():
        (d / "meta.json").write_text(json.dumps({"exit_code": rc, "status": status,
                                                 "measured": False}, indent=1))
    if multi:
        (d / "nodes").mkdir(exist_ok=True)
        if not (d / "clock_offsets.csv").exists():
            (d / "clock_offsets.csv").write_text("host,offset_ms,iqr_ms,steps,warn\n")


def assemble_curve(points: list[pd.DataFrame], job: str | None = None,
                   caps: list[float] | None = None) -> pd.DataFrame:
    """A cell's curve from its cap points: one row per expected cap, a cap with no point (or a
    failed one) kept with its `status` (missing / failed: ...) and no numbers; telemetry kept
    only on the uncapped (highest-cap) row, as the predictor reads it."""
    df = pd.concat(points, ignore_index=True) if points else pd.DataFrame(columns=CURVES_COLUMNS)
    if "status" not in df.columns:
        df["status"] = "ok"
    df["status"] = df["status"].fillna("ok")
    if caps:
        jobs = [job] if job else sorted(df["job"].dropna().unique())
        have = set(zip(df["job"], df["cap_w"].astype(float), strict=True))
        proto = df.iloc[0].to_dict() if len(df) else {}
        shared = ("gpu_model", "n_gpus", "throughput_unit", "category", "set")
        missing = [{**{k: proto.get(k) for k in shared}, "job": j, "cap_w": float(c),
                    "throughput": np.nan, "power_w": np.nan, "status": "missing"}
                   for j in jobs for c in caps if (j, float(c)) not in have]
        if missing:
            df = pd.concat([df, pd.DataFrame(missing)], ignore_index=True)
    df = df.sort_values(["job", "cap_w"], kind="stable").reset_index(drop=True)
    ok = df["status"].eq("ok")
    top = df["cap_w"].eq(df.groupby("job")["cap_w"].transform("max"))
    for col in CURVES_TELEMETRY_COLUMNS:
        if col in df.columns:
            df.loc[~(top & ok), col] = np.nan
    return df[CURVES_COLUMNS + [c for c in df.columns if c not in CURVES_COLUMNS]]


def aggregate_curve_files(paths: list[str | Path], out: str | Path, job: str | None = None,
                          caps: list[float] | None = None) -> pd.DataFrame:
    """`wattlife aggregate-curves`: read curve points / curves (with `caps`, a point file that
    does not exist is a missing cap), assemble them (`assemble_curve`), write `out`."""
    from ..contracts import read_curves
    from ..custody import require_sound

    if caps and not job:
        raise InputError("aggregate-curves: --caps needs --job (the cell whose caps they are)")
    present = [f for f in paths if Path(f).exists() or not caps]
    require_sound(present, derived=False)  # a PFI cap's published point: as sealed
    points = [read_curves(f) for f in present]
    df = assemble_curve(points, job=job, caps=caps)
    write_table(df, out, CURVES_COLUMNS)
    return df
