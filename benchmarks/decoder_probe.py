"""The GPU decoder alone (benchmarks/decode_rates.py runs it once a call, in a process of its
own): nvImageCodec's batch decode of 128-image batches of a JPEG tree's training split, with no
augment, with the loader's batched augment and with its per-image one, of the crops' regions and
of whole images, in images/s; and which of nvImageCodec's backends decode full images and regions.

    PYTHONPATH=src python3 benchmarks/decoder_probe.py ROOT     # prints one JSON line
"""

import argparse
import json
import time
from pathlib import Path
from typing import Any


def _rate(dec: Any, items: list[Any], stream: Any, size: int, augment: str, batches: int) -> float:
    """Images/s of `dec` over 128-image batches, with no augment (`""`) or the loader's
    `augment_batch` image by image (`"per-image"`) or batched (`"batched"`). (The committed
    probes up to gpu-decode-graphs/call-1 timed the per-image way without its flips.)"""
    import torch

    from wattlife.workloads import gpu_augment

    def one(b: list[Any]) -> None:
        with torch.cuda.stream(stream):
            imgs = dec([r[0] for r in b], [r[1] for r in b], stream)
            if augment:
                gpu_augment.BATCHED = augment == "batched"
                gpu_augment.augment_batch(imgs, [r[1] for r in b], [r[2] for r in b], size,
                                          dec.roi)

    one(items[:128])  # warm-up
    torch.cuda.synchronize()
    t = time.perf_counter()
    for k in range(batches):
        one(items[128 * k:128 * (k + 1)])
    stream.synchronize()
    return 128 * batches / (time.perf_counter() - t)


def decoder_probe(root: Path, batches: int = 12, size: int = 224) -> dict[str, Any]:
    """Decode (+ resize + normalise) rate of 128-image batches on the GPU, full vs region, and
    which nvImageCodec backends decode full images and regions."""
    import torch
    from nvidia import nvimgcodec as nv

    from wattlife.workloads.gpu_decode import NvDecode
    from wattlife.workloads.image import image_dataset
    from wattlife.workloads.raw_jpegs import RawJpegs

    dev = torch.device("cuda", 0)
    raw = RawJpegs(image_dataset(root, True, size).samples)
    items = [raw[i] for i in range(128 * batches)]
    res: dict[str, Any] = {"nvimgcodec": getattr(nv, "__version__", "?")}
    stream = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]
    for name, roi in (("region", True), ("full", False)):
        dec = NvDecode(dev, roi=roi)
        for mode, aug in (("decode", ""), ("decode+augment_batched", "batched"),
                          ("decode+augment_per_image", "per-image")):
            res[f"{name}_{mode}_images_per_s"] = _rate(dec, items, stream, size, aug, batches)
    few = items[:8]
    for kind in ("HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU"):
        try:
            d = nv.Decoder(device_id=0, backends=[nv.Backend(getattr(nv, kind))])
            srcs = [nv.CodeStream(r[0]) for r in few]
            regions = [nv.Region(t, left, t + h, left + w) for t, left, h, w in
                       (r[1] for r in few)]
            subs = [s.get_sub_code_stream(region=g) for s, g in zip(srcs, regions, strict=True)]
            res[f"{kind}_full_decoded"] = sum(x is not None for x in d.decode(srcs))
            res[f"{kind}_region_decoded"] = sum(x is not None for x in d.decode(subs))
        except Exception as exc:  # noqa: BLE001 (a probe: record what the library said)
            res[f"{kind}_error"] = str(exc)[:200]
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a JPEG tree (train/<class>/*.JPEG), e.g. jpeg_tree.make_tree's")
    ap.add_argument("--batches", type=int, default=12,
                    help="128-image batches timed per mode (default 12)")
    a = ap.parse_args()
    print(json.dumps(decoder_probe(Path(a.root), a.batches)))
