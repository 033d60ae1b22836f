"""How long the decode thread of `decode: gpu` waits to receive one ready raw batch from a reader
worker, handed over as a list of `bytes` (pickled through a pipe; `raw_jpegs.collate_raw`) or
packed in one uint8 tensor (shared memory; `raw_jpegs.pack_raw`, the default). CPU only:

    PYTHONPATH=src:benchmarks python3 benchmarks/raw_batch_transfer.py [--batches 8]

Writes `--images` JPEGs as the GPU-decode benchmark's (500 x 375, ~75 KB) under `--work`, starts a
DataLoader over `RawJpegs` with `--readers` workers for each hand-over, lets the workers fill the
queue (`--fill-s`), then times `--batches` calls of next() (the queue stays full, so each call is
the hand-over alone), `unpack_raw`, and the first read of every byte of the batch (the decoder's, in
the decode thread: for a packed batch the first touch of its shared memory). Prints one line a hand-
over: the median and range in ms, and the batch's MB. Then the CPU helpers' side: ms an image (one
process, one thread, `--images` up to 400) for the CPU path's training transform ending in float
(ToTensor + Normalize, `decode: cpu`) or in uint8 (PILToTensor, `decode: gpu`'s helpers, which leave
the scaling and normalising to the GPU), and the MB of a batch of each; and the hand-over of such
batches from `--readers` workers as the first, and the pin-memory thread's copy of each (clone()
where CUDA is not there).
"""

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from jpeg_tree import make_tree


def receive_ms(raw: Any, collate: Any, batch: int, readers: int, batches: int,
               fill_s: float, pin: bool = False) -> list[tuple[float, Any]]:
    """(ms, batch) per next() of a full DataLoader queue of batches of `raw` collated by
    `collate` (`pin`: through the DataLoader's pin-memory thread, as the helpers' batches)."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    sampler = BatchSampler(RandomSampler(raw), batch, drop_last=True)
    loader = DataLoader(raw, batch_sampler=sampler, num_workers=readers, collate_fn=collate,
                        prefetch_factor=max(2, -(-batches // readers) + 1), pin_memory=pin)
    it = iter(loader)
    try:
        next(it)
        time.sleep(fill_s)
        out = []
        for _ in range(batches):
            t = time.perf_counter()
            b = next(it)
            out.append(((time.perf_counter() - t) * 1e3, b))
        return out
    finally:
        it._shutdown_workers()  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/wl-raw-transfer",
                    help="folder for the JPEGs (default /tmp/wl-raw-transfer)")
    ap.add_argument("--images", type=int, default=2048,
                    help="JPEGs to write, in 2 classes (default 2048)")
    ap.add_argument("--batch", type=int, default=128, help="images a batch (default 128)")
    ap.add_argument("--readers", type=int, default=2, help="reader workers (default 2)")
    ap.add_argument("--batches", type=int, default=8,
                    help="batches timed per hand-over (default 8)")
    ap.add_argument("--fill-s", type=float, default=8.0,
                    help="seconds the workers get to fill the queue (default 8)")
    a = ap.parse_args()
    if a.images < a.batch * (a.batches + 1):  # one batch to start the workers, then the timed
        ap.error(f"--images {a.images} is fewer than --batch x (--batches + 1) = "
                 f"{a.batch * (a.batches + 1)}: one epoch must hold every batch timed")
    from wattlife.workloads.image import image_dataset, uint8_crops
    from wattlife.workloads.raw_jpegs import RawJpegs, collate_raw, pack_raw, unpack_raw

    root = Path(a.work) / "jpeg500"
    make_tree(root, 2, a.images // 2, 500, 375)
    train = image_dataset(root, True, 224)  # the split listed once, for every measurement below
    raw = RawJpegs(train.samples)
    for name, collate in (("bytes through a pipe (collate_raw)", collate_raw),
                          ("one shared-memory tensor (pack_raw)", pack_raw)):
        got = receive_ms(raw, collate, a.batch, a.readers, a.batches, a.fill_s)
        ms = [m for m, _ in got]
        unpack, touch = [], []
        for _, b in got:
            t = time.perf_counter()
            items = unpack_raw(b)
            unpack.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()  # the first read of every byte, as the decoder's
            sum(int(np.frombuffer(r[0], dtype=np.uint8).sum()) for r in items if r[0] is not None)
            touch.append((time.perf_counter() - t) * 1e3)
        mb = sum(len(r[0]) for r in items if r[0] is not None) / 1e6
        print(f"{name:38s} next(): median {statistics.median(ms):6.2f} ms, range "
              f"{min(ms):.2f}-{max(ms):.2f} ms; unpack median {statistics.median(unpack):.2f} "
              f"ms; first read of the bytes median {statistics.median(touch):.2f} ms; "
              f"{mb:.1f} MB a batch")
    helpers = {"float": train, "uint8": uint8_crops(train, 224)}
    helper_transforms(helpers, a.batch, min(a.images, 400))
    helper_hand_over(helpers, a)


def helper_transforms(helpers: dict[str, Any], batch: int, n: int) -> None:
    """ms an image of the helpers' transform (`helpers`: the float and the uint8 training
    split), and a batch's MB."""
    import torch

    torch.set_num_threads(1)  # as in a DataLoader worker
    for name, kind in (("helpers' crops as float (decode: cpu)", "float"),
                       ("helpers' crops as uint8 (decode: gpu)", "uint8")):
        ds = helpers[kind]
        t = time.perf_counter()
        x = [ds[i][0] for i in range(n)]
        per = (time.perf_counter() - t) / n * 1e3
        print(f"{name:38s} {per:6.2f} ms an image (decode, crop, resize, flip, to tensor); "
              f"{x[0].element_size() * x[0].numel() * batch / 1e6:.1f} MB a batch of {batch}")


def helper_hand_over(helpers: dict[str, Any], a: argparse.Namespace) -> None:
    """The helpers' hand-over, float against uint8: ms a next() of a full queue of transformed
    batches, then ms to copy each received batch as the loaders' pin-memory thread does (its first
    touch of the shared memory; `pin_memory()` where CUDA is available, else `clone()`)."""
    import torch

    from wattlife.workloads.image import collate

    pin = torch.cuda.is_available()
    for kind in ("float", "uint8"):
        name = f"helpers' {kind} batches"
        got = receive_ms(helpers[kind], collate, a.batch, a.readers, a.batches, a.fill_s)
        copy = []
        for _, (x, _, _) in got:
            t = time.perf_counter()
            x.pin_memory() if pin else x.clone()
            copy.append((time.perf_counter() - t) * 1e3)
        ms = [m for m, _ in got]
        print(f"{name:38s} next(): median {statistics.median(ms):6.2f} ms, range "
              f"{min(ms):.2f}-{max(ms):.2f} ms; {'pin_memory()' if pin else 'clone()'} median "
              f"{statistics.median(copy):.2f} ms, range {min(copy):.2f}-{max(copy):.2f} ms")


if __name__ == "__main__":
    main()
