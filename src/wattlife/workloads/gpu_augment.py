"""The GPU side's augmentation for `decode: gpu` (workloads/gpu_decode.py): each decoded crop
resized (bilinear, antialiased), flipped and normalised as the CPU path's transform does it.

Two ways to the same arithmetic:
- image by image (`augment`; `augment_batch`, the default): torch's antialiased resize
  (`F.interpolate`) per crop, ~4 operator calls an image, 2 of them kernels; with 128 images each
  call takes the interpreter from the training thread and each kernel queues behind the training
  step's on a busy GPU (results/reference/h200/gpu-decode-batched/README.md);
- the whole batch at once (`augment_batch` with `BATCHED = True`): every crop's pixels gathered into
  one padded tensor by one index computed for the batch, the resize as two batched matrix products
  with the antialiased bilinear weights (`aa_weights`: torch's and PIL's triangle filter, widened by
  the downscale factor, each output pixel's weights summing to 1), the flip as the horizontal
  weights reversed, then the normalisation: 72 aten calls that are not views a batch whatever its
  size, one view call an image besides (235 in all for 128 images, against 524 of which 267 not
  views image by image; counted on the CPU by `benchmarks/augment_batch.py` with torch.profiler; a
  few non-view calls launch no kernel, and on a GPU the pinned copies add some). The products run in
  float16 on a GPU (tensor cores; 128 crops of up to 375 x 500 padded are ~47 GFLOP a batch) and in
  float32 elsewhere (where they are slower than the per-image resize: 1.0-1.5 s against 0.14-0.17 s
  a batch on 2 cores; the CPU never runs this path outside the tests). It equals the per-image path
  to float rounding on the CPU, within half a level on a GPU
  (tests/workloads/test_gpu_augment.py). On the H200 neither its speed nor its effect on the step
  is measured yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .raw_jpegs import Box

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# augment_batch: the batched resize (True) or image by image (False, the way measured on the H200;
# the default until the batched one is measured there: benchmarks/decode_rates.py's cells)
BATCHED = False
# a batch whose crops padded to the largest take more pixels is resized image by image (64 M:
# 128 crops of up to 375 x 500 take 24 M; one 2000 x 3000 crop would take 768 M)
MAX_PADDED_PIXELS = 64 * 2**20


def resize_crop(img: Any, box: Box, size: int, cropped: bool) -> Any:
    """One decoded image (uint8 HxWx3 tensor, any device) to a float 1 x 3 x `size` x `size`
    tensor in [0, 255]: the crop `box` (already applied by a region decode when `cropped`),
    resized bilinear with antialiasing (torchvision's tensor resize, which follows PIL's)."""
    import torch.nn.functional as F

    top, left, h, w = box
    x = img.permute(2, 0, 1)
    if not cropped:
        x = x[:, top:top + h, left:left + w]
    return F.interpolate(x[None].float(), size=(size, size), mode="bilinear", antialias=True,
                         align_corners=False)


_SCALED: dict[Any, tuple[Any, Any]] = {}  # device -> (mean, std) x 255, made once a device


def normalise(x: Any) -> Any:
    """[0, 255] images (..., 3, H, W) to the network's input: ToTensor's scaling, then Normalize
    with the ImageNet mean and standard deviation (the CPU path's)."""
    import torch

    if x.device not in _SCALED:  # one blocking copy each, once: any stream may use them after
        mean, std = (torch.tensor([v * 255 for v in vs], device=x.device).view(3, 1, 1)
                     for vs in (MEAN, STD))
        _SCALED[x.device] = (mean, std)
    mean, std = _SCALED[x.device]
    return (x - mean) / std


def small_tensor(values: Any, device: Any, dtype: Any = None) -> Any:
    """Host values as a tensor on `device` without waiting for its current stream: a copy from
    pageable memory synchronises the stream first (CUDA), one from pinned memory does not."""
    import torch

    t = torch.tensor(values, dtype=dtype)
    if getattr(device, "type", None) != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def augment(img: Any, box: Box, flip: bool, size: int, cropped: bool = False) -> Any:
    """`resize_crop`, the flip, `normalise`: one image as the CPU path's transform gives it."""
    x = resize_crop(img, box, size, cropped)[0]
    return normalise(x.flip(-1) if flip else x)


def aa_weights(in_sizes: Any, out_size: int, max_in: int) -> Any:
    """Antialiased bilinear weights (align_corners False) from inputs of `in_sizes` (N,) pixels
    to `out_size`: an N x `out_size` x `max_in` float tensor, zero beyond each input's size.
    Output pixel i of an input of n pixels (scale s = n / out_size) centres at s (i + 0.5); input
    pixel j weighs max(0, 1 - |j + 0.5 - centre| / max(s, 1)), normalised to sum 1 (the support
    torch's antialiased kernel and PIL's bilinear filter take)."""
    import torch

    dev = in_sizes.device
    n = in_sizes.to(torch.float64)[:, None, None]
    scale = n / out_size
    centre = scale * (torch.arange(out_size, device=dev, dtype=torch.float64)[None, :, None]
                      + 0.5)
    j = torch.arange(max_in, device=dev, dtype=torch.float64)[None, None, :]
    w = (1 - ((j + 0.5 - centre) / scale.clamp(min=1.0)).abs()).clamp(min=0) * (j < n)
    return (w / w.sum(-1, keepdim=True)).to(torch.float32)


def augment_batch(imgs: Sequence[Any], boxes: Sequence[Box], flips: Sequence[bool], size: int,
                  cropped: bool = False) -> Any:
    """`augment` of every image of a batch (uint8 HxWx3 tensors on one device), stacked
    (N x 3 x `size` x `size`, channels_last); batched unless `BATCHED` is False (module doc)."""
    import torch

    # per image: decoded height, width, and the crop inside it (a region decode is the crop)
    rows = [(im.shape[0], im.shape[1], *((0, 0, im.shape[0], im.shape[1]) if cropped else b))
            for im, b in zip(imgs, boxes, strict=True)]
    hm, wm = max(r[4] for r in rows), max(r[5] for r in rows)
    if not BATCHED or len(imgs) * hm * wm > MAX_PADDED_PIXELS:
        x = torch.cat([resize_crop(im, box, size, cropped)
                       for im, box in zip(imgs, boxes, strict=True)])
        sel = [i for i, f in enumerate(flips) if f]
        if sel:
            idx = small_tensor(sel, x.device)
            x[idx] = x[idx].flip(-1)
        return normalise(x).contiguous(memory_format=torch.channels_last)
    dev = imgs[0].device
    geo = small_tensor(rows, dev, torch.int32)
    H, W, top, left, h, w = geo.unbind(1)
    pixels = torch.cat([im.reshape(-1, 3) for im in imgs])  # every image's pixels, in order
    i32 = torch.int32
    base = torch.cumsum(H * W, 0, dtype=i32) - H * W
    # rows and columns past a crop's edge repeat its last one (their weights are zero)
    yy = torch.minimum(torch.arange(hm, device=dev, dtype=i32)[None, :], (h - 1)[:, None]) \
        + top[:, None]
    xx = torch.minimum(torch.arange(wm, device=dev, dtype=i32)[None, :], (w - 1)[:, None]) \
        + left[:, None]
    idx = base[:, None, None] + yy[:, :, None] * W[:, None, None] + xx[:, None, :]  # int32
    # float16 on a GPU (tensor cores): pixel values are exact in it, the weights within 0.05 %,
    # the products within 1/16 of a level; float32 elsewhere
    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    crops = pixels.index_select(0, idx.reshape(-1))
    crops = crops.view(len(imgs), hm, wm, 3).permute(0, 3, 1, 2).to(dtype)
    wy = aa_weights(h, size, hm).to(dtype)
    wx = aa_weights(w, size, wm)
    wx = torch.where(small_tensor(flips, dev)[:, None, None], wx.flip(1), wx).to(dtype)
    x = wy[:, None] @ (crops @ wx.transpose(1, 2)[:, None])  # width first: fewer products
    return normalise(x.float()).contiguous(memory_format=torch.channels_last)
