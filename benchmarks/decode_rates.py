"""GPU-side image decoding (`decode: gpu`) against the CPU path and synthetic data (issue 30),
in one call on one GPU:

    PYTHONPATH=src python3 benchmarks/decode_rates.py --out DIR

1. JPEGs as ImageNet's: 500 x 375 px, ~74 KB (quality 90), `--classes` x `--per-class`, written
   to local disk (the page cache holds them after the first epoch, as on a node with RAM to spare).
2. ResNet-50 (bf16, batch 128, channels_last) on synthetic on-GPU data (`train_loop.py`, no
   phase markers: wall time over 150 steps after 30 warm-up steps), eagerly and, when a cell
   uses them, with CUDA graphs (`--graphs`): the ceilings, measured in each round. (Calls before
   this flag read `--markers on`, which without `wattlife run` marked nothing either.)
3. The decoder alone (`decoder_probe.py`, its own process): nvImageCodec's batch decode + resize +
   normalise of 128-image batches, full image vs the crop's region only, and which backends decode.
4. The image workload as cells under `wattlife run` (NVML GPU power, attributed per phase):
   `decode: cpu` (PIL in `--workers` loader workers) and `decode: gpu` (the shipped defaults, the
   same `workers`), plus `decode: gpu` variants (full-image decode; more CPU helpers; `-graphs`:
   the model's forward and backward replayed from CUDA graphs, `cuda_graphs: true`; the decode
   stream's priority; batches left in flight).
Writes DIR/gpu_decode.csv (one row a cell: images/s on the `step` basis, GPU-timed as the
workloads report it, and on the `wall` basis; the share of synthetic; the data_load phase's time
share and its GPU and CPU energy; J per image; a cell's share is over the synthetic rate of its
kind, eager or graphs, and `share_of_eager_synthetic` over the eager one),
DIR/decoder_probe.json, DIR/summary.json and the cells' raw files (DIR/cells/<cell>/); prints a
short table. Changes no GPU setting.

With `--confirm K` the `--repeats` rounds screen the cells, and K more rounds run the `decode: gpu`
cell of the highest mean share of synthetic (`selection` in summary.json; `stage` screen/confirm in
the table) beside `--confirm-with`: the summary's intervals are over those K rounds only, which
the choice did not see. `--budget-s` starts no cell or round that would overrun it (`stopped`),
so one device call ends with its tables written.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from execution_stage import cell
from gpu_decode_table import Row, phase_row, select_best, settings_summary
from jpeg_tree import make_tree
from outdir import out_dir

PY = sys.executable
HERE = Path(__file__).resolve().parent
DRY = os.environ.get("WL_DRY") == "1"  # CPU rehearsal: tiny sizes, simulated GPU, no decoder


G = "import wattlife.workloads.gpu_decode as g; "
A = "import wattlife.workloads.gpu_augment as a; "
# a cell is `cpu` or `gpu` (the workload's `decode`) followed by any of these settings, each
# `-<token>`: (workers added to --workers, Python run first in the cell's process, cuda_graphs)
TOKENS = {
    # the model's forward + backward replayed from CUDA graphs (`cuda_graphs: true`); the cell
    # is then shared against the synthetic rate with graphs too
    "graphs": (0, "", True),
    "no-helpers": (0, G + "g.split_workers = lambda w: (4, 0); ", False),  # 4 readers only
    "readers-6": (0, G + "g.split_workers = lambda w: (6, w - 6); ", False),
    "helpers-12": (0, G + "g.split_workers = lambda w: (4, 12); ", False),  # 4 readers, 12 PIL
    "more-helpers": (2, "", False),
    "full-image": (0, G + "g.ROI = False; ", False),  # decode whole images, crop after
    # the augment of the first H200 run (a1be292): augment() image by image, stacked
    "per-image": (0, G + A + "import torch; g.augment_batch = lambda imgs, boxes, flips, size, "
                  "cropped: torch.stack([a.augment(*x, size, cropped) for x in zip(imgs, boxes, "
                  "flips)]).contiguous(memory_format=torch.channels_last); ", False),
    "batched": (0, A + "a.BATCHED = True; ", False),  # the batched resize
    "priority": (0, G + "g.PRIORITY = -5; ", False),  # the decode stream at the highest priority
    "in-flight": (0, G + "g.IN_FLIGHT = 2; ", False),  # 2 batches not waited for
    "ahead-6": (0, G + "g.AHEAD = 6; ", False),  # 6 decoded batches queued for the step, not 3
    "bytes": (0, G + "g.PACK = False; ", False),  # raw batches as pickled bytes, not packed
    "threads-4": (0, G + "g.DECODER_THREADS = 4; ", False),  # nvImageCodec's CPU threads
    "nice": (0, G + "g.HELPERS_NICE = 5; ", False),  # the PIL helpers at niceness +5
    # the helpers' batches as float from their workers (before gpu_decode.HELPERS_UINT8)
    "float-helpers": (0, G + "g.HELPERS_UINT8 = False; ", False),
}
CELLS = ("cpu", "gpu", "gpu-per-image", "gpu-full-image", "gpu-no-helpers", "gpu-readers-6",
         "gpu-more-helpers", "cpu-graphs", "gpu-graphs", "gpu-no-helpers-graphs")  # the default


def listed(names: str) -> list[str]:
    """A comma-separated option's names (none for an empty string)."""
    return [n for n in names.split(",") if n]


