"""The `wattlife` command: thin — parse, call one function, print."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc


def _positive_ms(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds > 0, got {text!r}")
    return v


def _nonnegative_s(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (0 <= v < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return v


def _sha256(text: str) -> str:
    """A sha256 digest: 64 hexadecimal characters (checked before any download starts)."""
    import re

    if not re.fullmatch(r"[0-9a-fA-F]{64}", text.strip()):
        raise argparse.ArgumentTypeError(f"expected 64 hexadecimal characters, got {text!r} "
                                         f"({len(text.strip())} characters)")
    return text.strip().lower()


# Per command: (options naming outputs, options naming inputs). An output equal to an input is
# refused before anything runs, so raw data is never overwritten.
GUARDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "run": (("trace", "events", "meta"), ("config",)),
    "launch-node": (("trace", "events", "meta"), ("config",)),
    "attribute": (("output",), ("trace", "events", "sensor_response")),
    "pfi": (("output",), ("curves", "config")),
    "allocate": (("output",), ("curves", "pfi")),
    "predict": (("output",), ("curves", "pfi")),
    "calibrate-sim": (("output",), ("curves", "published")),
    "aggregate-curves": (("output",), ("curves",)),
    "merge-nodes": (("trace", "events_out"), ("traces", "events")),
    "aggregate": (("output",), ("phases",)),
    "prepare-tables": (("output",), ("config", "records", "phase_summary", "cell_summaries",
                                     "phases", "cell_metas")),
    "fetch": (("output", "record"), ("path",)),
    "upload": (("record", "copy"), ("src", "from_summary")),
    "sweep": (("output",), ("config",)),
    "pfi-sweep": (("output",), ("config",)),
    "figures": (("output",), ("tables",)),
    "gen-catalogue": (("output",), ("config",)),
}


def _guard(a: argparse.Namespace) -> None:
    from .contracts import refuse_overwrite

    outs, ins = GUARDS.get(a.command, ((), ()))
    inputs: list[str | Path] = []
    for name in ins:
        v = getattr(a, name, None)
        inputs += [str(x) for x in v] if isinstance(v, list) else [str(v)] if v else []
    for name in outs:
        v = getattr(a, name, None)
        if v:
            refuse_overwrite(v, inputs)
            inputs.append(v)  # two outputs of one command must differ too
    if a.command == "merge-nodes" and a.trace and a.events_out:
        refuse_overwrite(a.events_out, [a.trace])


def _load_sampler_cfg(path: str | None, **given: Any) -> dict[str, Any]:
    """The `sampler` section a run uses and records in meta.json: the config's (its absent keys
    are the schema's defaults, filled by the sampler), or without --config the CLI's documented
    default (no idle baseline); the options `given` (None = not given) on top."""
    if path:
        from .config import load_config

        section = dict(load_config(path).get("sampler") or {})
    else:
        section = {"idle_baseline_s": 0.0}  # `wattlife run --idle-s`'s documented default
    return {**section, **{k: v for k, v in given.items() if v is not None}}


def cmd_run(a: argparse.Namespace) -> int:
    from .run import run_under_sampler

    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        print("wattlife run: give the command after --", file=sys.stderr)
        return 2
    cfg = _load_sampler_cfg(a.config, interval_ms=a.interval_ms, gpu=a.gpu, cpu=a.cpu,
                            idle_baseline_s=a.idle_s)
    try:
        cell = json.loads(a.cell) if a.cell else None
    except ValueError as exc:
        raise ValueError(f"--cell: expected JSON, got {a.cell!r} ({exc})") from None
    from .launch import short_host
    from .runlock import run_folder_lock
    from .slurm_site import check_step

    check_step(short_host())  # in a Slurm job: what the step holds (log); a 1-CPU step refused
    try:
        with run_folder_lock(Path(a.trace).parent):  # one job per run folder (orphans)
            return run_under_sampler(cmd, a.trace, a.events, a.meta, cfg, a.run_id, cell)
    except KeyboardInterrupt:  # before the sampler took over the signals: nothing was started
        print("wattlife run: interrupted before CMD started", file=sys.stderr)
        return 130


def cmd_attribute(a: argparse.Namespace) -> int:
    from .attribution import attribute_files

    df = attribute_files(a.trace, a.events, a.output, a.method, a.sensor_window_ms, a.idle_split,
                         a.bootstrap, a.sensor_response, strict=a.strict,
                         steady=not a.raw_phases)
    show = df.groupby(["device_kind", "phase", "method", "source"], as_index=False)[
        ["energy_j", "time_s"]].sum().sort_values(["device_kind", "energy_j"],
                                                  ascending=[True, False])
    print(show.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_pfi(a: argparse.Namespace) -> int:
    from .analysis.pfi import compare_gpus, grid_sensitivity_files, pfi_files

    df = pfi_files(a.curves, a.output, grid=a.grid, n_mc=a.mc, seed=a.seed, config=a.config)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if a.subgrid:
        out = Path(a.output)
        sens = grid_sensitivity_files(a.curves, out.with_name(out.stem + "_subgrid.csv"),
                                      a.subgrid)
        print("\ngrid sensitivity:\n"
              + sens.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if a.compare:
        gpu_a, gpu_b = a.compare.split(",")
        print(f"\n{gpu_a} vs {gpu_b}: {compare_gpus(df, gpu_a, gpu_b)}")
    return 0


def cmd_allocate(a: argparse.Namespace) -> int:
    from .analysis.allocation import allocate_files

    summary = allocate_files(a.curves, a.output, cuts=a.cuts, n_workloads=a.workloads,
                             n_jobs=a.jobs, seed=a.seed, strategies=a.strategies, mix=a.mix,
                             pfi_path=a.pfi, objective=a.objective, exact=a.exact_oracle)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_pfi_study(a: argparse.Namespace) -> int:
    import pandas as pd

    from .analysis.pfi_study import run_pfi_study

    paths = run_pfi_study(a.output, n_workloads=a.workloads, n_jobs=a.jobs, cuts=a.cuts,
                          seed=a.seed, a100=a.a100, figures=not a.no_figures,
                          sensitivity_workloads=a.sensitivity_workloads)
    for p in paths.values():
        print(p)
    g = pd.read_csv(paths["gap_recovered.csv"])
    print(g.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_predict(a: argparse.Namespace) -> int:
    from .analysis.predictor import predictor_files

    df = predictor_files(a.curves, a.pfi, a.output)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_calibrate(a: argparse.Namespace) -> int:
    from .analysis.calibration import calibrate_files, calibrated_study_files

    if a.published:
        table = calibrated_study_files(a.published, a.output, noise=a.noise, seed=a.seed)
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        return 0
    if not a.curves or a.tdp is None:
        raise ValueError("calibrate-sim: give CURVES and --tdp, or --published JOBS.csv")
    doc = calibrate_files(a.curves, a.tdp, a.output)
    print(json.dumps(doc, indent=2, default=float))
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from .sweeps.simulated import sweep_from_config

    df = sweep_from_config(a.config, a.output, job=a.job)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_aggregate_curves(a: argparse.Namespace) -> int:
    from .sweeps.real import aggregate_curve_files

    df = aggregate_curve_files(a.curves, a.output, job=a.job, caps=a.caps)
    bad = df[df["status"] != "ok"]
    print(f"{a.output}: {df['job'].nunique()} jobs, {len(df)} caps, {len(bad)} not ok")
    if len(bad):
        print(bad[["job", "cap_w", "status"]].to_string(index=False))
    return 0


def cmd_launch_node(a: argparse.Namespace) -> int:
    from .launch import merge_meta, run_node

    if a.merge_meta:
        if not a.meta:
            raise ValueError("launch-node --merge-meta DIR needs --meta OUT")
        merge_meta(a.merge_meta, a.meta)
        return 0
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        raise ValueError("launch-node: give the command after --")
    return run_node(cmd, sampler_cfg=_load_sampler_cfg(a.config), run_id=a.run_id,
                    cell=json.loads(a.cell) if a.cell else {}, trace=a.trace, events=a.events,
                    meta=a.meta, node_dir=a.node_dir, cap_w=a.cap, backend=a.powercap_backend,
                    allow_real=a.allow_real, state_dir=a.state_dir)


def cmd_merge_nodes(a: argparse.Namespace) -> int:
    from .merge_nodes import merge_node_runs

    check = merge_node_runs(a.traces, a.events, a.trace, a.events_out, warn_ms=a.warn_ms)
    print(check.to_string(index=False, float_format=lambda v: f"{v:.3f}") if len(check)
          else "one host: no clock check")
    return 0


def cmd_pfi_sweep(a: argparse.Namespace) -> int:
    from .sweeps.real import sweep_matrix_cap

    df = sweep_matrix_cap(a.config, a.cell, a.cap, a.output, backend=a.backend)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_powercap(a: argparse.Namespace) -> int:
    from .devices.powercap import PowerCapController, restore_from_state

    if a.action == "restore":
        if not a.state:
            raise ValueError("powercap restore: give --state, the powercap-state-<host>.json that "
                             "launch-node wrote beside the run's trace (or in its --state-dir)")
        if not Path(a.state).exists():
            print(f"no state file {a.state}: no power limit was changed, none to restore")
            return 0
        restored = restore_from_state(a.state)
        print(f"restored {len(restored)} GPU power limit(s) from {a.state}: {restored}")
        return 0
    if a.action == "save":  # a Slurm prolog (profiles/slurm/prolog.sh): the limits before a job
        from .slurm_site import save_limits

        if not a.state:
            raise ValueError("powercap save: give --state, the file to write the limits to")
        print(f"saved GPU power limits to {a.state}: {save_limits(a.state, a.backend)}")
        return 0
    ctl = PowerCapController(backend=a.backend, state_file=a.state or "powercap-state.json",
                             allow_real=False)
    print(json.dumps(ctl.describe(), indent=2))
    return 0


def cmd_gen_images(a: argparse.Namespace) -> int:
    from .workloads.datagen import make_image_tree

    n = make_image_tree(a.output, n_classes=a.classes, train_per_class=a.train_per_class,
                        val_per_class=a.val_per_class, size=a.size, seed=a.seed,
                        workers=a.workers)
    print(f"wrote {n} JPEG files under {a.output}")
    return 0


def cmd_gen_text(a: argparse.Namespace) -> int:
    from .workloads.datagen import make_text_corpus

    n = make_text_corpus(a.output, n_words=a.words, seed=a.seed)
    print(f"wrote {n} words under {a.output}")
    return 0


def cmd_train(a: argparse.Namespace) -> int:
    from .config import load_config
    from .workloads import train_from_config

    cfg = load_config(a.config)
    if a.workload not in (cfg.get("workloads") or {}):
        raise ValueError(f"--workload {a.workload}: not a key of {a.config}'s workloads "
                         f"(defined: {sorted(cfg.get('workloads') or {})})")
    return train_from_config(cfg, a.workload, a.storage, a.checkpoint, a.workdir)


def cmd_aggregate(a: argparse.Namespace) -> int:
    from .analysis.aggregate import write_phase_tables

    for p in write_phase_tables(a.phases, a.output):
        print(p)
    return 0


def cmd_fetch(a: argparse.Namespace) -> int:
    from .prepare.fetch import fetch_artefact
    from .prepare.serve import loopback_server
    from .prepare.transfer import measure_transfer, report_transfer

    with loopback_server(a.serve_dir, a.rate_mbps) as srv:
        record = measure_transfer(
            f"download_{a.kind}",
            lambda: fetch_artefact(a.output, url=a.url, hf=a.hf, kaggle=a.kaggle, path=a.path,
                                   kind=a.kind, revision=a.revision, endpoint=a.endpoint,
                                   sha256=a.sha256, force=a.force, retries=a.retries,
                                   server_url=srv.url if srv else None),
            name=a.name or Path(a.output).name, kind=a.kind, loopback=bool(a.serve_dir),
            transfers_at_once=a.transfers_at_once)
    report_transfer(record, a.record)
    return 0


def cmd_upload(a: argparse.Namespace) -> int:
    from .prepare.serve import loopback_server
    from .prepare.transfer import measure_transfer, report_transfer
    from .prepare.upload import last_checkpoint, upload_artefact

    src = last_checkpoint(a.from_summary) if a.from_summary else a.src
    if not src:
        raise SystemExit("wattlife upload: give SRC or --from-summary")
    with loopback_server(a.serve_put, a.rate_mbps, upload=True) as srv:
        record = measure_transfer(
            "upload",
            lambda: upload_artefact(src, put=a.put, hf=a.hf, copy=a.copy, endpoint=a.endpoint,
                                    server_url=srv.url if srv else None),
            name=a.name or Path(src).name, kind="model", loopback=bool(a.serve_put),
            transfers_at_once=a.transfers_at_once)
    report_transfer(record, a.record)
    return 0


def cmd_gen_catalogue(a: argparse.Namespace) -> int:
    from .prepare.catalogue import generate_artefacts, prepare_settings

    m = generate_artefacts(prepare_settings(a.config)["catalogue"], a.output)
    print(json.dumps({k: v["size_bytes"] for k, v in m.items()}))
    return 0


def cmd_prepare_tables(a: argparse.Namespace) -> int:
    from .analysis.downloads import prepare_tables_files
    from .prepare.catalogue import prepare_settings

    prep = prepare_settings(a.config)
    for path in prepare_tables_files(prep["catalogue"], prep["facility"], a.records, a.output,
                                     phases=a.phases, phase_summary=a.phase_summary,
                                     cell_summaries=a.cell_summaries, cell_metas=a.cell_metas):
        print(path)
    return 0


def cmd_figures(a: argparse.Namespace) -> int:
    from .figures import draw_all, draw_reference

    tables = Path(a.tables)
    if not tables.is_dir():
        raise FileNotFoundError(2, "No such folder of tables (expected a run's tables/ folder, or "
                                   "results/reference with --reference)", str(tables))
    paths = draw_reference(a.tables, a.output) if a.reference else draw_all(a.tables, a.output)
    if not paths:
        refs = " or the reference folders" if a.reference else ""
        raise ValueError(f"{tables}: no table to draw from (expected e.g. phases.csv, curves.csv, "
                         f"pfi.csv{refs}); nothing drawn")
    for p in paths:
        print(p)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from . import bench

    return bench.main(a.what, a.scale)


def cmd_check(a: argparse.Namespace) -> int:
    from .check import check_runs

    rc, report = check_runs(a.run_dirs, kind=a.kind, as_json=a.json, max_rows=a.max_rows)
    print(report)
    return rc


def _add_run_commands(sub: Any) -> None:
    """Measuring runs: run, attribute, aggregate, merge-nodes, launch-node, check."""

    r = sub.add_parser("run", help="run a command under the energy sampler",
                       description="Start the sampler, run CMD with WATTLIFE_EVENTS set, stop the "
                                   "sampler when CMD ends, write meta.json; exit with CMD's code.")
    r.add_argument("--trace", required=True, help="trace CSV to write")
    r.add_argument("--events", required=True, help="events CSV the workload's markers write")
    r.add_argument("--meta", help="meta.json path (default: beside the trace)")
    r.add_argument("--config", help="config YAML whose `sampler` section to use (default: none, "
                                    "the built-in sampler defaults)")
    r.add_argument("--interval-ms", type=_positive_ms,
                   help="sampler interval in ms, > 0 (default: the config's, else 50)")
    r.add_argument("--gpu", choices=["auto", "nvml", "sim", "none"],
                   help="GPU backend (default: the config's, else auto)")
    r.add_argument("--cpu", choices=["auto", "rapl", "estimate", "none"],
                   help="CPU backend (default: the config's, else auto)")
    r.add_argument("--idle-s", type=_nonnegative_s,
                   help="seconds of idle baseline before CMD starts, >= 0 (default: the config's "
                        "idle_baseline_s, else 0)")
    r.add_argument("--run-id", help="run id (default: the trace's folder name)")
    r.add_argument("--cell", help="JSON of the matrix cell, recorded in meta.json (default: none)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    r.set_defaults(fn=cmd_run)

    t = sub.add_parser("attribute", help="trace x events -> per-phase energy (phases.csv)")
    t.add_argument("--trace", required=True, help="trace CSV/Parquet of the run (meta.json beside "
                                                  "it is read if present)")
    t.add_argument("--events", required=True, help="events CSV of the run (per-rank siblings "
                                                   "<stem>.rank<N>.csv are read too)")
    t.add_argument("-o", "--output", required=True, help="phases.csv to write (not an input)")
    t.add_argument("--method", default="auto", choices=["auto", "integrate", "deconvolve"],
                   help="auto (default): deconvolve where phases are shorter than two sensor "
                        "periods, else integrate")
    t.add_argument("--strict", action="store_true",
                   help="phases' time outside the trace's span, or a busy GPU no rank claims, "
                        "is an error, not a warning")
    t.add_argument("--raw-phases", action="store_true",
                   help="the phase names as recorded (default: compile and warm-up steps as "
                        "rows `compile` and `warmup`, the other phases over the steady steps)")
    t.add_argument("--sensor-window-ms", type=float,
                   help="boxcar window of power readings for deconvolution (default: estimated "
                        "per device, the best fit among 0.5-2x the reading spacing)")
    t.add_argument("--sensor-response", default="boxcar", metavar="boxcar|estimate|CSV",
                   help="shape of a reading's window for deconvolution: a boxcar (default), lag "
                        "weights estimated from this run (written beside the output), or a CSV of "
                        "lag_lo_ms,lag_hi_ms,weight (the GPU sensor's, e.g. estimated earlier)")
    t.add_argument("--idle-split", action="store_true",
                   help="split energy into static (idle baseline) and dynamic parts")
    t.add_argument("--bootstrap", type=int, default=200,
                   help="bootstrap replicates for deconvolution's interval (default 200)")
    t.set_defaults(fn=cmd_attribute)

    ag = sub.add_parser("aggregate", help="collect cells' phases.csv into run-level tables")
    ag.add_argument("phases", nargs="+", help="phases.csv files (meta.json beside each)")
    ag.add_argument("-o", "--output", required=True, help="tables folder")
    ag.set_defaults(fn=cmd_aggregate)

    mn = sub.add_parser("merge-nodes", help="merge per-node traces and events of a multi-node run, "
                                            "checking that the nodes' clocks agree")
    mn.add_argument("--traces", nargs="+", required=True, help="each node's trace.csv")
    mn.add_argument("--events", nargs="+", required=True, help="each node's events.csv")
    mn.add_argument("--trace", required=True, help="merged trace to write")
    mn.add_argument("--events-out", required=True, help="merged events to write")
    mn.add_argument("--warn-ms", type=float, default=5.0,
                    help="warn above this clock offset between nodes (default 5 ms)")
    mn.set_defaults(fn=cmd_merge_nodes)

    ln = sub.add_parser("launch-node",
                        help="one node's part of a measured job: set the power cap on this node's "
                             "GPUs, run CMD under this node's sampler",
                        description="Used by the launch builder (wattlife.launch) under srun, one "
                                    "per node; the caps are restored whatever happens.")
    ln.add_argument("--config", help="config (or job slice) whose `sampler` section to use "
                                     "(default: none, the built-in sampler defaults)")
    ln.add_argument("--trace", help="trace CSV (one-node jobs; default: none)")
    ln.add_argument("--events", help="events CSV (one-node jobs; default: none)")
    ln.add_argument("--meta", help="meta.json (default beside the trace); with --merge-meta the "
                                   "merged one")
    ln.add_argument("--node-dir", help="write <node-dir>/<host>/{trace,events,meta} (multi-node "
                                       "jobs; default: none)")
    ln.add_argument("--run-id", help="run id recorded in events and meta (default: the folder "
                                     "name)")
    ln.add_argument("--cell", help="JSON of the job's cell, recorded in meta.json (default: none)")
    ln.add_argument("--cap", type=float, help="per-GPU power cap (W) for this node's GPUs "
                                              "(default: none)")
    ln.add_argument("--powercap-backend", default="simulated",
                    choices=["simulated", "nvml", "nvidia-smi"],
                    help="how caps are set (default simulated)")
    ln.add_argument("--allow-real", action="store_true", help="allow real GPU power-limit changes "
                                                              "(default: off)")
    ln.add_argument("--state-dir", help="folder of the powercap-state-<host>.json restore file "
                                        "(default: beside the trace)")
    ln.add_argument("--merge-meta", metavar="NODE_DIR",
                    help="instead: merge NODE_DIR/*/meta.json into --meta (default: none)")
    ln.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    ln.set_defaults(fn=cmd_launch_node)

    ck = sub.add_parser("check", help="validate run directories against the file contracts",
                        description="Check trace, events, meta.json, phases.csv and "
                                    "work/summary.json of each RUN_DIR; every finding names file "
                                    "and line. Exit 1 if any error, 0 otherwise (warnings "
                                    "allowed).")
    ck.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories to check")
    ck.add_argument("--kind", choices=["auto", "none", "image_classification", "causal_lm"],
                    default="auto", help="workload kind whose required phases are checked; auto: "
                    "from meta.json's cell, else work/summary.json, else the phases; none: skip "
                    "(default: auto)")
    ck.add_argument("--json", action="store_true",
                    help="print the findings as a JSON list instead of text (default: text)")
    ck.add_argument("--max-rows", type=int, default=5,
                    help="findings listed per check and file before a count of the rest "
                         "(default: 5)")
    ck.set_defaults(fn=cmd_check)


def _add_workload_commands(sub: Any) -> None:
    """Workloads and their data: train, gen-images, gen-text."""

    tr = sub.add_parser("train", help="run one training workload (phases marked)")
    tr.add_argument("--config", required=True, help="config YAML with the workloads section")
    tr.add_argument("--workload", required=True, help="a key of the config's workloads")
    tr.add_argument("--storage", choices=["shared", "local"], default="shared",
                    help="read the dataset in place, or stage it to local disk first "
                         "(default shared)")
    tr.add_argument("--checkpoint", choices=["off", "sync", "async", "on"], default="off",
                    help="checkpoints: off (default), sync, async (written in the background); "
                    "on = sync")
    tr.add_argument("--workdir", required=True, help="folder for checkpoints and local copies")
    tr.set_defaults(fn=cmd_train)

    gi = sub.add_parser("gen-images", help="generate an ImageNet-layout tree of real JPEG files")
    gi.add_argument("output", help="folder of the tree (train/<class>/*.JPEG, val/<class>/*.JPEG)")
    gi.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    gi.add_argument("--train-per-class", type=int, default=32,
                    help="training images per class (default 32)")
    gi.add_argument("--val-per-class", type=int, default=8,
                    help="validation images per class (default 8)")
    gi.add_argument("--size", type=int, default=96, help="image side in pixels (default 96)")
    gi.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gi.add_argument("--workers", type=int, default=1, help="processes writing files (default 1)")
    gi.set_defaults(fn=cmd_gen_images)

    gt = sub.add_parser("gen-text", help="generate a WikiText-like text corpus")
    gt.add_argument("output", help="folder for train.txt and validation.txt")
    gt.add_argument("--words", type=int, default=200_000, help="words in all (default 200000)")
    gt.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gt.set_defaults(fn=cmd_gen_text)


def _add_prepare_commands(sub: Any) -> None:
    """Preparation and post-execution: fetch, upload, gen-catalogue, prepare-tables."""

    fe = sub.add_parser("fetch", help="fetch an artefact (HTTP(S) URL, Hugging Face repo, or path)",
                        description="Streamed, resumable, retried; sha256-verified; the file "
                                    "appears at its final path only when complete. Run it under "
                                    "`wattlife run` to measure it as a download_dataset / "
                                    "download_model phase.")
    src = fe.add_mutually_exclusive_group(required=True)
    src.add_argument("--url", help="HTTP(S) URL (with --serve-dir: a path under that folder)")
    src.add_argument("--kaggle", metavar="OWNER/DATASET", help="Kaggle dataset (credentials: the "
                                                               "client's)")
    src.add_argument("--path", help="local or shared-file-system path (file or folder)")
    src.add_argument("--hf", metavar="REPO_ID", help="Hugging Face repository (model or dataset: "
                                                     "--kind)")
    fe.add_argument("--revision", help="Hugging Face revision (default main)")
    fe.add_argument("--endpoint", help="Hugging Face endpoint (default HF_ENDPOINT or the Hub)")
    fe.add_argument("-o", "--output", required=True, help="final path of the artefact")
    fe.add_argument("--sha256", type=_sha256,
                    help="expected sha256 of the file (64 hex characters; default: not verified)")
    fe.add_argument("--kind", choices=["dataset", "model"], default="dataset",
                    help="what is fetched: names the phase download_<kind> (default dataset)")
    fe.add_argument("--retries", type=int, default=5,
                    help="retries of a broken HTTP transfer, resumed (default 5)")
    fe.add_argument("--force", action="store_true", help="fetch even if present and verified")
    fe.add_argument("--name", help="artefact name for the record (default: the output's name)")
    fe.add_argument("--record", help="write the transfer's JSON record here (bytes, seconds, "
                                     "network bytes) (default: print only)")
    fe.add_argument("--serve-dir", help="demo/offline: serve this folder on a loopback HTTP server "
                                        "and fetch --url from it (the server's CPU time is "
                                        "measured too) (default: none, fetch from the URL)")
    fe.add_argument("--rate-mbps", type=float,
                    help="rate limit of the loopback server (Mbit/s) (default: unlimited)")
    fe.add_argument("--transfers-at-once", type=int,
                    help="how many transfers the workflow lets run at once (0: no limit), written "
                         "in the record (default: not recorded)")
    fe.set_defaults(fn=cmd_fetch)

    up = sub.add_parser("upload", help="post-execution: send the trained model out (HTTP PUT, "
                                       "Hugging Face, or copy), marked as an `upload` phase")
    up.add_argument("src", nargs="?", help="file or folder to upload")
    up.add_argument("--from-summary", help="upload the last checkpoint a cell's work/summary.json "
                                           "lists (default: SRC)")
    dst = up.add_mutually_exclusive_group(required=True)
    dst.add_argument("--put", metavar="URL", help="HTTP PUT to URL/<file> (with --serve-put: a "
                                                  "path)")
    dst.add_argument("--hf", metavar="REPO_ID", help="Hugging Face model repository")
    dst.add_argument("--copy", metavar="PATH", help="copy to a target path")
    up.add_argument("--endpoint", help="Hugging Face endpoint (default HF_ENDPOINT or the Hub)")
    up.add_argument("--name", help="name for the record (default: the source's name)")
    up.add_argument("--record", help="write the transfer's JSON record here (default: print only)")
    up.add_argument("--serve-put", help="demo/offline: a loopback server storing PUTs in this "
                                        "folder (default: none, PUT to the URL)")
    up.add_argument("--rate-mbps", type=float,
                    help="rate limit of the loopback server (Mbit/s) (default: unlimited)")
    up.add_argument("--transfers-at-once", type=int,
                    help="how many transfers the workflow lets run at once (0: no limit), written "
                         "in the record (default: not recorded)")
    up.set_defaults(fn=cmd_upload)

    gc = sub.add_parser("gen-catalogue", help="generate the config's `generated` catalogue "
                                              "artefacts")
    gc.add_argument("config", help="config YAML with prepare.catalogue")
    gc.add_argument("-o", "--output", required=True, help="folder for the files and manifest.json")
    gc.set_defaults(fn=cmd_gen_catalogue)

    pt = sub.add_parser("prepare-tables", help="download/upload rows, size fit, facility-scale "
                                               "cache estimate and staging break-even")
    pt.add_argument("--config", required=True, help="config YAML (prepare.catalogue, "
                                                    "prepare.facility)")
    pt.add_argument("--records", nargs="+", required=True, help="transfer records (phases.csv "
                                                                "beside each)")
    pt.add_argument("--phase-summary", help="the execution matrix's phase_summary.csv (default: "
                                            "none, no staging break-even table)")
    pt.add_argument("--cell-summaries", nargs="*", default=[],
                    help="cells' work/summary.json (default: none)")
    pt.add_argument("--phases", nargs="*", help="each record's phases.csv, in the order of "
                                                "--records (default: beside each record)")
    pt.add_argument("--cell-metas", nargs="*", help="each cell's meta.json, in the order of "
                                                    "--cell-summaries (default: <cell>/meta.json)")
    pt.add_argument("-o", "--output", required=True, help="tables folder")
    pt.set_defaults(fn=cmd_prepare_tables)


def _add_power_commands(sub: Any) -> None:
    """Power elasticity: sweep, pfi-sweep, aggregate-curves, powercap, pfi, predict,
    allocate, pfi-study, calibrate-sim."""

    sw = sub.add_parser("sweep", help="power-cap sweep of the jobs in a config")
    sw.add_argument("--config", required=True, help="config YAML with the jobs and the cap grid")
    sw.add_argument("-o", "--output", required=True, help="curves.csv to write")
    sw.add_argument("--job", help="only this job of the config (default: every job)")
    sw.set_defaults(fn=cmd_sweep)

    ps = sub.add_parser("pfi-sweep", help="one cell of a config's pfi_matrix trained at one "
                                          "per-GPU cap (the cap on every GPU of every node), as "
                                          "one curve point",
                        description="Writes the curve point (status ok or failed: reason) and, "
                                    "beside it, workload.json, trace.csv, events.csv, meta.json, "
                                    "work/ (and nodes/<host>/, clock_offsets.csv for multi-node "
                                    "cells).")
    ps.add_argument("--config", required=True, help="the config (or the job's slice) with the "
                                                    "pfi_matrix")
    ps.add_argument("--cell", required=True, help="a key of pfi_matrix.cells")
    ps.add_argument("--cap", type=float, required=True, help="per-GPU power cap (W)")
    ps.add_argument("-o", "--output", required=True, help="the curve point to write, e.g. "
                                                          "<results>/pfi/<cell>/cap-<W>/curve-point.csv")
    ps.add_argument("--backend", choices=["simulated", "nvml", "nvidia-smi"],
                    help="override powercap.backend (simulated: no real cap changes) "
                         "(default: the config's powercap.backend)")
    ps.set_defaults(fn=cmd_pfi_sweep)

    acu = sub.add_parser("aggregate-curves", help="assemble curve points / per-job curves into one "
                                                  "table (a `status` column: ok, failed: ..., "
                                                  "missing)")
    acu.add_argument("curves", nargs="+", help="curve-point.csv or curves.csv files")
    acu.add_argument("--job", help="the one job (cell) these points belong to (default: as read)")
    acu.add_argument("--caps", type=_floats, help="the job's expected caps (W); a cap without a "
                                                  "point gets a row with status=missing (default: "
                                                  "none expected)")
    acu.add_argument("-o", "--output", required=True, help="the combined curves.csv to write")
    acu.set_defaults(fn=cmd_aggregate_curves)

    pc = sub.add_parser("powercap", help="show GPU power limits, save them to or restore them "
                                         "from a state file")
    pc.add_argument("action", choices=["show", "save", "restore"],
                    help="show the limits, save them to the state file (a Slurm prolog), or "
                         "restore them from it")
    pc.add_argument("--state", help="for `save` and `restore` (required): the state file; for "
                                    "`restore` after a killed sweep, the "
                                    "powercap-state-<host>.json that launch-node wrote beside the "
                                    "trace (default: none)")
    pc.add_argument("--backend", default="nvml", choices=["nvml", "nvidia-smi", "simulated"],
                    help="for `show` and `save`: where to read the limits (default: "
                         "%(default)s)")
    pc.set_defaults(fn=cmd_powercap)

    f = sub.add_parser("pfi", help="Power Flexibility Index per job from curves.csv")
    f.add_argument("curves", help="curves.csv (the contract's columns) or an Emerald sweep CSV")
    f.add_argument("-o", "--output", required=True, help="pfi.csv to write")
    f.add_argument("--grid", type=_floats, help="cap grid (W) to restrict to, e.g. 200,400,700 "
                                                "(default: every cap of each job)")
    f.add_argument("--mc", type=int, default=2000,
                   help="Monte Carlo draws for the interval (default 2000)")
    f.add_argument("--subgrid", type=_floats,
                   help="also recompute on this sub-grid (grid sensitivity), e.g. 200,500,600,700 "
                        "(default: none)")
    f.add_argument("--compare", help="two GPU models, 'H200,H100': Spearman rho of their PFIs "
                                     "(default: none)")
    f.add_argument("--seed", type=int, default=0, help="Monte Carlo seed (default 0)")
    f.add_argument("--config", help="a config whose pfi_matrix cells give each job's paper_job: "
                                    "the published PFI (95 %% interval) and the 4-cap sub-grid PFI "
                                    "go beside the measured one (default: only if the curves carry "
                                    "a paper_job column)")
    f.set_defaults(fn=cmd_pfi)

    pr = sub.add_parser("predict", help="PFI predictor from telemetry: ablation table")
    pr.add_argument("curves", help="curves.csv with the uncapped run's telemetry columns")
    pr.add_argument("--pfi", required=True, help="pfi.csv of the same jobs (measured PFI)")
    pr.add_argument("-o", "--output", required=True,
                    help="predictor.csv to write (features beside it, <stem>_features.csv)")
    pr.set_defaults(fn=cmd_predict)

    al = sub.add_parser("allocate", help="simulate splitting a global power cut across jobs")
    al.add_argument("curves", help="curves.csv (or an Emerald sweep file)")
    al.add_argument("-o", "--output", required=True,
                    help="per-workload rows CSV; the summary is written beside it (*_summary.csv)")
    al.add_argument("--cuts", type=_floats, default=[0, .05, .1, .15, .2, .25, .3, .35, .4],
                    help="global cuts as fractions of uncapped power (default 0,0.05,...,0.4)")
    al.add_argument("--workloads", type=int, default=500, help="workloads sampled (default 500)")
    al.add_argument("--jobs", type=int, default=100, help="jobs per workload (default 100)")
    al.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    al.add_argument("--mix", default="random",
                    help="'random' (default); 'production' (Hu et al. NSDI '24: 3.2%% pretraining "
                         "jobs, the rest fine-tuning; also production-seren, 0.9%%); or category "
                         "weights like 'pretrain=0.3,finetune=0.7'")
    al.add_argument("--objective", choices=["relative", "absolute"], default="relative",
                    help="throughput summed as each job's share of its uncapped throughput "
                         "(relative, default) or in the curves' units, e.g. tokens/s (absolute)")
    al.add_argument("--exact-oracle", action="store_true",
                    help="no time-sharing between two caps in the oracle: a MILP per workload "
                         "where the envelope bridges a dip (slow on noisy curves; default off)")
    al.add_argument("--pfi", help="pfi.csv (default: computed from the curves)")
    al.add_argument("--strategies", type=lambda s: s.split(","), default=None,
                    help="comma-separated subset of strategies (default: all)")
    al.set_defaults(fn=cmd_allocate)

    st = sub.add_parser("pfi-study", help="the study's allocation experiment on its 25 jobs "
                                          "(curves calibrated to the published PFIs) + A100 sweeps")
    st.add_argument("-o", "--output", default="results/reference/pfi-study",
                    help="folder for the tables and figures (default results/reference/pfi-study)")
    st.add_argument("--workloads", type=int, default=500, help="workloads (default 500)")
    st.add_argument("--jobs", type=int, default=100, help="jobs per workload (default 100)")
    st.add_argument("--cuts", type=_floats, default=[0, .05, .1, .15, .2, .25, .3, .35, .4],
                    help="cuts (default 0,0.05,...,0.4)")
    st.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    st.add_argument("--a100", default="results/reference/a100-emerald/dvfs_sweep.csv",
                    help="measured sweeps run beside it (default the public A100 sweeps)")
    st.add_argument("--no-figures", action="store_true", help="tables only (default: draw figures)")
    st.add_argument("--sensitivity-workloads", type=int, default=100,
                    help="workloads per point of the sensitivity grid (assumed MFU x fine-tuning "
                         "share; default 100; 0: no grid)")
    st.set_defaults(fn=cmd_pfi_study)

    cs = sub.add_parser("calibrate-sim", help="fit the simulated GPU's parameters to measured "
                                              "sweeps")
    cs.add_argument("curves", nargs="?", help="measured sweeps to fit the shared parameters to")
    cs.add_argument("--tdp", type=float, help="TDP (W) of the measured GPU (required with CURVES; "
                                              "default: none)")
    cs.add_argument("--published", metavar="JOBS_CSV",
                    help="instead: calibrate one simulated job per row of the study's table "
                         "(e.g. results/reference/pfi-study/published/pfi-study-jobs.csv) to its "
                         "published PFI on its own grid; -o writes the curves (source "
                         "simulated/calibrated; default: none)")
    cs.add_argument("--noise", type=float, default=0.0,
                    help="with --published: relative within-run noise on every point (default 0)")
    cs.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    cs.add_argument("-o", "--output", help="write the fit as JSON (or, with --published, the "
                                           "curves CSV) (default: print only)")
    cs.set_defaults(fn=cmd_calibrate)


def _add_output_commands(sub: Any) -> None:
    """Outputs: figures, bench."""

    fg = sub.add_parser("figures", help="draw every figure from a tables folder (or the "
                                        "references)")
    fg.add_argument("tables", help="a run's tables folder, or with --reference results/reference")
    fg.add_argument("--reference", action="store_true",
                    help="draw the committed reference results (H200, A100) from their CSVs")
    fg.add_argument("-o", "--output", required=True, help="folder for the PNG and PDF figures")
    fg.set_defaults(fn=cmd_figures)

    b = sub.add_parser("bench", help="benchmarks that print figures (markers, attribution, "
                                     "allocate)")
    b.add_argument("what", choices=["markers", "attribution", "allocate", "all"],
                   help="which benchmark")
    b.add_argument("--scale", type=float, default=1.0,
                   help="fraction of the full-size benchmark (default 1.0)")
    b.set_defaults(fn=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    from .cli_checks import OneLineParser

    p = OneLineParser(prog="wattlife", description=(
        "Where the energy of AI training goes, and how flexible its power is."))
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an error (also WATTLIFE_DEBUG=1)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run_commands(sub)
    _add_workload_commands(sub)
    _add_prepare_commands(sub)
    _add_power_commands(sub)
    _add_output_commands(sub)
    from .cli_slurm import add_parsers as _add_slurm_commands

    _add_slurm_commands(sub)
    return p


def _one_line(exc: BaseException) -> str:
    """One line that names the file/option and what went wrong, for any error a command meets."""
    import json as _json

    import pandas as pd

    if isinstance(exc, OSError) and exc.filename is not None:
        what = exc.strerror or type(exc).__name__
        hint = {"EROFS": "read-only file system: choose another output path",
                "ENOSPC": "no space left on the device: free space or choose another path",
                "EISDIR": "is a directory: give a file path",
                "EACCES": "permission denied"}
        import errno as _errno

        name = _errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.filename}: {hint.get(name, what[:1].lower() + what[1:])}"
    if isinstance(exc, _json.JSONDecodeError):
        return f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, pd.errors.EmptyDataError):
        return f"empty CSV file (no header): {exc}"
    if isinstance(exc, KeyError):
        return f"missing key or column {exc}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input or a fault: one line on stderr naming the file/option, exit 2
    (1 for an unexpected internal error), no traceback unless --debug or WATTLIFE_DEBUG=1.
    Warnings are one line each too."""
    import os
    import warnings

    import pandas as pd
    import yaml

    from .cli_checks import PipeTolerantStdout, check_options

    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("WATTLIFE_DEBUG", "") not in ("", "0")
    name = f"wattlife {args.command}"

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{name}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    stdout, sys.stdout = sys.stdout, PipeTolerantStdout(sys.stdout)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        if not debug:
            warnings.showwarning = show
        try:
            check_options(args, parser)
            _guard(args)
            return int(args.fn(args) or 0)
        except KeyboardInterrupt:
            print(f"{name}: interrupted", file=sys.stderr)
            return 130
        except (ValueError, OSError, RuntimeError, KeyError, pd.errors.ParserError,
                pd.errors.EmptyDataError, yaml.YAMLError) as exc:
            if debug:
                raise
            print(f"{name}: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        except Exception as exc:  # a bug, not bad input: still one line, the traceback on demand
            if debug:
                raise
            print(f"{name}: internal error: {type(exc).__name__}: {_one_line(exc)} "
                  "(rerun with --debug or WATTLIFE_DEBUG=1 for the traceback)", file=sys.stderr)
            return 1
        finally:
            sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
