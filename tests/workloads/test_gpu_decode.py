"""`decode: gpu` of the image workload (workloads/gpu_decode.py), checked on the CPU: the GPU
path's transform against the CPU path's for the same random draws, the pipeline's epochs and
shutdown, the fallback where no GPU decoder is usable, and the config key."""

import sys
import time

import numpy as np
import pytest

from conftest import gone, train_tiny_image_cell
from wattlife.config import ConfigError, validate_config, workload_spec
from wattlife.workloads.gpu_augment import augment, augment_batch
from wattlife.workloads.gpu_decode import (
    GpuDecodeLoader,
    choose_decode,
    split_workers,
    unavailable_reason,
)
from wattlife.workloads.image import collate, image_dataset, uint8_crops
from wattlife.workloads.raw_jpegs import RawJpegs

# The GPU path's resize (torch, bilinear, antialiased) against the CPU path's (PIL, bilinear,
# antialiased), on normalised inputs (one 8-bit level = 1/255/0.224 ~ 0.0175): PIL rounds its
# result to 8 bits, torch does not. On noise images the worst seen was 1 level (mean 0.3 level);
# the test allows 2 levels anywhere and 0.6 level on average.
MEAN_TOL, MAX_TOL = 0.01, 0.036


@pytest.fixture
def tree(tmp_path):
    """Non-square JPEGs (as ImageNet's 500 x 375): 2 classes x 4 training images."""
    from PIL import Image

    root = tmp_path / "imgs"
    rng = np.random.default_rng(0)
    for split, per in (("train", 4), ("val", 1)):
        for c in range(2):
            d = root / split / f"n{c:08d}"
            d.mkdir(parents=True)
            for i in range(per):
                yy, xx = np.mgrid[0:60, 0:80]
                img = 128 + 60 * np.sin(xx / (5 + c + i) + yy / 7)[..., None] \
                    + rng.normal(0, 20, (60, 80, 3))
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
                    d / f"{i}.JPEG", quality=90)
    return root


def _pil_decode(datas, boxes, stream):
    """A real decoder (PIL) in the GPU path's place: uint8 HxWx3 tensors, None if undecodable."""
    import io

    import torch
    from PIL import Image

    out = []
    for data in datas:
        try:
            with Image.open(io.BytesIO(data)) as img:
                out.append(torch.from_numpy(np.asarray(img.convert("RGB")).copy()))
        except OSError:
            out.append(None)
    return out


def test_gpu_path_gives_the_cpu_paths_crop_flip_and_normalisation(tree):
    import torch

    ds = image_dataset(tree, True, 32)
    raw = RawJpegs(ds.samples)
    flips = set()
    for seed in range(12):
        i = seed % len(ds)
        torch.manual_seed(seed)
        want, label = ds[i]
        torch.manual_seed(seed)
        data, box, flip, raw_label = raw[i]
        flips.add(flip)
        img = _pil_decode([data], [box], None)[0]
        got = augment(img, box, flip, 32)
        assert raw_label == label and got.shape == want.shape == (3, 32, 32)
        diff = (got - want).abs()
        assert float(diff.mean()) < MEAN_TOL and float(diff.max()) < MAX_TOL, (seed, box, flip)
        # a region decode (only the crop's pixels) gives the same image
        top, left, h, w = box
        region = img[top:top + h, left:left + w]
        assert torch.equal(augment(region, box, flip, 32, cropped=True), got)
    assert flips == {True, False}  # both sides of the flip were compared


def test_the_batched_augment_is_the_per_image_one_stacked(tree):
    """`augment_batch` (the loader's) against `augment` image by image: whole images with their
    crop boxes, and region-decoded ones, of different sizes, both flips."""
    import torch

    raw = RawJpegs(image_dataset(tree, True, 24).samples)
    torch.manual_seed(3)
    items = [raw[i % len(raw)] for i in range(10)]
    imgs = _pil_decode([r[0] for r in items], None, None)
    boxes, flips = [r[1] for r in items], [i % 3 == 0 for i in range(10)]
    want = torch.stack([augment(im, b, f, 24) for im, b, f in zip(imgs, boxes, flips, strict=True)])
    got = augment_batch(imgs, boxes, flips, 24)
    assert got.shape == (10, 3, 24, 24) and got.is_contiguous(memory_format=torch.channels_last)
    assert len({b[2:] for b in boxes}) > 1  # crops of different sizes in one batch
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    regions = [im[t:t + h, left:left + w] for im, (t, left, h, w) in zip(imgs, boxes, strict=True)]
    torch.testing.assert_close(augment_batch(regions, boxes, flips, 24, cropped=True), want,
                               rtol=0, atol=1e-4)


