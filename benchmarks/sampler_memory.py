"""Issue 43: the sampler's memory and cost per reading stay flat over a long run. CPU only.

Runs `sampler.Sampler` on the simulated GPU backend (`--gpus` GPUs at `--interval-ms`) for
`--minutes`, writing `trace.csv` or `trace.csv.zst`; every `--every` seconds it records the
process's resident memory (VmRSS), the rows written and the process CPU time (the main thread
sleeps: that is the sampler's thread). Prints the samples, the least-squares slope of RSS per
1,000 rows written, and the CPU cost per row in the first and the last quarter of the run; the
raw samples (with the CPU cost per row since the previous sample) go to `samples.csv` in `--out`
as they are taken.

    PYTHONPATH=src python3 benchmarks/sampler_memory.py --minutes 5 --form zst --out /tmp/sm
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from outdir import out_dir  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    from wattlife.devices.simgpu import SimGpuBackend
    from wattlife.sampler import Sampler

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--form", choices=["csv", "zst"], default="zst")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    path = out_dir(a.out) / ("trace.csv" if a.form == "csv" else "trace.csv.zst")
    s = Sampler([SimGpuBackend(n_gpus=a.gpus, interval_s=a.interval_ms / 1000)], path)
    s.start()
    t0, c0 = time.monotonic(), time.process_time()
    rows: list[tuple[float, int, float, float]] = []
    samples = (path.parent / "samples.csv").open("w")
    samples.write("t_s,rows,rss_mb,cpu_s,cpu_us_per_row\n")
    print("| s | rows | RSS MB | CPU s |\n|---|---|---|---|")
    while time.monotonic() - t0 < a.minutes * 60:
        time.sleep(a.every)
        assert s._out is not None  # noqa: SLF001 (a benchmark looks inside)
        rows.append((time.monotonic() - t0, s._out.rows_written, rss_mb(),  # noqa: SLF001
                     time.process_time() - c0))
        print(f"| {rows[-1][0]:.0f} | {rows[-1][1]:,} | {rows[-1][2]:.1f} | {rows[-1][3]:.2f} |",
              flush=True)
        prev = rows[-2] if len(rows) > 1 else (0.0, 0, 0.0, 0.0)
        per_row = (rows[-1][3] - prev[3]) / max(rows[-1][1] - prev[1], 1) * 1e6
        samples.write(f"{rows[-1][0]:.2f},{rows[-1][1]},{rows[-1][2]:.2f},{rows[-1][3]:.3f},"
                      f"{per_row:.2f}\n")
        samples.flush()
    s.stop()
    samples.close()
    r = np.array(rows)
    slope = np.polyfit(r[:, 1], r[:, 2], 1)[0] * 1000 * 1024  # KiB per 1,000 rows
    q = max(len(r) // 4, 2)
    first = (r[q - 1, 3] - r[0, 3]) / max(r[q - 1, 1] - r[0, 1], 1) * 1e6
    last = (r[-1, 3] - r[-q, 3]) / max(r[-1, 1] - r[-q, 1], 1) * 1e6
    print(f"form {a.form}: {int(r[-1, 1]):,} rows in {r[-1, 0]:.0f} s "
          f"({r[-1, 1] / r[-1, 0]:,.0f} rows/s); RSS {r[0, 2]:.1f} -> {r[-1, 2]:.1f} MB, slope "
          f"{slope:+.3f} KiB per 1,000 rows; CPU {first:.1f} us/row (first quarter), "
          f"{last:.1f} us/row (last quarter); file {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
