"""Per-phase table of results/reference/cpu/node-demo from its committed phases.csv files:
per phase and device kind, the sum of energy_j, energy_lo_j and energy_hi_j over its devices."""
import sys
from pathlib import Path

import pandas as pd

REF = Path(sys.argv[1] if len(sys.argv) > 1 else ".")


def rows(path, phases=None, label=None):
    ph = pd.read_csv(path)
    g = ph.groupby(["phase", "device_kind"])[["energy_j", "energy_lo_j", "energy_hi_j"]].sum()
    node = ph[ph.device_kind == "node"].set_index("phase")
    for p in phases or list(node.index):
        def cell(k):
            if (p, k) not in g.index:
                return "–"
            e, lo, hi = g.loc[(p, k)]
            return f"{e:.1f} [{lo:.1f}, {hi:.1f}]"
        flag = " (below node period)" if bool(node.loc[p, "below_node_period"]) else ""
        yield (f"| {label or p}{flag} | {node.loc[p, 'time_s']:.3f} | {cell('gpu')} | "
               f"{cell('cpu')} | {cell('node')} | {cell('node_rest')} |")


print("| phase | time (s) | GPU (simulated) J [lo, hi] | CPU (estimate) J [lo, hi] | "
      "node (emulated) J [lo, hi] | node_rest J [lo, hi] |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for t, p in (("gen-dataset-s", "download_dataset"), ("gen-model-s", "download_model"),
             ("upload", "upload")):
    print(*rows(REF / "transfers" / t / "phases.csv", [p], f"{t} ({p})"), sep="\n")
print(*rows(REF / "phases.csv"), sep="\n")