def test_the_pipeline_trains_each_image_once_per_epoch_and_ends_its_workers(tree):
    import torch

    bad = sorted((tree / "train").rglob("*.JPEG"))[0]
    bad.write_bytes(b"not a jpeg")
    ds = image_dataset(tree, True, 16)
    loader = GpuDecodeLoader(ds, 2, 16, torch.device("cpu"), collate=collate, readers=1,
                             helpers=1, ahead=2, decode=_pil_decode)
    labels, skipped, batches = [], 0, []
    try:
        for _ in range(3):  # three epochs of 4 batches
            batches.append(0)
            for x, y, s in loader:
                batches[-1] += 1
                skipped += s
                if x is not None:
                    assert x.shape[1:] == (3, 16, 16)
                    labels += y.tolist()
        pids = [w.pid for it in loader._iters for w in it._workers]
    finally:
        loader.close()
    # the epochs overlap by the batches in flight, so counted over whole epochs drawn: each
    # image once per epoch (the corrupt one skipped each time)
    drawn = loader.claims.epochs
    assert batches == [4, 4, 4] and sum(loader.decoded.values()) >= 12
    assert len(labels) + skipped == 24 and skipped <= drawn
    assert labels.count(0) <= 3 * drawn and labels.count(1) <= 4 * drawn
    assert len(pids) == 2 and all(gone(p) for p in pids)
    assert not any(t.is_alive() for t in loader._threads)
    # each side's stages (the GPU side's decode here is PIL's); a side appears once it delivered
    # two batches, and which side is faster here is not fixed
    stages = loader.stage_ms()
    want = {"gpu": {"receive", "decode", "augment", "queue"}, "cpu": {"receive", "queue"}}
    assert stages and all(want[side] <= set(got) for side, got in stages.items())
    assert "decode" not in stages.get("cpu", {})
    assert all(v >= 0 for side in stages.values() for v in side.values())
    # a mean over the batches after the first (its workers' and decoder's start left out)
    loader.stage_s, loader.decoded = {"gpu": {"decode": 0.5, "queue": 0.25}, "cpu": {}}, \
        {"gpu": 5, "cpu": 1}
    assert loader.stage_ms() == {"gpu": {"decode": 125.0, "queue": 62.5}}


def test_uint8_helpers_give_the_cpu_paths_normalised_crops(tree):
    """`decode: gpu`'s CPU helpers hand over uint8 crops (the CPU path's transform up to
    PILToTensor) that the loader scales and normalises: the same tensors as the CPU path's
    float ones for the same draws; through the loader, float channels_last batches."""
    import torch

    from wattlife.workloads.gpu_augment import normalise

    ds = image_dataset(tree, True, 16)
    ds8 = uint8_crops(ds, 16)
    for i in range(len(ds)):
        torch.manual_seed(i)
        want, label = ds[i]
        torch.manual_seed(i)
        crop, label8 = ds8[i]
        assert crop.dtype == torch.uint8 and label8 == label
        torch.testing.assert_close(normalise(crop.float()), want, rtol=0, atol=1e-5)

    def after_a_helper(datas, boxes, stream):  # the GPU side waits for a helper's batch
        deadline = time.monotonic() + 120
        while loader.decoded["cpu"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        return _pil_decode(datas, boxes, stream)

    loader = GpuDecodeLoader(ds, 2, 16, torch.device("cpu"), collate=collate, readers=0,
                             helpers=1, decode=after_a_helper, helper_dataset=ds8)
    try:
        got = [b for _, b in zip(range(6), loader, strict=False)]
    finally:
        loader.close()
    assert loader.decoded["cpu"] >= 1
    for x, _, _ in got:
        assert x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last)
        assert -2.2 < float(x.min()) and float(x.max()) < 2.7  # normalised, not 0-255


def test_the_batches_both_sides_claim_cover_each_epoch_once():
    from wattlife.workloads.gpu_decode import _Claims

    claims = _Claims(10, 3)  # 3 batches an epoch, one image left out each time
    it1, it2 = iter(claims), iter(claims)
    got = [next(it1), next(it2), next(it1), next(it1), next(it2), next(it2)]
    first, second = got[:3], got[3:]
    for epoch in (first, second):
        flat = sum(epoch, [])
        assert len(flat) == len(set(flat)) == 9 and all(len(b) == 3 for b in epoch)
    assert claims.epochs == 2


