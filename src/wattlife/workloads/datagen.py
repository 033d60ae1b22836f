"""Offline stand-ins for the study's datasets: no hub can be reached from the demo or the tests.

`make_image_tree` writes an ImageNet-layout tree (`train/<class>/*.JPEG`, `val/<class>/*.JPEG`) of
real JPEG files whose content depends on the class (so a model can learn something);
`make_text_corpus` writes a WikiText-like corpus (`train.txt`, `validation.txt`) of sentences drawn
from a Zipf-distributed vocabulary with headings, as WikiText has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm


def _write_image(job: tuple[Any, ...]) -> None:
    from PIL import Image

    path, c, size, seed = job
    if path.exists():
        return
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    freq = 1 + c % 5
    ph = rng.uniform(0, 2 * np.pi)
    base = np.stack([np.sin(2 * np.pi * freq * xx + ph + k + yy * (c % 3)) for k in range(3)], -1)
    hue = np.array([(c * 37) % 255, (c * 91) % 255, (c * 53) % 255]) / 255.0
    img = 0.5 + 0.25 * base + 0.25 * hue + rng.normal(0, 0.08, (size, size, 3))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.JPEG")
    Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(tmp, quality=90)
    tmp.replace(path)


def make_image_tree(root: str | Path, n_classes: int = 10, train_per_class: int = 32,
                    val_per_class: int = 8, size: int = 96, seed: int = 0,
                    workers: int = 1) -> int:
    """Write the tree (in `workers` processes); returns the number of files. Files already there
    are kept, so a rerun is cheap and a killed run resumes."""
    root = Path(root)
    jobs = [(root / split / f"n{c:08d}" / f"{split}_{c:04d}_{i:05d}.JPEG", c, size,
             (seed, c, i, split == "val"))
            for split, per in (("train", train_per_class), ("val", val_per_class))
            for c in range(n_classes) for i in range(per)]
    if workers > 1:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            for _ in tqdm(pool.imap_unordered(_write_image, jobs, chunksize=64), total=len(jobs),
                          desc=f"images -> {root}", unit="img", leave=False):
                pass
    else:
        for job in tqdm(jobs, desc=f"images -> {root}", unit="img", leave=False):
            _write_image(job)
    return len(jobs)


def make_text_corpus(root: str | Path, n_words: int = 200_000, vocab: int = 5000,
                     seed: int = 0) -> int:
    """Write train.txt (90%) and validation.txt (10%); returns the number of words."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    syll = ["ka", "to", "ri", "ne", "su", "mo", "la", "vi", "de", "on", "ar", "el", "us", "in"]
    words = np.array(["".join(rng.choice(syll, size=rng.integers(1, 4))) for _ in range(vocab)])
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / ranks**1.1
    p /= p.sum()
    tokens = words[rng.choice(vocab, size=n_words, p=p)]
    lines, pos = [], 0
    while pos < n_words:
        if rng.random() < 0.05:
            lines.append(f" = {tokens[pos].capitalize()} = ")
        n = int(rng.integers(8, 30))
        sent = " ".join(tokens[pos:pos + n])
        lines.append(f" {sent.capitalize()} . ")
        pos += n
    cut = int(len(lines) * 0.9)
    (root / "train.txt").write_text("\n".join(lines[:cut]) + "\n")
    (root / "validation.txt").write_text("\n".join(lines[cut:]) + "\n")
    return n_words