def cell_settings(name: str) -> tuple[str, int, str, bool]:
    """(decode, workers added, prelude, cuda_graphs) of cell `name`: `cpu` or `gpu`, then
    `TOKENS` joined by `-` in any order (e.g. `gpu-graphs-priority-in-flight`)."""
    decode, _, rest = name.partition("-")
    if decode not in ("cpu", "gpu"):
        raise ValueError(f"cell {name!r}: starts with cpu or gpu (the decode path)")
    more, prelude, graphs = 0, "", False
    while rest:
        token = max((t for t in TOKENS if rest == t or rest.startswith(t + "-")), key=len,
                    default=None)
        if token is None:
            raise ValueError(f"cell {name!r}: {rest!r} does not start with a setting; "
                             f"settings: {', '.join(TOKENS)}")
        dm, dp, dg = TOKENS[token]
        more, prelude, graphs = more + dm, prelude + dp, graphs or dg
        rest = rest[len(token) + 1:]
    return decode, more, prelude, graphs


# "gpu-process" (decoding in a process of its own) ran at 61ac38a, whose workloads/
# gpu_decode_process.py was removed after it measured slower (gpu-decode-batched/README.md)


class Call:
    """One call of the benchmark: its arguments, folders, the results recorded so far
    (DIR/summary.json, saved after every run) and its clock against `--budget-s`: the longest
    run so far of each kind (`cpu` and `gpu` cells, `synthetic` runs) says whether the next cell
    or round still fits."""

    def __init__(self, a: argparse.Namespace, out: Path) -> None:
        self.a, self.out, self.work = a, out, Path(a.work)
        self.res: Row = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv}
        self.t0 = time.time()
        self.longest: dict[str, float] = {}
        # runs kept in reserve for the confirming rounds while screening: {kind: count}
        self.reserve: dict[str, int] = {}
        self.multi = a.repeats > 1 or a.confirm > 0  # runs named `<name>-r<round>`

    def synthetic_key(self, round_no: int, graphs: bool) -> str:
        """Where a round's synthetic rate (eager, or with CUDA graphs) is recorded."""
        return (f"synthetic-r{round_no}" if self.multi else "synthetic") \
            + ("-graphs" if graphs else "")

    def save(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.res, indent=1, default=str))

    def took(self, kind: str, since: float) -> None:
        self.longest[kind] = max(self.longest.get(kind, 0.0), time.time() - since)

    def estimate(self, kind: str) -> float:
        """The longest run of `kind` so far; a cell kind not run yet: the longest cell."""
        if kind in self.longest or kind == "synthetic":
            return self.longest.get(kind, 0.0)
        return max((v for k, v in self.longest.items() if k != "synthetic"), default=0.0)

    def fits(self, what: str, **runs: int) -> bool:
        """Whether `runs` ({kind: count}), and the runs `reserve`d for the confirming rounds,
        each as long as `estimate` says, end within `--budget-s` (0: no limit); if not, why is
        added to `stopped`."""
        need = sum(self.estimate(k) * (runs.get(k, 0) + self.reserve.get(k, 0))
                   for k in set(runs) | set(self.reserve))
        used = time.time() - self.t0
        if not self.a.budget_s or used + need <= self.a.budget_s:
            return True
        why = (f"{what} not started: {used:.0f} s used, ~{need:.0f} s needed"
               + (" (with the confirming rounds' reserve)" if self.reserve else "")
               + f", --budget-s {self.a.budget_s:g}")
        self.res.setdefault("stopped", []).append(why)
        print(f"budget: {why}", flush=True)
        self.save()
        return False


