"""The checkpoint factor's three modes (off, sync, async; `on` = sync): the async save's staged
snapshot is what loads back (one process and two Gloo ranks, causal LM and image model), its
stage / write phases are in the events, and `wattlife check` and attribution accept the write
overlapping the steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wattlife.attribution import attribute_files
from wattlife.check import ERROR, check_events, check_run, nesting
from wattlife.config import ConfigError, settings
from wattlife.contracts import read_events
from wattlife.workloads.checkpointing import checkpoint_mode
from wattlife.workloads.datagen import make_text_corpus

REPO = Path(__file__).resolve().parents[2]


def test_checkpoint_values_on_means_sync_and_a_bad_one_is_named():
    assert [checkpoint_mode(v) for v in ("on", "sync", "async", "off", True, False)] == \
        ["sync", "sync", "async", "off", "sync", "off"]
    with pytest.raises(ValueError, match="checkpoint: expected one of .*'fast'"):
        checkpoint_mode("fast")


def test_old_configs_with_on_keep_working_and_keep_their_cell_folders():
    base = {"storage": {"shared": "s", "local": "l"},
            "workloads": {"w": {"kind": "causal_lm", "dataset": "t", "model_config": "qwen3-tiny"}}}
    old = settings({**base, "execution": {"workloads": ["w"], "checkpoint": ["on", "off"]}})
    assert [c.id for c in old.cells()][:1] == ["w/shared/ckpt-on/r1"]  # committed trees resume
    new = settings({**base, "execution": {"workloads": ["w"], "storage": ["shared"],
                                          "checkpoint": ["off", "sync", "async"]}})
    assert [c.checkpoint for c in new.cells()] == ["off", "sync", "async"]
    with pytest.raises(ConfigError, match="execution.checkpoint: 'on' and 'sync'"):
        settings({**base, "execution": {"workloads": ["w"], "checkpoint": ["on", "sync"]}})


def _events(rows):
    ev = pd.DataFrame(rows, columns=["phase", "start_ns", "end_ns"])
    return ev.assign(run_id="r", host="h", rank=0, step=0, items=np.where(
        ev["phase"] == "step", 1.0, np.nan), file_name="events.csv",
        line_no=np.arange(2, len(ev) + 2))


NOW = 1_800_000_000_000_000_000
T0 = 1_700_000_000_000_000_000


def test_a_background_write_overlapping_the_steps_nests_outside_the_tree_and_must_finish():
    s = 1_000_000_000  # 1 s
    rows = [("step", T0, T0 + s), ("checkpoint_stage", T0 + s, T0 + 2 * s),
            ("checkpoint_write", T0 + 2 * s, T0 + 5 * s),  # over the next two steps
            ("step", T0 + 2 * s, T0 + 3 * s), ("step", T0 + 3 * s, T0 + 4 * s),
            ("checkpoint_wait", T0 + 4 * s, T0 + 5 * s)]
    ev = _events(rows)
    assert not nesting(ev)["overlap"].any()
    assert not [f for f in check_events(ev, NOW) if f.severity == ERROR]
    late = _events(rows[:-1])  # no wait: the write outlived the rank's last phase
    (f,) = [f for f in check_events(late, NOW) if f.code == "events.concurrent-unfinished"]
    assert f.severity == ERROR and f.line == 4 and "did not wait" in f.message
    overlap = _events([("step", T0, T0 + 2 * s), ("checkpoint", T0 + s, T0 + 3 * s)])
    assert nesting(overlap)["overlap"].any()  # any other phase name still must nest


ROUNDTRIP = """
import os, sys, torch, torchvision, torch.distributed as td
from pathlib import Path
from transformers import AutoModelForCausalLM
from wattlife.workloads.cell import Dist
from wattlife.workloads.lm_model import model_config
from wattlife.workloads.checkpointing import (dcp_state, load_checkpoint, make_checkpointer,
                                              save_atomically, save_checkpoint)
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    td.init_process_group("gloo")
d = Dist(int(os.environ.get("RANK", "0")), 0, world)
cfg = model_config("qwen3-tiny"); cfg.vocab_size = 128
torch.manual_seed(0)
models = {"lm": AutoModelForCausalLM.from_config(cfg),
          "img": torchvision.models.resnet18(num_classes=3)}