def test_under_torchrun_each_rank_claims_its_shard_reshuffled_each_epoch():
    from torch.utils.data.distributed import DistributedSampler

    from wattlife.workloads.gpu_decode import _Claims

    data = list(range(12))
    seen = {}
    for rank in (0, 1):
        claims = _Claims(6, 3, DistributedSampler(data, 2, rank, shuffle=True, seed=0))
        it = iter(claims)
        seen[rank] = [sum((next(it) for _ in range(2)), []) for _ in range(2)]  # 2 epochs
    for e in (0, 1):
        assert sorted(seen[0][e] + seen[1][e]) == data  # the ranks' shards cover the data once
    assert seen[0][0] != seen[0][1]  # set_epoch reshuffles


def test_a_decoder_error_reaches_the_training_thread(tree):
    import torch

    def broken(datas, boxes, stream):
        raise RuntimeError("decoder broke")

    loader = GpuDecodeLoader(image_dataset(tree, True, 16), 2, 16, torch.device("cpu"),
                             collate=collate, readers=0, decode=broken)
    try:
        with pytest.raises(RuntimeError, match="decoder broke"):
            next(iter(loader))
    finally:
        loader.close()


def test_decode_gpu_falls_back_with_one_line_where_no_decoder_is_usable(monkeypatch, capsys):
    import torch

    assert choose_decode("r", "cpu", torch.device("cpu")) == ("cpu", None)
    decode, why = choose_decode("r", "gpu", torch.device("cpu"))
    err = capsys.readouterr().err.strip().splitlines()
    assert decode == "cpu" and "not a CUDA GPU" in why
    assert len(err) == 1 and err[0].startswith("wattlife: workloads.r.decode: gpu is not ")
    assert "instead" in err[0]
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)  # import fails: not installed
    assert "nvImageCodec is not installed" in unavailable_reason(torch.device("cuda", 0))
    assert "wattlife[gpu-decode]" in unavailable_reason(torch.device("cuda", 0))


@pytest.mark.slow
def test_a_cpu_cell_with_decode_gpu_trains_on_the_cpu_path_and_says_so(tmp_path, capfd):
    s = train_tiny_image_cell(tmp_path, decode="gpu")
    assert (s["decode"], s["decode_requested"], s["steps"]) == ("cpu", "gpu", 2)
    assert "not a CUDA GPU" in s["decode_fallback"]
    assert "workloads.r.decode: gpu is not available" in capfd.readouterr().err


class _PilDecode:
    """The GPU path's decoder slot filled by PIL (full images), to run the workload's `decode: gpu`
    wiring on a machine without a GPU."""

    roi = False

    def __init__(self, device):
        pass

    def __call__(self, datas, boxes, stream):
        return _pil_decode(datas, boxes, stream)


@pytest.mark.slow
def test_the_workloads_gpu_path_trains_and_records_both_sides(tmp_path, monkeypatch):
    from wattlife.workloads import gpu_decode, image

    monkeypatch.setattr(image, "choose_decode", lambda name, requested, device: ("gpu", None))
    monkeypatch.setattr(gpu_decode, "NvDecode", _PilDecode)
    s = train_tiny_image_cell(tmp_path, batch_size=2, steps=6, workers=2, decode="gpu",
                              val_every=3, val_steps=1)
    assert (s["decode"], s["decode_fallback"], s["steps"], s["skipped_items"]) == ("gpu", None,
                                                                                  6, 0)
    assert sum(s["decode_batches"].values()) >= 6 and s["epochs_started"] >= 2
    assert set(s["decode_stage_ms"]) <= {"gpu", "cpu"} and s["decode_stage_ms"]


def test_decode_is_a_validated_workload_key_defaulting_to_cpu():
    base = {"kind": "image_classification", "dataset": "d", "steps": 1, "batch_size": 1}
    assert workload_spec("r", base).decode == "cpu"
    assert workload_spec("r", {**base, "decode": "gpu"}).decode == "gpu"
    with pytest.raises(ConfigError, match=r"workloads.*r.*decode"):
        validate_config({"workloads": {"r": {**base, "decode": "tpu"}}, "slice": ["workloads"]})


