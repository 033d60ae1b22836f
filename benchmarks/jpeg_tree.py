"""JPEGs as ImageNet's for the decode benchmarks (issue 30: decode_rates.py,
decode_profile.py, raw_batch_transfer.py): 500 x 375 px, ~74 KB at quality 90, a class folder
each, training and validation splits, written in parallel and kept where they exist.
"""

import os
import time
from pathlib import Path
from typing import Any

import numpy as np


def _write_jpegs(job: tuple[Path, int, int, int, int]) -> int:
    """One class's JPEGs: 500 x 375, a class-dependent pattern plus noise (~74 KB at q90)."""
    from PIL import Image

    folder, c, n, w, h = job
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(c)
    yy, xx = np.mgrid[0:h, 0:w] / h
    noise = [rng.normal(0, 0.05, (h, w, 3)).astype(np.float32) for _ in range(4)]
    hue = np.array([(c * 37) % 255, (c * 91) % 255, (c * 53) % 255]) / 255.0
    for i in range(n):
        f = folder / f"{c:03d}_{i:05d}.JPEG"
        if f.exists():
            continue
        ph = rng.uniform(0, 2 * np.pi)
        base = np.stack([np.sin(2 * np.pi * (1 + c % 5) * xx + ph + k + yy * (c % 3))
                         for k in range(3)], -1)
        img = 0.5 + 0.25 * base + 0.25 * hue + np.roll(noise[i % 4], rng.integers(w), axis=1)
        Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(f, quality=90)
    return n


def make_tree(root: Path, classes: int, per_class: int, w: int, h: int) -> dict[str, Any]:
    from multiprocessing import Pool

    t = time.time()
    jobs = [(root / split / f"n{c:08d}", c, n, w, h) for split, n in
            (("train", per_class), ("val", max(2, per_class // 50))) for c in range(classes)]
    with Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        pool.map(_write_jpegs, jobs)
    files = list((root / "train").rglob("*.JPEG"))
    return {"images": len(files), "mean_kb": float(np.mean([f.stat().st_size for f in files]))
            / 1e3, "generation_s": time.time() - t}