def run_cells(call: Call, names: list[str], synthetic: dict[bool, float | None],
              round_no: int) -> list[Row]:
    """One round of the workload's cells `names` (and the decoder probe after the first `gpu`
    cell of the call); table rows, each cell's share against the round's synthetic rate of the
    same kind (`synthetic[cuda_graphs]`: eager, or with CUDA graphs) and the eager one. Each round
    starts one cell later in the list, so no cell always runs first; with several rounds cell
    folders are `<cell>-r<round>`. A cell that would overrun `--budget-s` is not started."""
    a, work, out, res = call.a, call.work, call.out, call.res
    shared = work / "shared"
    rows = []
    k = (round_no - 1) % len(names)
    for name in names[k:] + names[:k]:
        decode, more, prelude, graphs = cell_settings(name)
        if not call.fits(f"cell {name} of round {round_no}", **{decode: 1}):
            break
        cfg = {"storage": {"shared": str(shared), "local": str(work / "local")},
               "workloads": {"r50": {
                   "kind": "image_classification", "dataset": "jpeg500", "model": "resnet50",
                   "device": "cpu" if DRY else "cuda", "precision": "bf16",
                   "image_size": 32 if DRY else 224, "batch_size": 4 if DRY else 128,
                   "steps": 6 if DRY else a.steps, "workers": 1 if DRY else a.workers + more,
                   "prefetch": 4, "val_every": 0, "lr": 0.1, "decode": decode,
                   "cuda_graphs": graphs}}}
        run = f"{name}-r{round_no}" if call.multi else name
        t = time.time()
        res[run] = cell(work, run, cfg, "r50", "shared", False, out, prelude=prelude)
        call.took(decode, t)
        rows.append({"setting": name, "repeat": round_no, "cuda_graphs": graphs,
                     "synthetic_images_per_s": synthetic[graphs],
                     "synthetic_eager_images_per_s": synthetic[False],
                     **phase_row(out, run, res[run], synthetic[graphs])})
        if synthetic[False] and "images_per_s_step" in rows[-1]:
            rows[-1]["share_of_eager_synthetic"] = rows[-1]["images_per_s_step"] / synthetic[False]
        call.save()
        if decode == "gpu" and "decoder_probe" not in res and not DRY:  # the decoder alone, once
            r = subprocess.run([PY, str(HERE / "decoder_probe.py"), str(shared / "jpeg500")],
                               capture_output=True, text=True)
            res["decoder_probe"] = json.loads(r.stdout.strip().splitlines()[-1]) \
                if r.returncode == 0 else r.stderr[-2000:]
            (out / "decoder_probe.json").write_text(json.dumps(res["decoder_probe"], indent=1))
            call.save()
    return rows


def synthetic_rate(call: Call, key: str, graphs: bool = False) -> float | None:
    """ResNet-50 on synthetic on-GPU data (`train_loop.py`; `graphs`: with CUDA graphs),
    images/s; recorded in the call's results under `key`."""
    if DRY:
        return None
    t, steps = time.time(), call.out / "synthetic" / f"{key}.csv"  # its raw record, packed
    steps.parent.mkdir(exist_ok=True)
    r = subprocess.run([PY, str(HERE / "train_loop.py"), "--batch", "128", "--steps", "150",
                        "--warmup", "30", "--markers", "off", "--steps-csv", str(steps),
                        *(["--graphs"] if graphs else [])], capture_output=True, text=True)
    call.took("synthetic", t)
    call.res[key] = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 \
        else r.stderr[-2000:]
    return call.res[key].get("images_per_s") if r.returncode == 0 else None


def run_round(call: Call, names: list[str], round_no: int, stage: str,
              eager: bool = True) -> tuple[list[Row], dict[bool, float | None]]:
    """A round: the synthetic rates it needs (with graphs where a cell runs graphs; eagerly
    where `eager` or a cell runs eagerly), then its cells; rows marked with `stage`."""
    kinds = {cell_settings(n)[3] for n in names}
    synthetic = {g: synthetic_rate(call, call.synthetic_key(round_no, g), g)
                 if g in kinds or (eager and not g) else None for g in (False, True)}
    call.save()
    rows = run_cells(call, names, synthetic, round_no)
    return [{**r, "stage": stage} for r in rows], synthetic


