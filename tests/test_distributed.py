"""The multi-GPU launch path on CPU: torchrun with two Gloo ranks, DDP with explicit grad_sync for
the image workload and FSDP (full shard, activation checkpointing) for the causal LM."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from wattlife.contracts import read_events
from wattlife.workloads.datagen import make_image_tree, make_text_corpus

REPO = Path(__file__).resolve().parents[1]


def _config(tmp_path: Path, workload: dict) -> Path:
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")}
    cfg["workloads"] = {"w": workload}
    cfg["execution"]["workloads"] = ["w"]
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _torchrun(tmp_path: Path, conf: Path, env_path: dict) -> pd.DataFrame:
    events = tmp_path / "events.csv"
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(tmp_path / "trace.csv"),
           "--events", str(events), "--gpu", "none", "--idle-s", "0", "--run-id", "dist", "--",
           sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "wattlife.cli", "train", "--config", str(conf), "--workload", "w",
           "--storage", "local", "--checkpoint", "on", "--workdir", str(tmp_path / "work")]
    out = subprocess.run(cmd, cwd=REPO, env={**env_path, "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return read_events(events)  # rank 0 file + the other ranks' events.rank<N>.csv


@pytest.mark.slow
def test_ddp_with_explicit_grad_sync_on_two_gloo_ranks(tmp_path, env_path):
    make_image_tree(tmp_path / "shared" / "imgs", n_classes=2, train_per_class=8, val_per_class=2, size=40)
    conf = _config(tmp_path, {"kind": "image_classification", "dataset": "imgs", "model": "resnet18",
                              "device": "cpu", "precision": "fp32", "image_size": 32, "batch_size": 2,
                              "steps": 3, "workers": 0, "val_every": 0, "ckpt_every": 3,
                              "grad_sync": "explicit"})
    ev = _torchrun(tmp_path, conf, env_path)
    assert set(ev["rank"]) == {0, 1}
    for r in (0, 1):
        phases = set(ev.loc[ev["rank"] == r, "phase"])
        assert {"forward", "backward", "grad_sync", "optimizer"} <= phases, (r, phases)
    s = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert s["world_size"] == 2 and s["steps"] == 3 and s["checkpoints"]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pretrain", "lora"])
def test_fsdp_causal_lm_on_two_gloo_ranks(tmp_path, env_path, task):
    make_text_corpus(tmp_path / "shared" / "text", n_words=20_000)
    conf = _config(tmp_path, {"kind": "causal_lm", "dataset": "text", "model_config": "qwen3-tiny",
                              "device": "cpu", "precision": "fp32", "seq_len": 32, "batch_size": 2,
                              "steps": 3, "val_every": 0, "ckpt_every": 3, "tokenizer_vocab": 512,
                              "fsdp": True, "activation_checkpointing": True, "task": task,
                              "lora_rank": 4})
    ev = _torchrun(tmp_path, conf, env_path)
    assert set(ev["rank"]) == {0, 1} and "checkpoint" in set(ev["phase"])
    s = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert s["world_size"] == 2
    import torch

    state = torch.load(s["checkpoints"][0], map_location="cpu")
    if task == "pretrain":
        assert any(k.endswith("embed_tokens.weight") for k in state["model"])  # gathered full state
        assert state["model"]["model.embed_tokens.weight"].shape[0] >= 512  # unsharded
    else:
        assert state["adapters_only"] and state["model"] and all("lora_" in k for k in state["model"])
