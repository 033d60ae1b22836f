"""The GPU side's augmentation of `decode: gpu` (workloads/gpu_augment.py), batched against image
by image, on 128 crops drawn as RandomResizedCrop draws them from 500 x 375 images:

    PYTHONPATH=src python3 benchmarks/augment_batch.py [--device cpu|cuda] [--batches 5]

Per way: the operator calls a batch (torch.profiler's count of top-level aten calls: each one a
trip through the interpreter and the dispatcher; those that are not views launch one kernel or
more on a GPU), and
the wall time a batch (median of `--batches`; on cuda synchronised after each batch). Prints one
line a way. Changes no GPU setting.
"""

import argparse
import statistics
import time
from typing import Any


def crops(n: int, device: str, seed: int = 0) -> Any:
    """`n` region-decoded crops (uint8 HxWx3) of 500 x 375 images, their boxes and flips."""
    import torch
    from PIL import Image

    from wattlife.workloads.raw_jpegs import draw_crop

    torch.manual_seed(seed)
    img = Image.new("RGB", (500, 375))
    boxes, flips = zip(*(draw_crop(img) for _ in range(n)), strict=True)
    imgs = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, device=device)
            for _, _, h, w in boxes]
    return imgs, list(boxes), list(flips)


VIEWS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::permute", "aten::unbind",
         "aten::select", "aten::slice", "aten::unsqueeze", "aten::expand", "aten::transpose",
         "aten::t", "aten::alias", "aten::as_strided", "aten::detach", "aten::lift_fresh",
         "aten::_unsafe_view", "aten::squeeze"}


def calls(fn: Any) -> tuple[int, int]:
    """Top-level aten operator calls of `fn()` (nested calls inside an operator not counted):
    all, and those that are not views (each of those launches a kernel or more on a GPU)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    inner = {id(c) for e in events for c in e.cpu_children}
    top = [e.name for e in events if id(e) not in inner]
    return len(top), sum(1 for n in top if n not in VIEWS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="torch device (default cpu)")
    ap.add_argument("--batch", type=int, default=128, help="crops a batch (default 128)")
    ap.add_argument("--size", type=int, default=224, help="output pixels a side (default 224)")
    ap.add_argument("--batches", type=int, default=5, help="timed batches a way (default 5)")
    a = ap.parse_args()
    import torch

    from wattlife.workloads import gpu_augment

    imgs, boxes, flips = crops(a.batch, a.device)
    for name, batched in (("batched", True), ("image by image", False)):
        gpu_augment.BATCHED = batched

        def one() -> None:
            gpu_augment.augment_batch(imgs, boxes, flips, a.size, cropped=True)
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()

        one()  # warm-up
        n_calls, n_work = calls(one)
        times = []
        for _ in range(a.batches):
            t = time.perf_counter()
            one()
            times.append((time.perf_counter() - t) * 1e3)
        print(f"{name:15s} {n_calls:5d} aten calls a batch of {a.batch} ({n_work} not views); "
              f"{statistics.median(times):8.1f} ms a batch on {a.device} "
              f"(range {min(times):.1f}-{max(times):.1f})")


if __name__ == "__main__":
    main()
