"""The batched augmentation of `decode: gpu` (workloads/gpu_augment.py) against torch's
antialiased resize image by image: the weights, and whole batches of crops smaller and larger
than the output, flipped or not, as whole images with boxes and as region decodes."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from wattlife.workloads import gpu_augment
from wattlife.workloads.gpu_augment import aa_weights, augment_batch


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 700), out=st.sampled_from([1, 7, 24, 224]), seed=st.integers(0, 99))
def test_aa_weights_resize_a_row_as_torchs_antialiased_bilinear(n, out, seed):
    row = torch.rand(1, 1, 1, n, generator=torch.Generator().manual_seed(seed)) * 255
    want = F.interpolate(row, size=(1, out), mode="bilinear", antialias=True,
                         align_corners=False)[0, 0, 0]
    w = aa_weights(torch.tensor([n]), out, n + 5)[0]  # 5 columns of padding, weighted 0
    assert w.shape == (out, n + 5) and (w[:, n:] == 0).all()
    torch.testing.assert_close(w.sum(1), torch.ones(out), rtol=0, atol=1e-6)
    # torch's own weights: its resize of each unit row (it computes them in float32)
    basis = F.interpolate(torch.eye(n).view(n, 1, 1, n), size=(1, out), mode="bilinear",
                          antialias=True, align_corners=False)[:, 0, 0, :].T
    torch.testing.assert_close(w[:, :n], basis, rtol=0, atol=2e-5)
    torch.testing.assert_close(w[:, :n] @ row[0, 0, 0], want, rtol=0, atol=5e-3)  # of 255


def _batch(seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    imgs, boxes = [], []
    for _ in range(n):
        hh, ww = (int(v) for v in torch.randint(8, 90, (2,), generator=g))
        imgs.append(torch.randint(0, 256, (hh, ww, 3), dtype=torch.uint8, generator=g))
        h, w = (int(torch.randint(1, d + 1, (1,), generator=g)) for d in (hh, ww))
        top, left = int(torch.randint(0, hh - h + 1, (1,), generator=g)), \
            int(torch.randint(0, ww - w + 1, (1,), generator=g))
        boxes.append((top, left, h, w))
    flips = [bool(b) for b in torch.randint(0, 2, (n,), generator=g)]
    return imgs, boxes, flips


@pytest.mark.parametrize("seed", range(4))
def test_the_batched_augment_equals_the_per_image_one(seed, monkeypatch):
    monkeypatch.setattr(gpu_augment, "BATCHED", True)
    imgs, boxes, flips = _batch(seed, 9)
    regions = [im[t:t + h, left:left + w] for im, (t, left, h, w) in zip(imgs, boxes, strict=True)]
    got = augment_batch(imgs, boxes, flips, 32)
    got_regions = augment_batch(regions, boxes, flips, 32, cropped=True)
    monkeypatch.setattr(gpu_augment, "BATCHED", False)
    want = augment_batch(imgs, boxes, flips, 32)
    assert got.shape == (9, 3, 32, 32) and got.is_contiguous(memory_format=torch.channels_last)
    assert any(b[2] < 32 for b in boxes) and any(b[3] > 32 for b in boxes)  # up- and downscaled
    torch.testing.assert_close(got, want, rtol=0, atol=2e-4)
    torch.testing.assert_close(got_regions, want, rtol=0, atol=2e-4)


def test_a_batch_too_large_to_pad_is_resized_image_by_image(monkeypatch):
    monkeypatch.setattr(gpu_augment, "BATCHED", True)
    imgs, boxes, flips = _batch(5, 6)
    want = augment_batch(imgs, boxes, flips, 24)
    calls = []
    per_image = gpu_augment.resize_crop
    monkeypatch.setattr(gpu_augment, "resize_crop", lambda *a: calls.append(1) or per_image(*a))
    assert augment_batch(imgs, boxes, flips, 24) is not None and calls == []  # batched
    monkeypatch.setattr(gpu_augment, "MAX_PADDED_PIXELS", 6 * 8 * 8)
    got = augment_batch(imgs, boxes, flips, 24)
    assert len(calls) == 6  # one resize an image
    torch.testing.assert_close(got, want, rtol=0, atol=2e-4)


@pytest.mark.gpu
def test_the_batched_augment_in_float16_on_a_gpu_is_within_half_a_level(monkeypatch):
    """On a CUDA GPU the batched resize multiplies in float16: against the per-image float32
    path, within half a 0-255 level anywhere (0.5 / 255 / 0.224 in normalised units; worst case
    from float16's spacing and the weights' rounding ~0.3) and 0.05 of a level on average."""
    monkeypatch.setattr(gpu_augment, "BATCHED", True)
    imgs, boxes, flips = _batch(7, 32)
    # and the real case, downscaled: 500 x 375 images, crops up to the whole image
    g = torch.Generator().manual_seed(8)
    for k in range(16):
        imgs.append(torch.randint(0, 256, (375, 500, 3), dtype=torch.uint8, generator=g))
        h, w = 375 - 20 * k, 500 - 25 * k
        boxes.append((375 - h, 0, h, w))
        flips.append(k % 2 == 0)
    imgs = [im.cuda() for im in imgs]
    got = augment_batch(imgs, boxes, flips, 224)
    monkeypatch.setattr(gpu_augment, "BATCHED", False)
    want = augment_batch(imgs, boxes, flips, 224)
    assert got.dtype == torch.float32 and got.is_cuda
    level = 1 / 255 / 0.224
    diff = (got - want).abs()
    assert float(diff.max()) < 0.5 * level and float(diff.mean()) < 0.05 * level