def ladder(call: Call, rows: list[Row], synthetic: dict[bool, float | None]) -> list[Row]:
    """`--ladder`: after the screening rounds, each step runs the `gpu` cell of the highest share
    so far (`select_best` over every screening row) with the step's settings added, in the last
    screening round (its synthetic rates; one measured now where a step needs another kind): a
    greedy search, n = 1 a step. Stops where the budget does."""
    added: list[Row] = []
    for step in listed(call.a.ladder):
        choice = select_best(pd.DataFrame(rows + added))
        if choice is None:
            break
        name = f"{choice['setting']}-{step}"
        graphs = cell_settings(name)[3]
        if synthetic.get(graphs) is None and not DRY:
            synthetic[graphs] = synthetic_rate(call, call.synthetic_key(call.a.repeats, graphs),
                                               graphs)
        new = run_cells(call, [name], synthetic, call.a.repeats)
        if not new:
            break
        added += [{**r, "stage": "screen", "ladder_step": step} for r in new]
        pd.DataFrame(rows + added).to_csv(call.out / "gpu_decode.csv", index=False)
    return added


def confirm_reserve(a: argparse.Namespace) -> dict[str, int]:
    """The runs the `--confirm` rounds take at most, by kind, before the screening has chosen
    their `gpu` cell: it, the `--confirm-with` cells, and the synthetic rates they need (with
    the chosen cell's kind, eager or graphs, the one that adds most)."""
    with_ = listed(a.confirm_with)
    runs = Counter(cell_settings(n)[0] for n in with_ + ["gpu"])
    kinds = {cell_settings(n)[3] for n in with_}
    chosen = {cell_settings(n)[3] for n in listed(a.cells) if n.startswith("gpu")}
    if any(cell_settings(f"gpu-{s}")[3] for s in listed(a.ladder)):
        chosen.add(True)  # a ladder step adds graphs
    synthetic = max((len(kinds | {k}) for k in chosen), default=0)
    return {k: a.confirm * v for k, v in (*runs.items(), ("synthetic", synthetic))}


def confirm_rounds(call: Call, screen: list[Row]) -> list[Row]:
    """`--confirm` rounds of the `decode: gpu` setting the screening rounds ran best
    (`select_best`, recorded as `selection`) and the `--confirm-with` cells, numbered after the
    screening rounds; a round that would overrun `--budget-s` is not started."""
    choice = select_best(pd.DataFrame(screen))
    call.res["selection"], call.reserve = choice, {}
    call.save()
    if choice is None:
        print("confirm: no decode: gpu cell ran in the screening rounds; nothing to confirm")
        return []
    print(f"confirm: {choice['setting']} ({choice['basis']} {choice['value']:.4g} in screening; "
          f"all: {json.dumps(choice['by_setting'])})", flush=True)
    names = [choice["setting"]] + listed(call.a.confirm_with)
    runs = Counter(cell_settings(n)[0] for n in names)
    synthetic = len({cell_settings(n)[3] for n in names})  # eager and/or with graphs
    rows: list[Row] = []
    for k in range(1, call.a.confirm + 1):
        round_no = call.a.repeats + k
        if not call.fits(f"confirming round {round_no}", **runs, synthetic=synthetic):
            break
        rows += run_round(call, names, round_no, "confirm", eager=False)[0]
        pd.DataFrame(screen + rows).to_csv(call.out / "gpu_decode.csv", index=False)
    return rows


