"""The PFI study's matrix: a `pfi_matrix` cell of the config → the causal-LM workload it trains,
with the GPU's hardware profile (`config.hardware_profile`: cap range, cap grids, GPUs per
node, peak TFLOPS). The typed config (`Settings`, built by the CLI) in; the workload's dict, the
typed cell and its profile out; nothing runs here (the run: `sweeps.real`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import HardwareProfile, PfiCell, Settings, schema
from ..errors import InputError

# fields of a pfi_matrix cell that describe the cell (its name, study label, set, grid, hardware)
# and are not settings of the causal_lm workload
CELL_ONLY_KEYS = ("name", "gpus", "set", "paper_job", "assumed", "hardware", "caps",
                  "expert_parallel")


def _workload_keys() -> set[str]:
    return set(schema()["properties"]["workloads"]["additionalProperties"]["properties"])


def matrix_cell_workload(s: Settings, cell: str
                         ) -> tuple[dict[str, Any], PfiCell, HardwareProfile]:
    """The causal-LM workload of one `pfi_matrix` cell of the typed config `s`, the cell itself
    and its hardware profile (the cell's `hardware`, else `powercap.hardware`)."""
    m = s.pfi_matrix
    if m is None or not m.cells:
        raise InputError("pfi_matrix.cells: missing from the config; pfi-sweep needs a config "
                         "with a pfi_matrix (e.g. config/pfi.yaml)")
    if cell not in m.cells:
        raise InputError(f"pfi_matrix.cells.{cell}: no such cell (have: {sorted(m.cells)})")
    c = m.cells[cell]
    prof = s.cell_hardware(c)
    known = _workload_keys()
    given = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
    w = {"kind": "causal_lm", "dataset": m.dataset, "device": "cuda", "precision": "bf16",
         "steps": 10**9, "val_steps": 5, "fsdp": c.gpus > 1,
         "peak_tflops": prof.peak_tflops_bf16, "tokenizer_vocab": m.tokenizer_vocab,
         **{k: getattr(m, k) for k in ("duration_s", "eval_at_s", "ckpt_at_s")
            if getattr(m, k) is not None},
         **{k: v for k, v in given.items()
            if k not in CELL_ONLY_KEYS and k in known and v is not None}}
    return w, c, prof
