"""How many sensor gaps each threshold finds in the committed reference traces (issue 41), where
no sensor failed: each one found is a false flag. Chooses `attribution.gaps.GAP_PERIODS`.

    PYTHONPATH=src python3 benchmarks/gap_threshold.py [--root results/reference]

Reads every trace (`trace*.csv`, `.csv.gz`, `.csv.zst`) under the root and those inside its
`.tar.gz` / `.tgz` archives (no GPU needed), splits them into device series
(`attribution.device_series`), and for each threshold (k x the series' median spacing, with and
without an absolute floor) prints the gaps found, the series they lie in by source, the longest,
and the largest share of a device's energy they bridge."""

from __future__ import annotations

import argparse
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from wattlife.attribution.series import DeviceSeries, device_series
from wattlife.contracts import read_trace


def _is_trace(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.startswith("trace") and base.split(".", 1)[-1] in ("csv", "csv.gz", "csv.zst")


def reference_series(root: Path) -> list[DeviceSeries]:
    """Every device series of every trace under `root`: plain, compressed, and inside the
    `.tar.gz` / `.tgz` archives of raw runs."""
    out: list[DeviceSeries] = []
    for f in sorted(p for p in root.rglob("trace*") if _is_trace(p.name)):
        out += device_series(read_trace(f))
    archives = sorted([*root.rglob("*.tar.gz"), *root.rglob("*.tgz")])
    with tempfile.TemporaryDirectory() as tmp:
        for i, f in enumerate(archives):
            with tarfile.open(f) as tf:
                for j, m in enumerate(tf.getmembers()):
                    fh = tf.extractfile(m) if m.isfile() and _is_trace(m.name) else None
                    if fh is not None:
                        dest = Path(tmp) / f"{i}-{j}-{Path(m.name).name}"
                        dest.write_bytes(fh.read())
                        out += device_series(read_trace(dest))
                        dest.unlink()
    return out


def flags(series: list[DeviceSeries], k: float, floor_s: float
          ) -> tuple[int, Counter[str], float, float]:
    """Gaps found above max(k x median spacing, floor): count, series by source, the longest
    (s), and the largest share of a device's energy they bridge."""
    by_source: Counter[str] = Counter()
    n, longest, worst = 0, 0.0, 0.0
    for s in series:
        dt = np.diff(s.t_ns)
        if len(dt) < 2:
            continue
        gap = dt > max(k * float(np.median(dt)), floor_s * 1e9)
        if gap.any():
            n += int(gap.sum())
            by_source[s.source] += 1
            longest = max(longest, float(dt[gap].max()) / 1e9)
            total = float(s.energy_j[-1] - s.energy_j[0])
            bridged = float(np.diff(s.energy_j)[gap].sum())
            worst = max(worst, bridged / total if total > 0 else 0.0)
    return n, by_source, longest, worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("results/reference"))
    a = ap.parse_args()
    series = reference_series(a.root)
    sources = Counter(s.source for s in series)
    print(f"{len(series)} device series ({dict(sources)}), "
          f"{sum(len(s.t_ns) for s in series)} readings")
    print("k x median  floor_s  gaps  series flagged (by source)  longest  largest bridged share")
    for k in (2.0, 2.5, 3.0, 4.0, 5.0):
        for floor in (0.0, 0.5):
            n, by, longest, worst = flags(series, k, floor)
            print(f"{k:10.1f}  {floor:7.1f}  {n:4d}  {sum(by.values()):3d} {dict(by)!s:24}"
                  f"  {longest:5.2f} s  {100 * worst:.2f} %")


if __name__ == "__main__":
    main()
