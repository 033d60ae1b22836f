"""performance.csv rebuilt from the committed runs' events (no GPU), every committed GPU run of
the given reference folders.

    PYTHONPATH=src python3 benchmarks/performance_csv.py [--ref results/reference/h200 ...]
        [--out results/reference/h200/performance.csv]

A run is every workload summary (`summary.json` with a `throughput_unit`) that has its run's
`events.csv` beside it or one folder up (`work/summary.json`), in a folder or inside a committed
archive (`.tar.gz`, `.tgz`); its label is that folder's path under its `--ref` root (an archive's
members as `ARCHIVE:FOLDER`), so each row names the files it was recomputed from. Left out, as
they are not workload runs: the calls' own summaries (`summary.json` without `throughput_unit`:
the decode calls', the attribution and peers runs', whose loads are `gpu_loads.py` and
`train_loop.py` without a workload summary), runs without events (the synthetic ceilings of
the decode calls, the MoE profile), and the sealed attempts under an `attempts/` folder (issue
39's custody: each published cell under `runs/` is one of them, counted there once).

One row per run and throughput basis, each recomputed from the run's `step` events
(wattlife.analysis.performance): `step` = the steady steps' items over the sum of their
durations (GPU-timed where the events say `clock=cuda`; the first 3 steps left out), `wall` = all
steps' items over the training loop's span in the events (compilation, warm-up and pauses
included). MFU on the same basis with attention counted in full (`mfu`) and halved for causal
masking (`mfu_causal`); FLOPs per token and the peak from the run's summary, the attention FLOPs
from its summary or, for summaries written before they were recorded, from the model config.
`gpu_model` is the run's `meta.json`'s. Several `--ref` roots (e.g. the H200's and the H100's)
make one table.
"""

from __future__ import annotations

import argparse
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
from outdir import out_dir

from wattlife.analysis.performance import performance_table

ARCHIVES = ("*.tar.gz", "*.tgz")


def model_name(summary: dict[str, Any]) -> str:
    """The run's model: `resnet50` for the image workload, the shipped config's name for the
    causal LMs measured so far (Qwen3-1.7B; Qwen3-30B-A3B reduced to 8 layers), else the model
    type and its parameter count."""
    kind, params = summary.get("model_type"), float(summary.get("parameters") or 0)
    if kind is None:
        return "resnet50"
    if kind == "qwen3" and params < 2.5e9:
        return "qwen3-1.7b"
    if kind == "qwen3_moe" and params < 6e9:
        return "qwen3-30b-a3b (8 layers)"
    return f"{kind} ({params / 1e9:.2f} B parameters)"


def attention_flops(summary: dict[str, Any], model: str) -> float | None:
    """Attention FLOPs per token of a causal LM run (the workload's own formula on the shipped
    model config, with the 8-layer override of the reduced MoE); None for other runs and for
    models without a shipped config."""
    if "seq_len" not in summary or summary.get("attention_flops_per_token"):
        return None
    from types import SimpleNamespace

    from wattlife.config import resource_path
    from wattlife.workloads.lm_model import attention_flops_per_token

    name = model.split(" (")[0]
    try:
        cfg = json.loads(resource_path("models", f"{name}.json").read_text())
    except FileNotFoundError:
        return None
    if "8 layers" in model:
        cfg["num_hidden_layers"] = 8
        cfg.pop("layer_types", None)
    return attention_flops_per_token(SimpleNamespace(**cfg), int(summary["seq_len"]))


def events_beside(names: set[str], summary: str) -> str | None:
    """The events file of a summary at `summary` among `names` (its folder, or one up)."""
    p = PurePosixPath(summary)
    for d in (p.parent, p.parent.parent):
        if str(d / "events.csv") in names:
            return str(d / "events.csv")
    return None


def committed_runs(root: Path
                   ) -> Iterator[tuple[str, dict[str, Any], pd.DataFrame, dict[str, Any]]]:
    """(label, summary, events, meta) of every committed workload run under `root` (module
    docstring), in path order."""
    files = {str(p.relative_to(root)) for p in root.rglob("*")
             if p.is_file() and "attempts" not in p.relative_to(root).parts}
    for s in sorted(f for f in files if f.endswith("summary.json")):
        summary, ev = json.loads((root / s).read_text()), events_beside(files, s)
        if "throughput_unit" in summary and ev:
            folder = str(PurePosixPath(ev).parent)
            meta = root / folder / "meta.json"
            yield (folder, summary, pd.read_csv(root / ev),
                   json.loads(meta.read_text()) if meta.exists() else {})
    for pattern in ARCHIVES:
        for arc in sorted(root.rglob(pattern)):
            yield from archive_runs(arc, str(arc.relative_to(root)))


def member(tar: tarfile.TarFile, name: str) -> bytes:
    """The bytes of a regular file `name` in `tar`."""
    f = tar.extractfile(name)
    if f is None:
        raise ValueError(f"{tar.name!r}: {name} is not a regular file")
    return f.read()


def archive_runs(arc: Path, label: str
                 ) -> Iterator[tuple[str, dict[str, Any], pd.DataFrame, dict[str, Any]]]:
    """`committed_runs` of one archive."""
    with tarfile.open(arc) as tar:
        # a published cell's files are hard links to its sealed attempt: the cell is counted by
        # its `runs/` path, once, and the attempts' folders are left out (as `committed_runs` does)
        names = {m.name for m in tar.getmembers() if (m.isfile() or m.islnk())
                 and "attempts" not in PurePosixPath(m.name).parts}
        for s in sorted(n for n in names if n.endswith("summary.json")):
            summary, ev = json.loads(member(tar, s)), events_beside(names, s)
            if "throughput_unit" not in summary or not ev:
                continue
            folder = str(PurePosixPath(ev).parent)
            meta = f"{folder}/meta.json"
            yield (f"{label}:{folder}", summary, pd.read_csv(io.BytesIO(member(tar, ev))),
                   json.loads(member(tar, meta)) if meta in names else {})


def build(roots: list[Path]) -> pd.DataFrame:
    """The performance table of every committed run under `roots` (labels prefixed with the
    root's name when there are several), with each run's `gpu_model`."""
    runs, gpus = [], {}
    for root in roots:
        prefix = f"{root.name}/" if len(roots) > 1 else ""
        for label, summary, ev, meta in committed_runs(root):
            model = model_name(summary)
            runs.append((prefix + label, model, summary, ev, attention_flops(summary, model)))
            gpus[prefix + label] = meta.get("gpu_model")
    df = performance_table(runs)
    df.insert(1, "gpu_model", df["run"].map(gpus))
    return df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", action="append", type=Path,
                    help="a reference folder (repeatable; default results/reference/h200)")
    ap.add_argument("--out", type=Path, help="default: performance.csv in the first --ref")
    a = ap.parse_args()
    roots = a.ref or [Path("results/reference/h200")]
    out = a.out or roots[0] / "performance.csv"
    out_dir(out.parent)  # a folder that cannot be written stops it before the reading
    df = build(roots)
    df.to_csv(out, index=False, float_format="%.6g")
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
