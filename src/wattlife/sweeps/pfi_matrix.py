"""The PFI study's matrix: a `pfi_matrix` cell of the config → the causal-LM workload it trains,
with the GPU's hardware profile (`config/hardware/<name>.yaml`: cap range, cap grids, GPUs per
node, peak TFLOPS). Config in, dicts out; nothing runs here (the run: `sweeps.real`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HARDWARE_DIR = Path(__file__).resolve().parents[3] / "config" / "hardware"


def hardware_profile(name_or_path: str) -> dict[str, Any]:
    """A GPU's power-cap profile: `config/hardware/<name>.yaml` or a path."""
    import yaml

    p = Path(name_or_path)
    if not p.exists():
        p = HARDWARE_DIR / f"{name_or_path}.yaml"
    if not p.exists():
        raise FileNotFoundError(f"hardware profile {name_or_path!r} not found (a path, or one of "
                                f"{sorted(x.stem for x in HARDWARE_DIR.glob('*.yaml'))})")
    prof = yaml.safe_load(p.read_text())
    bad = [c for c in prof["grid_w"] + prof["grid_large_w"]
           if not prof["min_cap_w"] <= c <= prof["max_cap_w"]]
    if bad:
        raise ValueError(f"{p}: caps {bad} outside [{prof['min_cap_w']}, {prof['max_cap_w']}] W")
    return prof


# keys of a pfi_matrix cell that describe the cell (its study label, set, grid, hardware) and are
# not settings of the causal_lm workload
CELL_ONLY_KEYS = ("gpus", "set", "paper_job", "assumed", "hardware", "caps", "expert_parallel")


def _workload_keys() -> set[str]:
    import yaml

    from ..config import schema_path

    sch = yaml.safe_load(schema_path().read_text())
    return set(sch["properties"]["workloads"]["additionalProperties"]["properties"])


def matrix_cell_workload(cfg: dict[str, Any], cell: str
                         ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The causal-LM workload of one `pfi_matrix` cell, the cell itself and its hardware profile
    (the cell's `hardware`, else `powercap.hardware`)."""
    m = cfg.get("pfi_matrix") or {}
    if not m.get("cells"):
        raise ValueError("pfi_matrix.cells: missing from the config; pfi-sweep needs a config "
                         "with a pfi_matrix (e.g. config/pfi.yaml)")
    if cell not in m["cells"]:
        raise ValueError(f"pfi_matrix.cells.{cell}: no such cell (have: {sorted(m['cells'])})")
    c = m["cells"][cell]
    prof = hardware_profile(c.get("hardware") or cfg.get("powercap", {}).get("hardware", "h200"))
    known = _workload_keys()
    w = {"kind": "causal_lm", "dataset": m["dataset"], "device": "cuda", "precision": "bf16",
         "steps": 10**9, "val_steps": 5, "fsdp": c["gpus"] > 1,
         "peak_tflops": prof["peak_tflops_bf16"],
         "tokenizer_vocab": m.get("tokenizer_vocab", 32768),
         **{k: m[k] for k in ("duration_s", "eval_at_s", "ckpt_at_s") if k in m},
         **{k: v for k, v in c.items() if k not in CELL_ONLY_KEYS and k in known}}
    return w, c, prof