for name, model in models.items():
    lm = name == "lm"  # the LM saves on every rank, the image workload on rank 0 alone
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    def step():
        x = torch.randint(0, 128, (2, 16)) if lm else torch.randn(2, 3, 32, 32)
        (wrapped(input_ids=x, labels=x).loss if lm else wrapped(x).sum()).backward()
        opt.step(); opt.zero_grad()
    for mode in ("sync", "async"):
        folder = Path(sys.argv[1]) / name / mode
        folder.mkdir(parents=True, exist_ok=True)
        write = ((lambda n: save_checkpoint(wrapped, opt, folder, n, d, False)) if lm else
                 (lambda n: save_atomically({"model": model.state_dict(), "step": n,
                                             "optimizer": opt.state_dict()}, folder / "model.pt")))
        ck = make_checkpointer(mode, write, lambda: dcp_state(wrapped if lm else model, opt),
                               folder, d, torch.device("cpu"), {"adapters_only": False}, lm)
        step()
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        if ck is not None:
            ck.save(1)
        step()  # trains on while the write runs: the checkpoint must hold the staged snapshot
        if ck is not None:
            ck.finish()
        if world > 1:
            td.barrier()
        if lm or d.rank == 0:
            path = folder / ("model.dcp" if mode == "async" else "model.pt")
            info = load_checkpoint(wrapped if lm else model, opt, path)
            got = model.state_dict()
            assert info["step"] == 1 and all(torch.equal(saved[k], got[k]) for k in saved)
            print("roundtrip ok", name, mode, d.rank, info["format"])
