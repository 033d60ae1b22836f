"""Issue 43: attribution of long traces in bounded memory. CPU only, any machine.

Generates, in chunks, a synthetic run of one 8-GPU node: `--hours` of 20 ms readings (power_w
and energy_j of gpu0..7 and cpu0: 18 rows a tick, 24 h = 77.8 M rows), 8 ranks' events (steps
of ~0.3 s with data_load / forward / backward / optimizer, a 20 s checkpoint every 30 min, a
90 s validation of 0.15 s val_steps every 2 h), as `trace.csv` and/or `trace.csv.zst` (one zstd
frame per 0.5 s, what the sampler writes); then times `wattlife attribute` on each form in a
child process (wall seconds, rows/s, the child's peak RSS), and prints a table.

    PYTHONPATH=src python3 benchmarks/long_trace.py --rows 10e6 --forms csv,zst --out /tmp/lt
    # a longer run of fewer GPUs (memory against length): 72 h of one GPU + CPU, 51.8 M rows
    PYTHONPATH=src python3 benchmarks/long_trace.py --hours 72 --gpus 1 --forms zst --out /tmp/lt
    # the in-memory path of another checkout, for "before" (its forms: csv, gz):
    python3 benchmarks/long_trace.py --rows 10e6 --forms csv,gz --src ../main/src --out /tmp/lt
    # before / after on the same files: each label's phases table kept and compared byte for
    # byte with the others' (`phases.<label>.<form>.csv`)
    python3 benchmarks/long_trace.py --hours 24 --gpus 1 --forms zst --out /tmp/lt \
        --label before --src ../main/src
    python3 benchmarks/long_trace.py --hours 24 --gpus 1 --forms zst --out /tmp/lt \
        --keep --label after

`--keep` reuses the generated files of an earlier call with the same --rows/--out.

`--rank-events` also times one rank's events (rank 0's file) put in start order and built into
its phase tree and segments: in memory (`read_events`, `phase_tree`, `segments`, as `attribute`
does for a rank of up to 2²⁰ rows) and window by window (`pd.read_csv` chunks,
`start_order.start_ordered`, `tree_windows.tree_windows`, each window's segments; `attribute`
builds a longer rank's tree so from `read_events`' checked chunks, here pandas' plain reading);
and that file prepared as `RankEvents` prepares it (warm-up labels, timeline, clamping) in
start order: whole (`read_events`, `label_warmup`, `timeline`, `clamp_events`, `start_order`)
and from the file read in chunks by `events_chunks` (`prepare_windows.prepared_file`: sorted,
labelled and clamped a window at a time). With `--no-attribute` and no other step only the
events are generated:

    PYTHONPATH=src python3 benchmarks/long_trace.py --hours 72 --gpus 1 --out /tmp/lt \
        --no-attribute --rank-events
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from outdir import out_dir  # noqa: E402

T0 = 1_767_225_600_000_000_000  # 2026-01-01 00:00 UTC
TICK_NS = 20_000_000
GPUS = 8  # `--gpus` sets these three
DEVICES = [f"gpu{k}" for k in range(GPUS)] + ["cpu0"]
ROWS_PER_TICK = 2 * len(DEVICES)
TRACE_HEADER = "t_ns,host,device,metric,value,source\n"
EVENTS_HEADER = ("run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock,"
                 "clamp_ns\n")
# fractions of a step: data_load, forward, backward, optimizer (the rest: a gap before the next)
STEP_PARTS = (("data_load", 0.0, 0.10), ("forward", 0.10, 0.37), ("backward", 0.37, 0.87),
              ("optimizer", 0.87, 0.95))
POWER = {"data_load": 180.0, "forward": 550.0, "backward": 650.0, "optimizer": 400.0,
         "gap": 110.0, "checkpoint": 150.0, "val_step": 450.0}


def _segment(rng: np.random.Generator, a: float, b: float, dur: tuple[float, float]
             ) -> np.ndarray:
    """Step start times (s) from a to b, durations uniform in `dur`."""
    d = rng.uniform(*dur, int((b - a) / dur[0]) + 2)
    s = a + np.concatenate([[0.0], np.cumsum(d)])
    return s[s + dur[1] <= b]


def schedule(hours: float, seed: int = 0) -> dict[str, np.ndarray]:
    """The run's phase stream (seconds from the start): steps, checkpoints, validations."""
    rng = np.random.default_rng(seed)
    steps, vals, ckpts, val_steps = [], [], [], []
    span = hours * 3600.0
    for k in range(int(np.ceil(span / 1800.0))):
        a, b = 1800.0 * k + 1.0, min(1800.0 * (k + 1), span - 1.0)
        if b - a < 30:
            break
        if k % 4 == 3:  # validation at the start of every 4th half hour
            vals.append((a, a + 90.0))
            val_steps.append(_segment(rng, a, a + 90.0, (0.15, 0.15)))
            a += 91.0
        ckpts.append((b - 20.0, b))
        steps.append(_segment(rng, a, b - 21.0, (0.28, 0.32)))
    return {"steps": np.concatenate(steps), "val": np.array(vals).reshape(-1, 2),
            "ckpt": np.array(ckpts).reshape(-1, 2),
            "val_steps": np.concatenate(val_steps) if val_steps else np.zeros(0)}