def test_the_decode_overlay_compares_one_resnet_cell_decoded_both_ways():
    import yaml

    from conftest import REPO

    def merged(a, b):
        return {k: merged(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
                for k, v in {**a, **b}.items()}

    cfg = merged(yaml.safe_load((REPO / "config/gpu1.yaml").read_text()),
                 yaml.safe_load((REPO / "config/gpu1-decode.yaml").read_text()))
    validate_config(cfg)
    cpu, gpu = (workload_spec(n, cfg["workloads"][n]) for n in cfg["execution"]["workloads"])
    assert (cpu.decode, gpu.decode) == ("cpu", "gpu") and cfg["execution"]["repeats"] >= 3
    differ = {f for f in cpu.__dataclass_fields__ if getattr(cpu, f) != getattr(gpu, f)}
    assert differ == {"name", "decode"}


def test_workers_split_between_readers_and_cpu_helpers():
    assert split_workers(0) == (0, 0)
    assert split_workers(2) == (1, 1)
    assert split_workers(8) == (2, 6)
    assert split_workers(12) == (4, 8) and split_workers(16) == (4, 12)


@pytest.mark.gpu
def test_nvimagecodec_decodes_on_the_gpu_as_pil_does(tree):
    """Needs a CUDA GPU and nvImageCodec (`pip install 'wattlife[gpu-decode]'`)."""
    import torch

    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec not installed")
    from wattlife.workloads.gpu_decode import NvDecode

    ds = image_dataset(tree, True, 32)
    dev = torch.device("cuda", 0)
    loader = GpuDecodeLoader(ds, 2, 32, dev, collate=collate, readers=0,
                             decode=NvDecode(dev, roi=True))
    try:
        x, y, skipped = next(iter(loader))
        assert x.is_cuda and x.shape == (2, 3, 32, 32) and skipped == 0
    finally:
        loader.close()
    raw = RawJpegs(ds.samples)[0]
    img = NvDecode(dev, roi=False)([raw[0]], [raw[1]], torch.cuda.current_stream())[0]
    ref = _pil_decode([raw[0]], [raw[1]], None)[0]
    assert (img.cpu().int() - ref.int()).abs().float().mean() < 2  # nvJPEG vs libjpeg IDCT


@pytest.mark.gpu
@pytest.mark.parametrize("settings", [{}, {"PRIORITY": -5, "IN_FLIGHT": 2, "BATCHED": True,
                                           "DECODER_THREADS": 2, "PACK": False,
                                           "HELPERS_NICE": 5}])
def test_the_loader_on_a_gpu_gives_normalised_batches_from_both_sides(tree, monkeypatch,
                                                                      settings):
    """On a CUDA GPU with nvImageCodec: the loader (1 reader, 1 uint8 helper) under its default
    settings and under every setting the benchmark varies gives normalised channels_last
    batches and their labels on the device, from both sides, for three epochs."""
    import torch

    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec not installed")
    from wattlife.workloads import gpu_augment, gpu_decode

    for name, value in settings.items():
        monkeypatch.setattr(gpu_augment if name == "BATCHED" else gpu_decode, name, value)
    dev = torch.device("cuda", 0)
    ds = image_dataset(tree, True, 32)
    ds8 = uint8_crops(ds, 32)
    nv = gpu_decode.NvDecode(dev)

    class AfterAHelper:  # the GPU side waits for a helper's batch, so both sides deliver
        roi = nv.roi

        def __call__(self, datas, boxes, stream):
            deadline = time.monotonic() + 120
            while loader.decoded["cpu"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            return nv(datas, boxes, stream)

    loader = GpuDecodeLoader(ds, 2, 32, dev, collate=collate, readers=1, helpers=1,
                             helper_dataset=ds8, decode=AfterAHelper())
    got = []
    try:
        for _ in range(3):
            got += [(x.clone(), y.clone(), s) for x, y, s in loader]
    finally:
        loader.close()
    assert len(got) == 12 and loader.decoded["gpu"] >= 1 and loader.decoded["cpu"] >= 1
    for x, y, s in got:
        assert x.is_cuda and y.is_cuda and x.shape == (2, 3, 32, 32) and s == 0
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert -2.2 < float(x.min()) and float(x.max()) < 2.7 and set(y.tolist()) <= {0, 1}


def test_nice_helpers_start_with_their_niceness_raised(tree, monkeypatch):
    """`HELPERS_NICE`: the CPU helpers' DataLoader starts each worker with `lower_priority`,
    which raises that process's niceness (checked in a real child process) and not the
    parent's; 0 (the default) leaves the workers as they are."""
    import functools
    import multiprocessing
    import os

    import torch

    from wattlife.workloads import gpu_decode

    def built() -> GpuDecodeLoader:
        return GpuDecodeLoader(image_dataset(tree, True, 16), 2, 16, torch.device("cpu"),
                               collate=collate, readers=1, helpers=1, decode=_pil_decode)

    assert dict(built().loaders)["cpu"].worker_init_fn is None  # not started: nothing to close
    monkeypatch.setattr(gpu_decode, "HELPERS_NICE", 3)
    init = dict(built().loaders)["cpu"].worker_init_fn
    assert isinstance(init, functools.partial) and init.func is gpu_decode.lower_priority
    ctx = multiprocessing.get_context("fork")
    got = ctx.Queue()
    child = ctx.Process(target=_niceness_after, args=(init, got))
    child.start()
    try:
        assert got.get(timeout=60) == min(19, os.nice(0) + 3)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == 0


def _niceness_after(init, got) -> None:
    import os

    init(0)
    got.put(os.nice(0))
