"""`cuda_graphs: true` of the image workload (workloads/cuda_graphs.py): the fallback where graphs
cannot run, the config key, and (on a GPU) that the replayed step computes the eager step's loss
and gradients and leaves the model as the capture found it."""

import copy

import pytest

from conftest import train_tiny_image_cell
from wattlife.config import ConfigError, validate_config, workload_spec
from wattlife.workloads.cuda_graphs import choose_graphs, unavailable_reason


def test_cuda_graphs_fall_back_with_one_line_on_a_cpu_or_under_several_ranks(capsys):
    import torch

    assert choose_graphs("r", False, torch.device("cpu"), 1) == (False, None)
    assert capsys.readouterr().err == ""
    graphs, why = choose_graphs("r", True, torch.device("cpu"), 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert graphs is False and "not a CUDA GPU" in why
    assert len(err) == 1 and err[0].startswith("wattlife: workloads.r.cuda_graphs: not available")
    assert "eagerly instead" in err[0]
    assert "2 ranks" in unavailable_reason(torch.device("cuda", 0), 2)
    assert unavailable_reason(torch.device("cuda", 0), 1) is None


def test_cuda_graphs_is_a_validated_boolean_defaulting_to_false():
    base = {"kind": "image_classification", "dataset": "d", "steps": 1, "batch_size": 1}
    assert workload_spec("r", base).cuda_graphs is False
    assert workload_spec("r", {**base, "cuda_graphs": True}).cuda_graphs is True
    with pytest.raises(ConfigError, match=r"workloads.*r.*cuda_graphs"):
        validate_config({"workloads": {"r": {**base, "cuda_graphs": "yes"}},
                         "slice": ["workloads"]})


@pytest.mark.slow
def test_a_cpu_cell_with_cuda_graphs_trains_eagerly_and_says_so(tmp_path, capfd):
    s = train_tiny_image_cell(tmp_path, cuda_graphs=True)
    assert (s["cuda_graphs"], s["cuda_graphs_requested"], s["steps"]) == (False, True, 2)
    assert "not a CUDA GPU" in s["cuda_graphs_fallback"]
    assert "workloads.r.cuda_graphs: not available" in capfd.readouterr().err


def _grads(model):
    return {k: p.grad.detach().float().clone() for k, p in model.named_parameters()}


@pytest.mark.gpu
def test_the_replayed_step_computes_the_eager_steps_loss_and_gradients():
    """On a CUDA GPU: ResNet-18 (bf16 autocast, channels_last) captured, then one batch through
    the graphs and through an untouched copy of the model; the capture leaves the parameters and
    BatchNorm's statistics as they were; a shortened batch and evaluation mode run eagerly."""
    import torch
    import torch.nn.functional as F
    import torchvision

    from wattlife.workloads.cuda_graphs import GraphedModel

    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    model = torchvision.models.resnet18(num_classes=10).to(dev, memory_format=torch.channels_last)
    twin = copy.deepcopy(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    graphed = GraphedModel(model, (8, 3, 64, 64), dev, amp=True)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # capture changed nothing

    x = torch.randn(8, 3, 64, 64, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), device=dev)
    losses, grads = [], []
    for fwd, m in ((graphed, model), (twin, twin)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(_grads(m))
    assert losses[0] == pytest.approx(losses[1], rel=1e-3)
    for k, g in grads[1].items():
        cos = F.cosine_similarity(grads[0][k].flatten(), g.flatten(), dim=0)
        assert cos > 0.999, k
    torch.testing.assert_close(model.bn1.running_mean, twin.bn1.running_mean)

    # three SGD steps each way (the graphs' gradient buffers are reused from step to step)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin)]
    for _ in range(3):
        xs = torch.randn(8, 3, 64, 64, device=dev).contiguous(memory_format=torch.channels_last)
        for fwd, opt in ((graphed, opts[0]), (twin, opts[1])):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                F.cross_entropy(fwd(xs), y).backward()
            opt.step()
    for (k, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert F.cosine_similarity((p - before[k]).flatten(), (q - before[k]).flatten(),
                                   dim=0) > 0.99, k

    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        short = graphed(x[:5])  # another shape: the eager forward
        assert short.shape == (5, 10) and short.requires_grad
        model.eval()
        with torch.no_grad():
            assert graphed(x).shape == (8, 10)  # evaluation mode: eager, no graph
    model.train()