if world > 1:
    td.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_sync_and_async_checkpoints_load_back_the_saved_weights(tmp_path, env_path, ranks):
    script = tmp_path / "roundtrip.py"
    script.write_text(ROUNDTRIP)
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}"] if ranks > 1 else [sys.executable])
    out = subprocess.run(launch + [str(script), str(tmp_path / "ckpt")], cwd=REPO,
                         env={**env_path, "OMP_NUM_THREADS": "1"}, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ok = out.stdout.count("roundtrip ok")
    assert ok == 2 * ranks + 2, out.stdout  # the image model: rank 0 saves and loads
    shards = {p.name for p in (tmp_path / "ckpt" / "lm" / "async" / "model.dcp").glob("*.distcp")}
    assert shards == {f"__{r}_0.distcp" for r in range(ranks)}
    meta = json.loads((tmp_path / "ckpt" / "lm" / "async" / "model.dcp" / "wattlife.json")
                      .read_text())
    assert meta["mode"] == "async" and meta["world_size"] == ranks and meta["step"] == 1


@pytest.mark.slow
def test_an_async_causal_lm_run_on_two_gloo_ranks_marks_stage_and_write_and_passes_check(
        tmp_path, env_path):
    make_text_corpus(tmp_path / "shared" / "text", n_words=5_000)
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")}
    cfg["workloads"] = {"w": {"kind": "causal_lm", "dataset": "text", "model_config": "qwen3-tiny",
                              "device": "cpu", "precision": "fp32", "seq_len": 32,
                              "batch_size": 2, "steps": 4, "val_every": 0, "ckpt_every": 2,
                              "tokenizer_vocab": 512}}
    cfg["execution"]["workloads"] = ["w"]
    conf = tmp_path / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(run / "trace.csv"),
           "--events", str(run / "events.csv"), "--gpu", "none", "--idle-s", "0",
           "--run-id", "async", "--", sys.executable, "-m", "torch.distributed.run",
           "--standalone", "--nproc-per-node=2", "-m", "wattlife.cli", "train", "--config",
           str(conf), "--workload", "w", "--storage", "shared", "--checkpoint", "async",
           "--workdir", str(tmp_path / "work")]
    env = {**env_path, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ev = read_events(run / "events.csv")
    for r in (0, 1):
        names = ev.loc[ev["rank"] == r, "phase"].value_counts()
        assert names.get("checkpoint_stage") == 2 and names.get("checkpoint_write") == 2, names
        # each checkpoint is completed (waited for, published) inside a phase: the second save
        # completes the first, the loop's end the second
        assert names.get("checkpoint_wait") == 2, names
        assert "checkpoint" not in names
    s = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert Path(s["checkpoints"][0]).name == "model.dcp"
    phases = attribute_files(run / "trace.csv", run / "events.csv", run / "phases.csv")
    assert "checkpoint_stage" in set(phases["phase"])
    assert "checkpoint_write" not in set(phases["phase"])  # its energy stays with the steps
    errors = [f for f in check_run(run) if f.severity == ERROR]
    assert not errors, errors
    assert os.path.isdir(s["checkpoints"][0])


def test_the_storage_checkpoint_table_takes_three_modes_each_against_off():
    from wattlife.analysis.aggregate import CELL_DIR, storage_checkpoint_deltas

    assert CELL_DIR.match("lm-shared-ckptasync").group("checkpoint") == "async"
    rows = []
    extra = {"off": {}, "sync": {"checkpoint": 80.0}, "async": {"checkpoint_stage": 20.0}}
    for mode, more in extra.items():
        for r in (1, 2, 3):
            for ph, e in {"forward": 100.0 + r, **more}.items():
                rows.append({"run_id": f"{mode}{r}", "phase": ph, "device_kind": "gpu",
                             "device": "gpu0", "energy_j": e, "energy_lo_j": e, "energy_hi_j": e,
                             "time_s": 1.0, "count": 1, "mean_power_w": e,
                             "method": "integrate", "source": "nvml-samples", "workload": "lm",
                             "storage": "shared", "checkpoint": mode, "repeat": r,
                             "items": 10.0, "throughput_unit": "tokens/s (all ranks)"})
    d = storage_checkpoint_deltas(pd.DataFrame(rows)).set_index(["checkpoint", "phase"])
    assert d.loc[("sync", "checkpoint"), "d_energy_j"] == pytest.approx(80.0)
    assert d.loc[("async", "checkpoint_stage"), "d_energy_j"] == pytest.approx(20.0)
    assert d.loc[("async", "forward"), "d_energy_j"] == pytest.approx(0.0)


def test_async_checkpoints_save_twice_where_async_save_closes_the_stager(tmp_path, monkeypatch):
    """torch 2.11's `async_save` closes the stager it is given (H200 run of issue 30: the second
    async checkpoint failed with KeyError(type) in the closed stager); each checkpoint stages
    with a stager of its own, so a second save works there too."""
    import torch
    import torch.distributed.checkpoint as dcp

    from wattlife.workloads.cell import Dist
    from wattlife.workloads.checkpointing import dcp_state, load_checkpoint, make_checkpointer

    real = dcp.async_save

    def closing(*args, **kwargs):  # what torch 2.11 does with a stager it is given
        out = real(*args, **kwargs)
        if kwargs.get("async_stager") is not None:
            kwargs["async_stager"].close()
        return out

    monkeypatch.setattr(dcp, "async_save", closing)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    ck = make_checkpointer("async", lambda n: None, lambda: dcp_state(model, opt), tmp_path,
                           Dist(0, 0, 1), torch.device("cpu"), {"adapters_only": False})
    for n in (1, 2):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        ck.save(n)
    ck.finish()
    info = load_checkpoint(model, opt, tmp_path / "model.dcp")
    assert info["step"] == 2
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