def report(call: Call, rows: list[Row], confirmed: list[Row]) -> None:
    """DIR/gpu_decode_summary.csv over the confirming rounds (else over all rounds, where more
    than one ran), and the short tables on stdout."""
    basis = confirmed if call.a.confirm else rows
    if len({r["repeat"] for r in basis}) > 1:
        summary = settings_summary(pd.DataFrame(basis))
        summary.to_csv(call.out / "gpu_decode_summary.csv", index=False)
        print(("confirming rounds only: " if call.a.confirm else "")
              + summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    table = pd.DataFrame(rows)
    cols = [c for c in ("cell", "stage", "decode", "images_per_s_step", "images_per_s_wall",
                        "share_of_synthetic", "data_load_share_of_step_time", "gpu_data_load_j",
                        "cpu_data_load_j", "gpu_training_j_per_image", "host_busy_pct_median",
                        "decode_batches")
            if c in table]
    synthetic = {k: v for k, v in call.res.items() if k.startswith("synthetic")}
    print("synthetic (on-GPU data, images/s): " + (", ".join(
        f"{k} {v.get('images_per_s') if isinstance(v, dict) else 'failed'}"
        for k, v in synthetic.items()) or "none measured"))
    if len(table):
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if "decode_stage_ms" in table:  # where each decode side's thread spent a batch's time
        for cell_name, stages in zip(table["cell"], table["decode_stage_ms"], strict=True):
            print(f"  {cell_name}: ms a batch {stages}")
    for why in call.res.get("stopped", []):
        print(f"stopped early: {why}")
    print(json.dumps(call.res.get("decoder_probe"), indent=None))


def parse_args() -> argparse.Namespace:
    """The command line, every cell name checked (a misspelt one stops here, before any GPU
    work)."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--classes", type=int, default=10, help="JPEG classes (default 10)")
    ap.add_argument("--per-class", type=int, default=600,
                    help="training JPEGs a class (default 600)")
    ap.add_argument("--workers", type=int, default=12,
                    help="loader workers of each cell (default 12)")
    ap.add_argument("--steps", type=int, default=200, help="training steps a cell (default 200)")
    ap.add_argument("--cells", default=",".join(CELLS),
                    help="which cells, comma-separated: cpu or gpu, each followed by any of "
                         f"the settings -{', -'.join(TOKENS)} (default {','.join(CELLS)})")
    ap.add_argument("--work", default="/tmp/wl-gpu-decode",
                    help="data and scratch folder (default /tmp/wl-gpu-decode)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of (synthetic, then every cell in a rotated order); above 1 "
                         "also DIR/gpu_decode_summary.csv with 95 %% intervals (default 1)")
    ap.add_argument("--confirm", type=int, default=0,
                    help="after the --repeats rounds (then screening rounds), this many rounds "
                         "of the gpu cell that screened best (highest mean share of synthetic) "
                         "and --confirm-with; the summary's intervals are then over these "
                         "rounds only (default 0: none)")
    ap.add_argument("--ladder", default="",
                    help="screening steps after the --repeats rounds, comma-separated settings "
                         "(each one or more of the cell settings joined by -, e.g. "
                         "priority-in-flight,batched,nice): each runs the gpu cell of the "
                         "highest share so far with the step added (default: none)")
    ap.add_argument("--confirm-with", default="",
                    help="cells run beside the selected one in each confirming round, "
                         "comma-separated, e.g. cpu (default: none)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="seconds for the whole benchmark: a cell or confirming round that would "
                         "end after them (judged by the longest run so far; while screening, "
                         "with room kept for the --confirm rounds) is not started, and the "
                         "tables are written (default 0: no limit)")
    a = ap.parse_args()
    if not listed(a.cells):
        ap.error("--cells: at least one cell, e.g. cpu,gpu-graphs")
    named = [("--cells", n, n) for n in listed(a.cells)] \
        + [("--confirm-with", n, n) for n in listed(a.confirm_with)] \
        + [("--ladder", s, f"gpu-{s}") for s in listed(a.ladder)]
    for option, given, name in named:
        try:  # a misspelt cell stops here, before any GPU work
            cell_settings(name)
        except ValueError as exc:
            ap.error(f"{option} {given!r}: {exc}")
    return a


def main() -> None:
    a = parse_args()
    call = Call(a, out_dir(a.out))
    classes, per_class, w, h = (2, 6, 64, 48) if DRY else (a.classes, a.per_class, 500, 375)
    call.res["data"] = make_tree(call.work / "shared" / "jpeg500", classes, per_class, w, h)
    call.save()
    if a.confirm:  # screening leaves room for the confirming rounds
        call.reserve = confirm_reserve(a)
    rows: list[Row] = []
    for round_no in range(1, a.repeats + 1):
        new, synthetic = run_round(call, listed(a.cells), round_no,
                                   "screen" if a.confirm or a.ladder else "round")
        rows += new
        pd.DataFrame(rows).to_csv(call.out / "gpu_decode.csv", index=False)
        if "stopped" in call.res:
            break
    if a.ladder and "stopped" not in call.res:
        rows += ladder(call, rows, synthetic)
    confirmed = confirm_rounds(call, rows) if a.confirm else []
    report(call, rows + confirmed, confirmed)


if __name__ == "__main__":
    main()
