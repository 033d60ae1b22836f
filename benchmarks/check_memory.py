"""Issue 43: peak memory and CPU of `wattlife check`, `merge-nodes`, and `attribute` and `check`
of the merged events, on a long run. CPU only, any machine.

`check`: the synthetic run of `long_trace.py` (`--rows` of 20 ms readings of 8 GPUs + CPU, 24 h
= 77.8 M rows; 8 ranks' events, ~11.3 M rows a day), as trace.csv. `merge-nodes`: two nodes'
events of that run (the second's host renamed), each beside a short trace of its own host: what
merging holds is the events. `attribute` (step `attribute`, after `merge`): the merged trace (100
rows) and events (one file of 16 ranks on two hosts), `check-merged` its check: what they hold
is the events. Each command runs in a child process of its own (wall s, CPU s of user +
system, peak RSS); the table is printed with the machine's load average.

    PYTHONPATH=src python3 benchmarks/check_memory.py --rows 77.76e6 --out /tmp/cm
    # the code of another checkout, for "before":
    python3 benchmarks/check_memory.py --rows 77.76e6 --out /tmp/cm --src ../main/src --keep
    # the events alone (beside a 50-row trace), 72 h of them, the trace not written:
    python3 benchmarks/check_memory.py --rows 233.28e6 --out /tmp/cm --events-only --steps events
    # the merged events of 24 h of two nodes attributed and checked (a file of 16 ranks,
    # 22.6 M rows):
    python3 benchmarks/check_memory.py --rows 77.76e6 --out /tmp/cm --events-only \
        --steps merge,attribute,check-merged
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from long_trace import (  # noqa: E402
    ROWS_PER_TICK,
    T0,
    TICK_NS,
    TRACE_HEADER,
    WATTLIFE,
    _check_dir,
    schedule,
    timed,
    write_events,
    write_trace,
)
from outdir import out_dir  # noqa: E402


def _nodes(run: Path) -> list[Path]:
    """Two node folders: the run's events (node01), the same renamed node02; a 1 s trace each."""
    out = []
    for host in ("node01", "node02"):
        d = run / f"merge-{host}"
        d.mkdir(exist_ok=True)
        for p in sorted(run.glob("events*.csv")):
            if not (d / p.name).exists():
                with open(p) as src, open(d / p.name, "w") as dst:
                    for line in src:
                        dst.write(line.replace(",node01,", f",{host},", 1))
        rows = "".join(f"{T0 + k * TICK_NS},{host},gpu0,power_w,300.0,sim\n" for k in range(50))
        (d / "trace.csv").write_text(TRACE_HEADER + rows)
        out.append(d)
    return out


def _events_dir(run: Path) -> Path:
    """The run's events (links) beside a 1 s trace of their host: what `check` holds of them."""
    d = run / "check-events"
    d.mkdir(exist_ok=True)
    for p in sorted(run.glob("events*.csv")):
        if not (d / p.name).exists():
            (d / p.name).symlink_to(p)
    rows = "".join(f"{T0 + k * TICK_NS},node01,gpu0,power_w,300.0,sim\n" for k in range(50))
    (d / "trace.csv").write_text(TRACE_HEADER + rows)
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=10e6, help="trace rows (~; 18 a 20 ms tick)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--src", help="PYTHONPATH of the wattlife to time (default: this one)")
    ap.add_argument("--keep", action="store_true", help="reuse files generated before")
    ap.add_argument("--label", default="", help="a label for the table (e.g. before, after)")
    ap.add_argument("--steps", default="check,merge",
                    help="check, merge, events (`check` of the events beside a 50-row trace), "
                    "attribute, check-merged (the merged run's; after merge) (comma-separated)")
    ap.add_argument("--events-only", action="store_true",
                    help="write the run's events, not its trace (for --steps events)")
    a = ap.parse_args()
    hours = a.rows / ROWS_PER_TICK * TICK_NS / 1e9 / 3600
    run = out_dir(Path(a.out) / f"run-{int(a.rows / 1e6)}M")
    if a.events_only:
        if not (a.keep and (run / "events.csv").exists()):
            write_events(run, schedule(hours))
    elif not (a.keep and (run / "trace.csv").exists()):
        write_trace(run, hours, ["csv"])
    rows = int(hours * 3600 * 1e9 // TICK_NS) * ROWS_PER_TICK
    n_ev = sum(sum(1 for _ in open(p)) - 1 for p in run.glob("events*.csv"))
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| label | command | trace rows | events | wall s | CPU s | peak RSS GB |\n"
          "|---|---|---|---|---|---|---|", flush=True)
    steps = a.steps.split(",")
    if "check" in steps:
        cmd = [*WATTLIFE, "check", str(_check_dir(run, "trace.csv")), "--kind", "none"]
        _row(a.label, "check", f"{rows:,}", f"{n_ev:,}", cmd, a.src)
    if "events" in steps:
        cmd = [*WATTLIFE, "check", str(_events_dir(run)), "--kind", "none"]
        _row(a.label, "check (events)", "50", f"{n_ev:,}", cmd, a.src)
    if "merge" in steps:
        nodes = _nodes(run)
        merged = run / "merged"
        merged.mkdir(exist_ok=True)
        cmd = [*WATTLIFE, "merge-nodes", "--traces", *(str(d / "trace.csv") for d in nodes),
               "--events", *(str(d / "events.csv") for d in nodes),
               "--trace", str(merged / "trace.csv"), "--events-out", str(merged / "events.csv")]
        if not (a.keep and (merged / "events.csv").exists()):
            _row(a.label, "merge-nodes x2", "100", f"{2 * n_ev:,}", cmd, a.src)
    if "check-merged" in steps:
        cmd = [*WATTLIFE, "check", str(run / "merged"), "--kind", "none"]
        _row(a.label, "check (merged)", "100", f"{2 * n_ev:,}", cmd, a.src)
    if "attribute" in steps:
        merged = run / "merged"
        cmd = [*WATTLIFE, "attribute", "--trace", str(merged / "trace.csv"), "--events",
               str(merged / "events.csv"), "-o", str(merged / f"phases{a.label}.csv")]
        _row(a.label, "attribute (merged)", "100", f"{2 * n_ev:,}", cmd, a.src)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


def _row(label: str, what: str, rows: str, n_ev: str, cmd: list[str], src: str | None) -> None:
    wall, cpu, rss, rc = timed(cmd, src)
    print(f"| {label} | {what} | {rows} | {n_ev} | {wall:.1f} | {cpu:.1f} | "
          f"{rss:.2f}{'' if rc == 0 else f' (exit {rc})'} |", flush=True)


if __name__ == "__main__":
    main()
