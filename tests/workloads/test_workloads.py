import json
from pathlib import Path

import pytest

from wattlife import markers
from wattlife.config import settings
from wattlife.contracts import read_events
from wattlife.workloads import train_cell
from wattlife.workloads.datagen import make_image_tree, make_text_corpus


def _cfg(tmp_path, **over):
    w = {"kind": "image_classification", "dataset": "imgs", "model": "resnet18", "device": "cpu",
         "precision": "fp32", "image_size": 32, "batch_size": 4, "steps": 6, "workers": 1,
         "val_every": 3, "val_steps": 1, "ckpt_every": 3, "lr": 0.05}
    w.update(over)
    return {"storage": {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")},
            "workloads": {"r": w}}


@pytest.fixture
def images(tmp_path):
    make_image_tree(tmp_path / "shared" / "imgs", n_classes=3, train_per_class=6, val_per_class=2,
                    size=40)
    return tmp_path / "shared" / "imgs"


@pytest.mark.slow
def test_image_workload_marks_every_phase_and_checkpoints_reload(tmp_path, images):
    import torch
    import torchvision

    markers.configure(tmp_path / "events.csv", run_id="cell")
    rc = train_cell(settings(_cfg(tmp_path)), "r", "local", True, tmp_path / "work")
    markers.reset()
    assert rc == 0
    ev = read_events(tmp_path / "events.csv")
    want = {"stage_copy", "model_load", "data_load", "h2d", "forward", "backward", "optimizer",
            "validation", "checkpoint", "step"}
    assert want <= set(ev["phase"])
    assert (ev["phase"] == "forward").sum() == 6
    dur = (ev["end_ns"] - ev["start_ns"]) / 1e9
    assert (dur >= 0).all() and dur.max() < 120
    summary = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["throughput"] > 0 and summary["skipped_items"] == 0
    ckpt = Path(summary["checkpoints"][0])
    assert str(ckpt).startswith(str(tmp_path / "local"))
    state = torch.load(ckpt, map_location="cpu")
    model = torchvision.models.resnet18(num_classes=3)
    model.load_state_dict(state["model"])
    assert state["step"] == 6


@pytest.mark.slow
def test_corrupt_jpeg_is_skipped_and_counted(tmp_path, images):
    bad = next((images / "train").rglob("*.JPEG"))
    bad.write_bytes(b"not a jpeg at all")
    markers.configure(tmp_path / "events.csv", run_id="cell")
    rc = train_cell(settings(_cfg(tmp_path, steps=8, batch_size=6, val_every=0)), "r", "shared",
                    False, tmp_path / "work")
    markers.reset()
    assert rc == 0
    summary = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert summary["skipped_items"] >= 1
    # each step's events carry the images it trained, not the nominal batch size
    items = read_events(tmp_path / "events.csv").query("phase == 'step'")["items"]
    assert len(items) == 8 and items.sum() == 8 * 6 - summary["skipped_items"]
    assert sorted(set(items)) == [5.0, 6.0]


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        train_cell(settings(_cfg(tmp_path)), "r", "shared", False, tmp_path / "work")


def test_image_workload_without_torchvision_names_the_workload_and_the_cpu_set_up(
        tmp_path, images, monkeypatch):
    # the CPU set-up (WATTLIFE_CPU=1) has no torchvision: one line naming what to do, not a
    # ModuleNotFoundError from inside the training loop
    import sys

    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(RuntimeError, match=r"workloads\.r \(kind image_classification.*"
                       r"needs torchvision.*WATTLIFE_CPU=1"):
        train_cell(settings(_cfg(tmp_path)), "r", "shared", False, tmp_path / "work")


def test_unknown_workload_names_the_key(tmp_path):
    with pytest.raises(ValueError, match="workloads.nope"):
        train_cell(settings(_cfg(tmp_path)), "nope", "shared", False, tmp_path / "work")


def test_text_corpus_generator(tmp_path):
    n = make_text_corpus(tmp_path, n_words=5000)
    assert n == 5000
    text = (tmp_path / "train.txt").read_text()
    assert " = " in text and len(text.split()) > 3000


@pytest.mark.slow
def test_causal_lm_trains_tiny_qwen3_with_a_local_tokenizer_and_checkpoints(tmp_path):
    import torch

    make_text_corpus(tmp_path / "shared" / "wikitext", n_words=30_000)
    cfg = {"storage": {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")},
           "workloads": {"q": {"kind": "causal_lm", "dataset": "wikitext",
                               "model_config": "qwen3-tiny", "device": "cpu", "precision": "fp32",
                               "seq_len": 64, "batch_size": 4, "steps": 6, "val_every": 3,
                               "val_steps": 1, "ckpt_every": 3,
                               "tokenizer_vocab": 512}}}
    markers.configure(tmp_path / "events.csv", run_id="q")
    assert train_cell(settings(cfg), "q", "local", True, tmp_path / "work") == 0
    markers.reset()
    ev = read_events(tmp_path / "events.csv")
    want = {"stage_copy", "setup", "model_load", "tokenize", "data_load", "h2d", "forward",
            "backward", "optimizer", "validation", "checkpoint", "step", "finalize"}
    assert want <= set(ev["phase"])
    assert set(ev.loc[ev["phase"] == "step", "items"]) == {4 * 64.0}
    s = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert s["model_source"] == "random-init" and s["throughput"] > 0 and s["mfu"] is None
    assert s["flops_per_token"] > 6 * s["active_parameters"] and s["task"] == "pretrain"
    state = torch.load(s["checkpoints"][0], map_location="cpu")
    from transformers import Qwen3ForCausalLM

    from wattlife.workloads.lm_model import model_config

    c = model_config("qwen3-tiny")
    # the model's vocabulary is the tokenizer's, rounded up to a multiple of 64
    assert s["vocab_size"] == -(-s["tokenizer_vocab"] // 64) * 64
    assert s["vocab_size"] != c.vocab_size
    c.vocab_size = s["vocab_size"]
    Qwen3ForCausalLM(c).load_state_dict(state["model"])
    assert state["step"] == 6 and "state" in state["optimizer"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen3-tiny", "qwen3-moe-tiny"])
@pytest.mark.parametrize("task", ["pretrain", "lora"])
def test_dense_and_moe_models_train_with_both_tasks(tmp_path, model, task):
    """LoRA trains only the adapters, leaves the base weights as they were and checkpoints only
    the adapters; MoE counts only the routed top-k experts as active."""
    import torch

    make_text_corpus(tmp_path / "shared" / "wikitext", n_words=20_000)
    w = {"kind": "causal_lm", "dataset": "wikitext", "model_config": model, "task": task,
         "lora_rank": 4, "device": "cpu", "precision": "fp32", "seq_len": 32, "batch_size": 2,
         "steps": 4, "ckpt_every": 4, "tokenizer_vocab": 512, "lr": 1e-2}
    cfg = {"storage": {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")},
           "workloads": {"q": w}}
    torch.manual_seed(0)
    assert train_cell(settings(cfg), "q", "shared", True, tmp_path / "work") == 0
    s = json.loads((tmp_path / "work" / "summary.json").read_text())
    state = torch.load(s["checkpoints"][0], map_location="cpu")
    if model == "qwen3-moe-tiny":
        assert s["experts"] == 8 and s["experts_per_token"] == 2
        assert s["active_parameters"] < 0.8 * s["parameters"]
    if task == "pretrain":
        assert s["trained_parameters"] == s["parameters"] and not state["adapters_only"]
        assert s["flops_per_token"] >= 6 * s["active_parameters"]
        return
    assert 0 < s["trained_parameters"] < 0.5 * s["parameters"]
    assert state["adapters_only"] and state["model"]
    assert all("lora_" in k for k in state["model"])
    # LoRA's FLOPs: weight gradients only for the adapters
    assert 4 * s["active_parameters"] < s["flops_per_token"] < 6 * s["active_parameters"] + 1e9


@pytest.mark.parametrize("model", ["qwen3-tiny", "qwen3-moe-tiny"])
def test_lora_changes_only_the_adapters(model):
    import torch
    from transformers import AutoModelForCausalLM

    from wattlife.config import workload_spec
    from wattlife.workloads.lm_model import model_config, with_lora

    spec = workload_spec("l", {"kind": "causal_lm", "dataset": "d", "steps": 1, "batch_size": 1,
                               "task": "lora", "lora_rank": 4})
    m, info = with_lora(AutoModelForCausalLM.from_config(model_config(model)), spec)
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    x = torch.randint(0, 2048, (2, 16))
    for _ in range(3):
        m(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    changed = {k for k, v in m.named_parameters() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    assert any("lora_B" in k for k in changed)  # B starts at zero, so it must have moved
    targets = {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in changed}
    assert {"q_proj", "v_proj", "o_proj"} <= targets
    # what the summary says carries adapters is what trained
    assert set(info["lora_target_modules"]) <= targets
    if model == "qwen3-moe-tiny":  # the routed experts' fused weights, one adapter per expert
        assert info["lora_target_parameters"] == ["experts.gate_up_proj", "experts.down_proj"]
        assert "experts" in targets and "gate_proj" not in info["lora_target_modules"]
    else:
        assert info["lora_target_parameters"] == []
        assert {"gate_proj", "up_proj", "down_proj"} <= targets


@pytest.mark.parametrize("name, total_b, active_b", [
    ("qwen3-32b", 32.8, 32.0), ("llama-3.1-70b", 70.6, 69.5), ("mistral-small-24b", 23.6, 22.9),
    ("qwen3-30b-a3b", 30.5, 3.04), ("gpt-oss-20b", 20.9, 3.61), ("deepseek-v2-lite", 15.7, 2.45)])
def test_shipped_study_configs_have_their_public_sizes(name, total_b, active_b):
    """Built on the meta device (no memory): total parameters as published; active = matmul
    parameters a token passes through (routed top-k experts only, input embedding excluded)."""
    import torch
    from transformers import AutoModelForCausalLM

    from wattlife.workloads.lm_model import model_config, parameter_counts

    cfg = model_config(name)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    c = parameter_counts(m, cfg)
    assert c["parameters"] / 1e9 == pytest.approx(total_b, rel=0.01)
    assert c["active_parameters"] / 1e9 == pytest.approx(active_b, rel=0.01)


def test_causal_lm_config_errors_are_clear(tmp_path):
    from wattlife.workloads.lm_model import model_config

    with pytest.raises(FileNotFoundError, match="qwen3-8b"):
        model_config("qwen9-huge")
    assert model_config("qwen3-8b").num_hidden_layers == 36


def test_fewer_images_than_one_batch_is_a_clear_error(tmp_path, images):
    with pytest.raises(ValueError, match="fewer than one batch of 64"):
        train_cell(settings(_cfg(tmp_path, batch_size=64)), "r", "shared", False,
                   tmp_path / "work")


def test_experts_backend_vocab_and_lora_plan_from_config():
    import torch
    from transformers import AutoModelForCausalLM

    from wattlife.config import workload_spec
    from wattlife.workloads.lm_model import (
        experts_implementation,
        is_moe,
        lora_plan,
        model_config,
        model_vocab,
    )

    def spec(**keys):
        return workload_spec("q", {"kind": "causal_lm", "dataset": "d", "steps": 1,
                                   "batch_size": 1, **keys})

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert experts_implementation(spec(), cuda) == "grouped_mm"
    assert experts_implementation(spec(), cpu) == "eager"
    assert experts_implementation(spec(experts_implementation="grouped_mm"), cpu) == "grouped_mm"
    assert experts_implementation(spec(experts_implementation="eager"), cuda) == "eager"
    with pytest.raises(ValueError, match="experts_implementation: expected one of"):
        experts_implementation(spec(experts_implementation="fast"), cuda)
    assert is_moe(model_config("qwen3-moe-tiny")) and not is_moe(model_config("qwen3-tiny"))
    assert model_vocab(3090) == 3136 and model_vocab(3072) == 3072 and model_vocab(5, 1) == 5
    with pytest.raises(ValueError, match="vocab_multiple"):
        model_vocab(100, 0)
    moe = AutoModelForCausalLM.from_config(model_config("qwen3-moe-tiny"))
    assert lora_plan(moe, spec(lora_experts=False), True)["lora_target_parameters"] == []
    assert lora_plan(moe, spec(), False)["lora_target_parameters"] == []
    assert lora_plan(moe, spec(lora_targets=["q_proj"]), True)["lora_target_modules"] == ["q_proj"]


@pytest.mark.parametrize("model, impl", [("qwen3-moe-tiny", "grouped_mm"),
                                         ("qwen3-moe-tiny", "auto"), ("qwen3-tiny", "auto")])
def test_causal_lm_summary_names_backend_compile_vocab_and_basis(tmp_path, monkeypatch, model,
                                                                  impl):
    """The summary records the experts backend the model runs, whether it was compiled, the
    tokenizer-sized vocabulary and each throughput's basis; every second is in a named phase."""
    import torch

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: compiled.append(kw) or m)
    make_text_corpus(tmp_path / "shared" / "wikitext", n_words=8_000)
    w = {"kind": "causal_lm", "dataset": "wikitext", "model_config": model, "device": "cpu",
         "precision": "fp32", "seq_len": 32, "batch_size": 2, "steps": 3, "val_every": 2,
         "val_steps": 1, "tokenizer_vocab": 300, "experts_implementation": impl, "compile": True,
         "compile_mode": "max-autotune-no-cudagraphs"}
    cfg = {"storage": {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")},
           "workloads": {"q": w}}
    markers.configure(tmp_path / "events.csv", run_id="q")
    assert train_cell(settings(cfg), "q", "shared", False, tmp_path / "work") == 0
    markers.reset()
    s = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert compiled == [{"mode": "max-autotune-no-cudagraphs"}] and s["compile"] is True
    assert s["compile_mode"] == "max-autotune-no-cudagraphs"
    want = {"qwen3-tiny": "none", "qwen3-moe-tiny": "eager" if impl == "auto" else impl}[model]
    assert s["experts_impl"] == want
    assert s["vocab_size"] == -(-s["tokenizer_vocab"] // 64) * 64 < 2048
    assert s["throughput_basis"] == "step" and s["mfu_basis"] == "step"
    assert 0 < s["throughput_wall"] < s["throughput"]  # the validation pause is in `wall` only
    ev = read_events(tmp_path / "events.csv")
    top = ev[ev["depth"] == 0].sort_values("start_ns")
    assert {"setup", "tokenize", "model_load", "finalize"} <= set(top["phase"])
    # between the first and the last top-level phase the gaps are the loop's own bookkeeping
    gaps = (top["start_ns"].to_numpy()[1:] - top["end_ns"].to_numpy()[:-1]).clip(0).sum() / 1e9
    span = (top["end_ns"].max() - top["start_ns"].min()) / 1e9
    assert gaps < 0.05 * span
    # the first forward and backward of the compiled model are `compile`, nested inside them
    comp = ev[ev["phase"] == "compile"]
    first = (ev[ev["phase"].isin(["forward", "backward"])].sort_values("start_ns")
             .groupby("phase").head(1))
    assert len(comp) == 2 and sorted(comp["depth"]) == sorted(first["depth"] + 1)
    starts = first.sort_values("start_ns")["start_ns"].to_numpy()
    assert (comp.sort_values("start_ns")["start_ns"].to_numpy() >= starts).all()
    # the `step` basis is the events' own step rows: a recomputation agrees within 0.1 %
    from wattlife.analysis.performance import step_throughput_from_events

    assert s["step_clock"] == "host" and s["attention_flops_per_token"] > 0
    assert s["throughput"] == pytest.approx(step_throughput_from_events(ev), rel=1e-3)


def test_workload_specs_take_the_schemas_defaults_then_their_kinds():
    """A workload key absent from the config takes the schema's default, else its kind's
    (`KIND_DEFAULTS`, never a key the schema defaults), else one derived from other keys."""
    import dataclasses

    from wattlife.config import (
        CausalLMSpec,
        ImageClassificationSpec,
        schema,
        schema_default,
        workload_spec,
    )

    keys = schema()["properties"]["workloads"]["additionalProperties"]["properties"]
    for cls in (ImageClassificationSpec, CausalLMSpec):
        fields = {f.name for f in dataclasses.fields(cls)}
        assert set(cls.KIND_DEFAULTS) <= fields
        assert not {k for k in cls.KIND_DEFAULTS if "default" in keys[k]}
    base = {"dataset": "d", "steps": 1, "batch_size": 1}
    img = workload_spec("r", {"kind": "image_classification", **base})
    lm = workload_spec("q", {"kind": "causal_lm", **base})
    lora = workload_spec("l", {"kind": "causal_lm", "task": "lora", "lora_rank": 8, **base})
    assert (img.workers, img.val_steps, img.lr, img.model, img.precision) == (2, 0, 0.1,
                                                                                "resnet50", "bf16")
    assert (lm.workers, lm.val_steps, lm.seq_len, lm.lr, lm.compile) == (0, 2, 2048, 3e-4, False)
    assert lm.lora_rank == schema_default("workloads", "*", "lora_rank")
    assert lm.lora_alpha == 2 * lm.lora_rank and (lora.lr, lora.lora_alpha) == (1e-4, 16)
    assert lm.checkpoint_to is None and img.image_size is None
    set_ = workload_spec("q", {"kind": "causal_lm", **base, "workers": 3, "lr": 1e-3})
    assert (set_.workers, set_.lr) == (3, 1e-3)


def test_an_image_workload_without_image_size_is_named(tmp_path):
    cfg = _cfg(tmp_path)
    del cfg["workloads"]["r"]["image_size"]
    with pytest.raises(ValueError, match=r"workloads\.r\.image_size: required"):
        train_cell(settings(cfg), "r", "shared", False, tmp_path / "work")
