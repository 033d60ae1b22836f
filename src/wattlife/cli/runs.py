"""`wattlife` commands of a measuring run: run, attribute, aggregate, merge-nodes, launch-node,
check."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .options import nonnegative_s, positive_ms

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..config import SamplerSettings


def load_sampler_cfg(path: str | None, **given: Any) -> dict[str, Any]:
    """The `sampler` section a run uses: the config's, or without --config none (every key the
    schema's default: a measured idle baseline of `sampler.idle_baseline_s`, 2 s); the options
    `given` (None = not given) on top. Only that section of the file is read and validated
    (`load_section`): a file holding it alone is a config here, and its errors are the
    section's, named with the file. Its absent keys take the schema's defaults in
    `_sampler_settings`, whose filled object meta.json records."""
    section: dict[str, Any] = {}
    if path:
        from ..config import load_section

        section = load_section(path, "sampler")
    return {**section, **{k: v for k, v in given.items() if v is not None}}


def _sampler_settings(path: str | None, **given: Any) -> SamplerSettings:
    """The typed settings a run's sampler uses: `load_sampler_cfg`'s section read as
    `SamplerSettings` (absent keys: the schema's defaults), here at the edge, once; everything
    below the CLI receives this object, never a mapping."""
    from ..config import SamplerSettings

    return SamplerSettings.from_dict(load_sampler_cfg(path, **given))


def _run_files(a: argparse.Namespace, cmd: list[str]) -> tuple[Path, Path, Path | None]:
    """trace, events and meta of a run: --trace and --events as given, else inside the run folder
    (-o, default `run.naming.default_run_dir`: runs/<script>-<UTC time>/)."""
    if a.trace or a.events:
        if not (a.trace and a.events) or a.output:
            raise InputError("give --trace and --events together, or -o RUN_DIR "
                             "(default runs/<script>-<UTC time>), not both")
        return Path(a.trace), Path(a.events), Path(a.meta) if a.meta else None
    from ..contracts import EVENTS_FILE, META_FILE
    from ..run.naming import default_run_dir

    run_dir = Path(a.output) if a.output else default_run_dir(cmd, a.runs_dir)
    return run_dir / "trace.csv", run_dir / EVENTS_FILE, Path(a.meta or run_dir / META_FILE)


def cmd_run(a: argparse.Namespace) -> int:
    from ..run import run_under_sampler

    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        log.error("wattlife run: give the command after --")
        return 2
    trace, events, meta = _run_files(a, cmd)
    settings = _sampler_settings(a.config, interval_ms=a.interval_ms, gpu=a.gpu, cpu=a.cpu,
                                 idle_baseline_s=a.idle_s)
    try:
        cell = json.loads(a.cell) if a.cell else None
    except ValueError as exc:
        raise InputError(f"--cell: expected JSON, got {a.cell!r} ({exc})") from None
    from ..run.node import short_host
    from ..runlock import run_folder_lock
    from ..slurm_site import check_step

    check_step(short_host())  # in a Slurm job: what the step holds (log); a 1-CPU step refused
    try:
        with run_folder_lock(trace.parent):  # one job per run folder (orphans)
            rc = run_under_sampler(cmd, trace, events, meta, settings=settings,
                                   run_id=a.run_id, cell=cell)
        if not a.trace:  # a run folder of its own: say where, and what comes next
            log.info(f"wattlife run: {trace.parent} (trace, events, meta.json); per-phase energy: "
                     f"wattlife attribute {trace.parent}")
        return rc
    except KeyboardInterrupt:  # before the sampler took over the signals: nothing was started
        log.error("wattlife run: interrupted before CMD started")
        return 130


def _attribute_files(a: argparse.Namespace) -> tuple[str, str, str]:
    """trace, events and phases.csv of `attribute`: the options, or RUN_DIR's files."""
    if a.run_dir:
        run = Path(a.run_dir)
        if not run.is_dir():
            raise FileNotFoundError(2, "No such run folder (expected what `wattlife run` wrote: "
                                       "trace.csv, events.csv, meta.json)", str(run))
        from ..contracts import TRACE_FILES

        found = next((run / n for n in TRACE_FILES if (run / n).exists()), run / "trace.csv")
        return (a.trace or str(found), a.events or str(run / "events.csv"),
                a.output or str(run / "phases.csv"))
    if not (a.trace and a.events and a.output):
        raise InputError("give RUN_DIR, or --trace, --events and -o")
    return a.trace, a.events, a.output


def _show_run(phases: str, run_dir: Path) -> None:
    """RUN_DIR's tables (`wattlife aggregate` of its one run) into RUN_DIR/tables, and its
    per-phase energy, time and energy per item (per-step phases, from the events' step items)
    printed, then its throughput."""
    import pandas as pd

    from ..analysis.aggregate import write_phase_tables

    tables = run_dir / "tables"
    write_phase_tables([phases], tables)
    ps = pd.read_csv(tables / "phase_summary.csv")
    cols = ["device_kind", "phase", "energy_j", "time_s", "energy_per_item_j", "item_unit",
            "source"]
    ps = ps[cols].sort_values(["device_kind", "energy_j"], ascending=[True, False])
    print(ps.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.4g}"))
    th = pd.read_csv(tables / "throughput.csv")
    if "throughput" in th.columns and th["throughput"].notna().any():
        r = th.iloc[0]
        print(f"throughput: {r['throughput']:.4g} {r['throughput_unit']} (basis "
              f"{r['throughput_basis']}); tables: {tables}")


def cmd_attribute(a: argparse.Namespace) -> int:
    from ..attribution import attribute_files

    trace, events, output = _attribute_files(a)
    df = attribute_files(trace, events, output, a.method, a.sensor_window_ms, a.idle_split,
                         a.bootstrap, a.sensor_response, strict=a.strict,
                         warmup_labels=not a.raw_phases)
    if a.run_dir:
        _show_run(output, Path(a.run_dir))
        return 0
    show = df.groupby(["device_kind", "phase", "method", "source"], as_index=False)[
        ["energy_j", "time_s"]].sum().sort_values(["device_kind", "energy_j"],
                                                  ascending=[True, False])
    print(show.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


def cmd_aggregate(a: argparse.Namespace) -> int:
    from ..analysis.aggregate import write_phase_tables

    for p in write_phase_tables(a.phases, a.output):
        print(p)
    return 0


def cmd_merge_nodes(a: argparse.Namespace) -> int:
    from ..merge_nodes import merge_node_runs

    check = merge_node_runs(a.traces, a.events, a.trace, a.events_out, warn_ms=a.warn_ms,
                            metas=a.metas)
    print(check.to_string(index=False, float_format=lambda v: f"{v:.3f}") if len(check)
          else "one host: no clock check")
    return 0


def cmd_launch_node(a: argparse.Namespace) -> int:
    from ..run.node import merge_meta, run_node

    if a.merge_meta:
        if not a.meta:
            raise InputError("launch-node --merge-meta DIR needs --meta OUT")
        merge_meta(a.merge_meta, a.meta)
        return 0
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        raise InputError("launch-node: give the command after --")
    return run_node(cmd, settings=_sampler_settings(a.config), run_id=a.run_id,
                    cell=json.loads(a.cell) if a.cell else {}, trace=a.trace, events=a.events,
                    meta=a.meta, node_dir=a.node_dir, cap_w=a.cap, backend=a.powercap_backend,
                    allow_real=a.allow_real, state_dir=a.state_dir)


def cmd_check(a: argparse.Namespace) -> int:
    from ..check import check_runs

    rc, report = check_runs(a.run_dirs, kind=a.kind, as_json=a.json, max_rows=a.max_rows)
    print(report)
    return rc


def _add_run(sub: Any) -> None:
    """The `run` command's parser."""
    from ..devices.registry import choices as backend_choices  # the sensor-backend registry

    r = sub.add_parser("run", help="run a command under the energy sampler",
                       description="Start the sampler, write the events file's header, run CMD "
                                   "with WATTLIFE_EVENTS set, stop the sampler when CMD ends, "
                                   "write meta.json; exit with CMD's code.")
    r.add_argument("-o", "--output", metavar="RUN_DIR",
                   help="run folder to write trace.csv, events.csv and meta.json in (default: "
                        "--runs-dir/<script>-<UTC yyyymmddThhmmssZ>, e.g. runs/train-"
                        "20261205T143012Z for `python train.py`; its name is the run id)")
    r.add_argument("--runs-dir", default="runs",
                   help="where default run folders go (default: runs)")
    r.add_argument("--trace", help="trace CSV to write, with --events, instead of a run folder "
                                   "(default: RUN_DIR/trace.csv); a name ending .zst writes it "
                                   "zstd-compressed, one frame a flush")
    r.add_argument("--events",
                   help="events CSV to write: its header, then the phases the workload's markers "
                        "append (none for an unmarked command) (default: RUN_DIR/events.csv)")
    r.add_argument("--meta", help="meta.json path (default: beside the trace)")
    r.add_argument("--config", help="config YAML whose `sampler` section to use; only that "
                                    "section is read and checked, the file may hold it alone "
                                    "(default: none, the built-in sampler defaults)")
    r.add_argument("--interval-ms", type=positive_ms,
                   help="sampler interval in ms, > 0 (default: the config's, else 50)")
    r.add_argument("--gpu", choices=backend_choices("gpu"),
                   help="GPU backend (default: the config's, else auto)")
    r.add_argument("--cpu", choices=backend_choices("cpu"),
                   help="CPU backend (default: the config's, else auto)")
    r.add_argument("--idle-s", type=nonnegative_s,
                   help="seconds of idle baseline measured before CMD starts, >= 0 (default: "
                        "the config's sampler.idle_baseline_s, else the schema's, 2)")
    r.add_argument("--run-id", help="run id (default: the trace's folder name)")
    r.add_argument("--cell", help="JSON of the matrix cell, recorded in meta.json; any keys, none "
                                  "required (default: none: the run id names the run in "
                                  "aggregate's tables)")
    r.add_argument("cmd", nargs=argparse.REMAINDER,
                   help="-- CMD [ARGS...]: the command to run (required; no default)")
    r.set_defaults(fn=cmd_run)


def _add_attribute(sub: Any) -> None:
    """The `attribute` command's parser."""
    t = sub.add_parser("attribute", help="trace x events -> per-phase energy (phases.csv)")
    t.add_argument("run_dir", nargs="?", metavar="RUN_DIR",
                   help="a run folder of `wattlife run`: its trace.csv and events.csv in, "
                        "phases.csv and tables/ (energy per item, throughput) out, the "
                        "per-phase table printed (default: none: --trace, --events, -o)")
    t.add_argument("--trace", help="trace CSV/Parquet of the run (meta.json beside it is read if "
                                   "present) (default: RUN_DIR's trace.csv, else its "
                                   "trace.csv.gz, trace.csv.zst or trace.parquet)")
    t.add_argument("--events", help="events CSV of the run (per-rank siblings <stem>.rank<N>.csv "
                                    "are read too) (default: RUN_DIR/events.csv)")
    t.add_argument("-o", "--output", help="phases.csv to write (not an input) (default: "
                                          "RUN_DIR/phases.csv)")
    t.add_argument("--method", default="auto", choices=["auto", "integrate", "deconvolve"],
                   help="auto (default): deconvolve where phases are shorter than two sensor "
                        "periods, else integrate")
    t.add_argument("--strict", action="store_true",
                   help="phases' time outside the trace's span, or a busy GPU no rank claims, "
                        "is an error, not a warning (default: off: a warning)")
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
                   help="split energy into static (idle baseline) and dynamic parts "
                        "(default: off)")
    t.add_argument("--bootstrap", type=int, default=200,
                   help="bootstrap replicates for deconvolution's interval (default 200)")
    t.set_defaults(fn=cmd_attribute)


def _add_aggregate(sub: Any) -> None:
    """The `aggregate` command's parser."""
    ag = sub.add_parser("aggregate", help="collect cells' phases.csv into run-level tables")
    ag.add_argument("phases", nargs="+", help="phases.csv files (meta.json beside each)")
    ag.add_argument("-o", "--output", required=True, help="tables folder")
    ag.set_defaults(fn=cmd_aggregate)


def _add_merge_nodes(sub: Any) -> None:
    """The `merge-nodes` command's parser."""
    mn = sub.add_parser("merge-nodes", help="merge per-node traces and events of a multi-node run, "
                                            "checking that the nodes' clocks agree")
    mn.add_argument("--traces", nargs="+", required=True, help="each node's trace.csv")
    mn.add_argument("--events", nargs="+", required=True, help="each node's events.csv")
    mn.add_argument("--trace", required=True, help="merged trace to write")
    mn.add_argument("--events-out", required=True, help="merged events to write")
    mn.add_argument("--metas", nargs="+", default=None,
                    help="each node's meta.json, in the traces' order, whose recorded clock "
                         "mapping aligns the node (default: the meta.json beside each trace)")
    mn.add_argument("--warn-ms", type=float, default=5.0,
                    help="warn where nodes' step ends still differ by more than this plus the "
                         "alignment's uncertainty (default 5 ms)")
    mn.set_defaults(fn=cmd_merge_nodes)


def _add_launch_node(sub: Any) -> None:
    """The `launch-node` command's parser (`--powercap-backend` choices: the power-cap
    registry)."""
    from ..devices.powercap import cap_backend_choices

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
                    choices=cap_backend_choices("simulated"),
                    help="how caps are set (default simulated)")
    ln.add_argument("--allow-real", action="store_true", help="allow real GPU power-limit changes "
                                                              "(default: off)")
    ln.add_argument("--state-dir", help="folder of the powercap-state-<host>.json restore file "
                                        "(default: beside the trace)")
    ln.add_argument("--merge-meta", metavar="NODE_DIR",
                    help="instead: merge NODE_DIR/*/meta.json into --meta (default: none)")
    ln.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    ln.set_defaults(fn=cmd_launch_node)


def _add_check(sub: Any) -> None:
    """The `check` command's parser."""
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


def add_parsers(sub: Any) -> None:
    """Add this group's parsers, in the order of `wattlife --help` (the module docstring's)."""
    _add_run(sub)
    _add_attribute(sub)
    _add_aggregate(sub)
    _add_merge_nodes(sub)
    _add_launch_node(sub)
    _add_check(sub)