def _levels(sch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Piecewise-constant GPU power: (boundaries s, power after each boundary)."""
    st = sch["steps"]
    d = np.diff(np.append(st, st[-1] + 0.3)).clip(max=0.32)
    cuts = [st[:, None] + d[:, None] * np.array([a for _, a, _ in STEP_PARTS] + [0.95])]
    lv = [np.tile([POWER[n] for n, _, _ in STEP_PARTS] + [POWER["gap"]], (len(st), 1))]
    for a, b in sch["ckpt"]:
        cuts.append(np.array([[a, b]]))
        lv.append(np.array([[POWER["checkpoint"], POWER["gap"]]]))
    vs = sch["val_steps"]
    cuts.append(np.stack([vs, vs + 0.14], 1))
    lv.append(np.tile([POWER["val_step"], POWER["gap"]], (len(vs), 1)))
    bounds = np.concatenate([c.ravel() for c in cuts])
    power = np.concatenate([x.ravel() for x in lv])
    order = np.argsort(bounds, kind="stable")
    return bounds[order], power[order]


def write_events(run: Path, sch: dict[str, np.ndarray]) -> int:
    """One events file per rank (events.csv, events.rank<N>.csv); the rows written."""
    import pandas as pd

    st = sch["steps"]
    d = np.diff(np.append(st, st[-1] + 0.3)).clip(max=0.32)
    n = 0
    for rank in range(GPUS):
        off = rank * 0.0007
        parts = [pd.DataFrame({"phase": name, "start": st + d * a + off, "end": st + d * b + off,
                               "step": np.arange(len(st)), "items": np.nan, "depth": 1})
                 for name, a, b in STEP_PARTS]
        parts.append(pd.DataFrame({"phase": "step", "start": st + off, "end": st + d * 0.95 + off,
                                   "step": np.arange(len(st)), "items": 256.0, "depth": 0}))
        for name, arr, depth in (("checkpoint", sch["ckpt"], 0), ("validation", sch["val"], 0)):
            parts.append(pd.DataFrame({"phase": name, "start": arr[:, 0] + off,
                                       "end": arr[:, 1] + off,
                                       "step": np.searchsorted(st, arr[:, 0]),
                                       "items": np.nan, "depth": depth}))
        vs = sch["val_steps"]
        parts.append(pd.DataFrame({"phase": "val_step", "start": vs + off, "end": vs + 0.14 + off,
                                   "step": np.searchsorted(st, vs), "items": np.nan, "depth": 1}))
        ev = pd.concat(parts, ignore_index=True).sort_values("end", kind="stable")
        ev = pd.DataFrame({"run_id": "long", "host": "node01", "rank": rank, "phase": ev["phase"],
                           "start_ns": T0 + (ev["start"] * 1e9).round().astype(np.int64),
                           "end_ns": T0 + (ev["end"] * 1e9).round().astype(np.int64),
                           "step": ev["step"], "items": ev["items"], "local_rank": rank,
                           "depth": ev["depth"], "clock": "host", "clamp_ns": 0})
        name = "events.csv" if rank == 0 else f"events.rank{rank}.csv"
        with open(run / name, "w") as fh:
            fh.write(EVENTS_HEADER)
            ev.to_csv(fh, header=False, index=False, lineterminator="\n",
                      float_format="%.0f")
        n += len(ev)
    return n


def _trace_chunk(rng: np.random.Generator, ticks: np.ndarray, bounds: np.ndarray,
                 power: np.ndarray, energy0: np.ndarray) -> tuple[bytes, np.ndarray]:
    """CSV rows (no header) of `ticks`: per tick and device a power_w and an energy_j row."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    n, k = len(ticks), len(DEVICES)
    off = np.arange(k) * 110_000  # the driver stamps each GPU a little apart
    t = T0 + ticks[:, None] * TICK_NS + off + rng.integers(-500_000, 500_000, (n, k))
    s = (t - T0) / 1e9
    p = np.empty((n, k))
    for g in range(GPUS):
        p[:, g] = power[np.searchsorted(bounds, s[:, g] - g * 0.0007, "right") - 1]
    p[:, -1] = 180.0 + 60 * (p[:, :GPUS].mean(1) > 300)
    p = (p + rng.normal(0, 12.0, p.shape)).clip(min=20.0).round(3)
    e = energy0 + np.cumsum(p * TICK_NS / 1e9, axis=0)
    tt = np.repeat(t.reshape(-1), 2)
    dev = np.tile(np.repeat(np.array(DEVICES), 2), n)
    metric = np.tile(np.array(["power_w", "energy_j"]), n * k)
    src = np.tile(np.repeat(np.array(["nvml-samples"] * GPUS + ["rapl"]), 2), n)
    src[1::2] = np.where(src[1::2] == "rapl", "rapl", "nvml-counter")
    val = np.stack([p, e.round(6)], 2).reshape(-1)
    table = pa.table({"t_ns": tt, "host": np.full(len(tt), "node01"), "device": dev,
                      "metric": metric, "value": val, "source": src})
    buf = io.BytesIO()
    pacsv.write_csv(table, buf, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    return buf.getvalue(), e[-1]


def _zst_frames(data: bytes, rows_per_frame: int) -> list[bytes]:
    """`data` cut after every `rows_per_frame` lines, each part one zstd frame."""
    from wattlife.contracts.zstd_frames import compress_frame

    nl = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    cuts = np.append(nl[rows_per_frame - 1::rows_per_frame] + 1, len(data))
    starts = np.concatenate([[0], cuts[:-1]])
    return [compress_frame(data[a:b]) for a, b in zip(starts, cuts, strict=True) if b > a]


def write_trace(run: Path, hours: float, forms: list[str], seed: int = 0) -> int:
    """The trace in each form asked for ('csv', 'zst', 'gz'), in chunks; the rows written."""
    sch = schedule(hours, seed)
    bounds, power = _levels(sch)
    rng = np.random.default_rng(seed + 1)
    n_ticks = int(hours * 3600 * 1e9 // TICK_NS)
    outs = {f: open(run / {"csv": "trace.csv", "zst": "trace.csv.zst", "gz": "trace.csv.gz"}[f],
                    "wb") for f in forms}
    gz = gzip.GzipFile(fileobj=outs["gz"], mode="wb", compresslevel=6) if "gz" in outs else None
    from wattlife.contracts.zstd_frames import compress_frame

    head = TRACE_HEADER.encode()
    for f, fh in outs.items():
        (gz if gz is not None and f == "gz" else fh).write(
            compress_frame(head) if f == "zst" else head)
    energy = np.zeros(len(DEVICES))
    for a in range(0, n_ticks, 50_000):
        data, energy = _trace_chunk(rng, np.arange(a, min(a + 50_000, n_ticks)), bounds, power,
                                    energy)
        for f, fh in outs.items():
            if f == "zst":
                fh.write(b"".join(_zst_frames(data, 25 * ROWS_PER_TICK)))
            else:
                (gz if gz is not None and f == "gz" else fh).write(data)
    if gz is not None:
        gz.close()
    for fh in outs.values():
        fh.close()
    write_events(run, sch)
    return n_ticks * ROWS_PER_TICK


# a wrapper process: runs the command, prints its peak RSS (KiB) and CPU seconds (user + system:
# what a shared machine's other load does not inflate) as the last line of stderr
_WRAP = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
         "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
         "print(u.ru_maxrss, u.ru_utime + u.ru_stime, file=sys.stderr); sys.exit(rc)")


WATTLIFE = [sys.executable, "-c", "import sys; from wattlife.cli import main; sys.exit(main())"]
#: one rank's events file (argv[1]) into its tree and segments: whole, and window by window
#: (spilled runs under argv[2])
RANK_WHOLE = [sys.executable, "-c", "import sys; from wattlife.contracts import read_events; "
              "from wattlife.attribution.tree import phase_tree, segments; "
              "segments(phase_tree(read_events(sys.argv[1], siblings=False)))"]
RANK_WINDOWS = [sys.executable, "-c", "import sys, pandas as pd; "
                "from wattlife.attribution.start_order import start_ordered; "
                "from wattlife.attribution.tree_windows import tree_windows; "
                "any(w.segments() is None for w in tree_windows(start_ordered("
                "pd.read_csv(sys.argv[1], chunksize=1 << 16), spill_dir=sys.argv[2])))"]
#: one rank's events file prepared as `RankEvents` prepares it (warm-up labels, timeline,
#: clamping; no meta.json in the synthetic run) and put in start order: the frame whole, and
#: the file read in chunks (`read_events`' own rows), sorted and prepared window by window
RANK_PREP_WHOLE = [sys.executable, "-c", "import sys; from wattlife.contracts import read_events; "
                   "from wattlife.attribution.warmup import label_warmup; "
                   "from wattlife.attribution.tree import clamp_events, timeline; "
                   "from wattlife.attribution.start_order import start_order; "
                   "ev = clamp_events(timeline(label_warmup(read_events(sys.argv[1], lines=True, "
                   "siblings=False)))); ev = ev.iloc[start_order(ev)]"]
RANK_PREP_WINDOWS = [sys.executable, "-c", "import sys; from wattlife.contracts import RunMeta; "
                     "from wattlife.attribution.prepare_windows import prepared_file; "
                     "sum(len(w) for w in prepared_file(sys.argv[1], RunMeta(), False, True, "
                     "False, spill_dir=sys.argv[2]))"]


def timed(cmd: list[str], src: str | None) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS GB, exit status) of one command in a child process of its own."""
    env = dict(os.environ, PYTHONPATH=src or os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _WRAP, *cmd], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    lines = p.stderr.strip().splitlines() or ["nan nan"]
    rss, cpu = (float(x) for x in lines[-1].split())
    if p.returncode > 1:  # 1: `check` found errors (the synthetic run has no meta.json)
        print("\n".join(lines[-20:]), file=sys.stderr)
    return wall, cpu, rss / 1024**2, p.returncode


def _configure(gpus: int) -> None:
    """The node's GPUs (`--gpus`): the devices and the trace rows of a tick."""
    global GPUS, DEVICES, ROWS_PER_TICK
    GPUS = gpus
    DEVICES = [f"gpu{k}" for k in range(GPUS)] + ["cpu0"]
    ROWS_PER_TICK = 2 * len(DEVICES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=10e6, help="trace rows (~; 18 a 20 ms tick)")
    ap.add_argument("--forms", default="csv,zst", help="csv, zst, gz (comma-separated)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--src", help="PYTHONPATH of the wattlife to time (default: this one)")
    ap.add_argument("--keep", action="store_true", help="reuse files generated before")
    ap.add_argument("--label", default="", help="a label for the table (e.g. before, after)")
    ap.add_argument("--check", action="store_true", help="also time `wattlife check`")
    ap.add_argument("--aggregate", action="store_true",
                    help="also time `wattlife aggregate` over 100 runs' phases (copies)")
    ap.add_argument("--no-attribute", action="store_true", help="only the other steps")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of the node (and ranks)")
    ap.add_argument("--hours", type=float, help="the run's length (instead of --rows)")
    ap.add_argument("--rank-events", action="store_true",
                    help="also time one rank's events into its tree, whole and windowed")
    a = ap.parse_args()
    _configure(a.gpus)
    forms = a.forms.split(",")
    if a.hours:
        a.rows = a.hours * 3600 * 1e9 / TICK_NS * ROWS_PER_TICK
    hours = a.rows / ROWS_PER_TICK * TICK_NS / 1e9 / 3600
    tag = "" if GPUS == 8 else f"-{GPUS}gpu"
    run = out_dir(Path(a.out) / f"run-{int(a.rows / 1e6)}M{tag}")
    names = {"csv": "trace.csv", "zst": "trace.csv.zst", "gz": "trace.csv.gz"}
    todo = [f for f in forms if not (a.keep and (run / names[f]).exists())]
    if a.rank_events and a.no_attribute and not (a.check or a.aggregate):
        todo = []  # the events only
        if not (run / "events.csv").exists():
            write_events(run, schedule(hours))
    if todo:
        t = time.perf_counter()
        rows = write_trace(run, hours, todo)
        print(f"generated {rows:,} rows ({hours:.2f} h) as {todo} in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    rows = int(hours * 3600 * 1e9 // TICK_NS) * ROWS_PER_TICK
    n_ev = sum(sum(1 for _ in open(p)) - 1 for p in run.glob("events*.csv"))
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{GPUS} GPU(s) + cpu0, {hours:.1f} h")
    print("| label | step, form | rows | events | file MB | wall s | CPU s | rows/s (wall) | "
          "rows/s (CPU) | peak RSS GB |\n|---|---|---|---|---|---|---|---|---|---|")
    for f in [] if a.no_attribute else forms:
        out = _phases_path(run, a.label, f)
        out.unlink(missing_ok=True)
        _row(a, f"attribute {f}", rows, n_ev, run / names[f],
             [*WATTLIFE, "attribute", "--trace", str(run / names[f]),
              "--events", str(run / "events.csv"), "--out", str(out)])
        _same_as_others(out, f)
    if a.check:
        for f in forms:
            _row(a, f"check {f}", rows, n_ev, run / names[f],
                 [*WATTLIFE, "check", str(_check_dir(run, names[f])), "--kind", "none"])
    if a.rank_events:
        _rank_rows(a, run, rows, n_ev // GPUS)
    if a.aggregate:
        phases = _phases_path(run, a.label, forms[-1])
        files = _aggregate_dirs(run, phases, 100)
        _row(a, "aggregate x100", rows * 100, n_ev * 100, phases,
             [*WATTLIFE, "aggregate", *map(str, files), "-o", str(run / "agg" / "tables")])
    print(json.dumps({"rows": rows, "hours": hours, "events": n_ev}))


def _phases_path(run: Path, label: str | None, form: str) -> Path:
    """The phases table of this label's `attribute` of this trace form."""
    return run / f"phases.{label + '.' if label else ''}{form}.csv"


def _row(a: argparse.Namespace, what: str, rows: int, n_ev: int, path: Path,
         cmd: list[str]) -> None:
    """One timed command, one row of the table (rows: of the traces behind it)."""
    wall, cpu, rss, rc = timed(cmd, a.src)
    mb = path.stat().st_size / 1e6
    print(f"| {a.label} | {what} | {rows:,} | {n_ev:,} | {mb:,.0f} | {wall:.1f} | {cpu:.1f} | "
          f"{rows / wall:,.0f} | {rows / cpu:,.0f} | {rss:.2f}"
          f"{'' if rc == 0 else f' (exit {rc})'} |", flush=True)


def _rank_rows(a: argparse.Namespace, run: Path, rows: int, n_ev: int) -> None:
    """Rank 0's events into its tree (and prepared: read, labelled, clamped, sorted), whole and
    window by window: four rows."""
    ev = run / "events.csv"
    for what, cmd in (("rank events whole", RANK_WHOLE), ("rank events windows", RANK_WINDOWS),
                      ("rank events prepared whole", RANK_PREP_WHOLE),
                      ("rank events prepared windows", RANK_PREP_WINDOWS)):
        _row(a, what, rows, n_ev, ev, [*cmd, str(ev), str(run)])


def _same_as_others(out: Path, form: str) -> None:
    """Whether this phases table is byte for byte each other `--label`'s of the same form."""
    for other in sorted(out.parent.glob(f"phases.*{form}.csv")):
        if other != out and out.exists():
            same = other.read_bytes() == out.read_bytes()
            print(f"phases table {'byte for byte the same as' if same else 'DIFFERS from'} "
                  f"{other.name}", flush=True)


def _check_dir(run: Path, trace_name: str) -> Path:
    """A run folder holding one form of the trace and the events (links)."""
    d = run / f"check-{trace_name}"
    d.mkdir(exist_ok=True)
    for p in [run / trace_name, *run.glob("events*.csv")]:
        if not (d / p.name).exists():
            (d / p.name).symlink_to(p)
    return d


def _aggregate_dirs(run: Path, phases: Path, n: int) -> list[Path]:
    """`n` runs' phases.csv (copies of one), each with a meta.json naming its own repeat."""
    for i in range(n):
        d = run / "agg" / f"r{i:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "phases.csv").write_bytes(phases.read_bytes())
        (d / "meta.json").write_text(json.dumps({
            "schema_version": 1, "run_id": f"long-{i}", "host": "node01",
            "cell": {"workload": "long", "storage": "local", "checkpoint": "off",
                     "repeat": i + 1}}))
    return [run / "agg" / f"r{i:03d}" / "phases.csv" for i in range(n)]


if __name__ == "__main__":
    main()
