"""Qwen3 causal language model on a WikiText-style corpus, every lifecycle phase marked.

transformers `Qwen3ForCausalLM` from a config (`config/models/<name>.json` or a path): pretrained
weights from `pretrained` when that folder exists, random init otherwise. Tokenizer from the
pretrained folder, else a byte-level BPE trained here with `tokenizers` on the training split (no
hub needed). Text is tokenised once, concatenated with EOS and packed into `seq_len + 1` blocks.
bf16 parameters, fused AdamW (on GPU), SDPA attention. Under torchrun with `fsdp: true` the model is
sharded (FSDP full shard, one unit per decoder layer) and, with `activation_checkpointing`, the
decoder layers recompute their activations; otherwise DDP. `grad_sync: explicit` all-reduces
gradients after backward as its own phase (DDP only; FSDP's reduce-scatter stays inside backward).

MFU = achieved model FLOP/s / peak: FLOPs per token = 6 N (N = non-embedding parameters) +
12 L d s (attention scores, L layers, d hidden size, s sequence length), the usual accounting;
peak bf16 dense per GPU from `peak_tflops` or the GPU's name (H100/H200 989, A100 312 TFLOP/s).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..markers import phase, step
from .common import backward_and_step, barrier, checkpoint_dir, start_cell

MODELS_DIR = Path(__file__).resolve().parents[3] / "config" / "models"
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}


def model_config(name_or_path: str):
    from transformers import Qwen3Config

    p = Path(name_or_path)
    if not p.exists():
        p = MODELS_DIR / (name_or_path if name_or_path.endswith(".json") else name_or_path + ".json")
    if not p.exists():
        raise FileNotFoundError(f"model config {name_or_path!r} not found (a path, or a name under "
                                f"{MODELS_DIR}: {sorted(x.stem for x in MODELS_DIR.glob('*.json'))})")
    d = {k: v for k, v in json.loads(p.read_text()).items() if not k.startswith("_")}
    return Qwen3Config(**d)


def load_tokenizer(pretrained: Path | None, train_file: Path, vocab_size: int, cache_dir: Path):
    """The pretrained folder's tokenizer, or a byte-level BPE trained on the corpus (cached)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if pretrained is not None and (pretrained / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(pretrained))
    cached = cache_dir / "tokenizer.json"
    if not cached.exists():
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train([str(train_file)], trainer)
        cache_dir.mkdir(parents=True, exist_ok=True)
        tok.save(str(cached))
    return PreTrainedTokenizerFast(tokenizer_file=str(cached), eos_token="<|endoftext|>")


def pack(tokenizer, text_file: Path, seq_len: int):
    """Token ids of the whole file, EOS after each line, packed as (n_blocks, seq_len)."""
    import torch

    lines = [ln for ln in text_file.read_text().splitlines() if ln.strip()]
    ids: list[int] = []
    eos = tokenizer.eos_token_id
    for chunk in range(0, len(lines), 1000):
        for row in tokenizer(lines[chunk:chunk + 1000], add_special_tokens=False)["input_ids"]:
            ids.extend(row)
            ids.append(eos)
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"{text_file}: {len(ids)} tokens, fewer than one block of {seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


def flops_per_token(cfg, n_params_non_embedding: int, seq_len: int) -> float:
    return 6.0 * n_params_non_embedding + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * seq_len


def peak_flops(device, w: dict[str, Any]) -> float | None:
    if w.get("peak_tflops"):
        return float(w["peak_tflops"]) * 1e12
    if device.type != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    for key, tf in PEAK_TFLOPS.items():
        if key in name:
            return tf * 1e12
    return None


def train_causal_lm(w: dict[str, Any], data_root: Path, storage: str, local_root: Path,
                    checkpoint: bool, ckpt_root: Path, workdir: Path) -> int:
    import torch

    dist, device, summary, root = start_cell(w, data_root, storage, local_root, workdir)
    train_file, val_file = root / "train.txt", root / "validation.txt"
    if not train_file.exists():
        raise FileNotFoundError(f"{train_file} does not exist (a WikiText-style folder has "
                                "train.txt and validation.txt; `wattlife gen-text` makes one)")
    seq = int(w.get("seq_len", 2048))
    bf16 = w.get("precision", "bf16") == "bf16"
    pretrained = Path(w["pretrained"]) if w.get("pretrained") else None

    cfg = model_config(w.get("model_config", "qwen3-tiny"))
    with phase("tokenize"):  # load (or train) the tokenizer, then tokenise and pack the corpus
        tok = load_tokenizer(pretrained if pretrained and pretrained.exists() else None, train_file,
                             min(cfg.vocab_size, int(w.get("tokenizer_vocab", 8192))),
                             Path(workdir) / "tokenizer")
        blocks = pack(tok, train_file, seq)
        val_blocks = pack(tok, val_file, seq) if val_file.exists() else blocks[:2]

    with phase("model_load"):
        cfg.vocab_size = max(cfg.vocab_size, len(tok))
        cfg.use_cache = False
        from transformers import Qwen3ForCausalLM

        dtype = torch.bfloat16 if bf16 else torch.float32
        if pretrained is not None and (pretrained / "config.json").exists():
            model = Qwen3ForCausalLM.from_pretrained(str(pretrained), torch_dtype=dtype,
                                                     attn_implementation="sdpa")
            source = f"pretrained:{pretrained}"
        else:
            cfg._attn_implementation = "sdpa"
            with torch.device(device):
                model = Qwen3ForCausalLM(cfg).to(dtype)
            source = "random-init"
        n_total = sum(p.numel() for p in model.parameters())
        n_embed = model.get_input_embeddings().weight.numel()
        if w.get("activation_checkpointing"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model = model.to(device)
        fsdp = dist.world > 1 and w.get("fsdp", False)
        if fsdp:
            import functools

            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
            from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

            model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                         auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                            transformer_layer_cls={Qwen3DecoderLayer}),
                         mixed_precision=MixedPrecision(param_dtype=dtype, reduce_dtype=dtype),
                         device_id=device if device.type == "cuda" else None, use_orig_params=True)
        elif dist.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        if w.get("compile"):
            model = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=w.get("lr", 3e-4), weight_decay=0.1,
                                fused=device.type == "cuda")

    sampler = None
    if dist.world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(blocks, dist.world, dist.rank, shuffle=True)
    bs = int(w["batch_size"])
    if len(blocks) < bs * dist.world:
        raise ValueError(f"only {len(blocks)} packed blocks of {seq} tokens for batch size {bs} "
                         f"x {dist.world} ranks: use more data or a shorter seq_len")
    loader = torch.utils.data.DataLoader(blocks, batch_size=bs, shuffle=sampler is None,
                                         sampler=sampler, drop_last=True,
                                         pin_memory=device.type == "cuda",
                                         num_workers=int(w.get("workers", 0)))
    explicit_sync = dist.world > 1 and not fsdp and w.get("grad_sync", "overlapped") == "explicit"
    ckpt_every, val_every = int(w.get("ckpt_every", 0)), int(w.get("val_every", 0))
    ckpt_dir = checkpoint_dir(ckpt_root, workdir)
    steps, epoch, it = int(w["steps"]), 0, iter(loader)
    fpt = flops_per_token(cfg, n_total - n_embed, seq)
    peak = peak_flops(device, w)
    model.train()
    from tqdm import tqdm

    bar = tqdm(total=steps, desc="train", unit="step", disable=dist.rank != 0, mininterval=2)
    summary.restart_clock()
    for i in range(steps):
        with step(items=bs * seq):
            with phase("data_load"):
                try:
                    batch = next(it)
                except StopIteration:
                    epoch += 1
                    if sampler is not None:
                        sampler.set_epoch(epoch)
                    it = iter(loader)
                    batch = next(it)
            with phase("h2d"):
                batch = batch.to(device, non_blocking=True)
            with phase("forward"):
                loss = model(input_ids=batch, labels=batch).loss  # labels shifted inside
            backward_and_step(model, loss, opt, explicit_sync, dist.world)
        summary.add_step(bs * seq)
        bar.update(1)
        if val_every and (i + 1) % val_every == 0:
            with phase("validation"):
                summary.val_acc = _val_loss(model, val_blocks, bs, device, w.get("val_steps", 2))
            model.train()
        if checkpoint and ckpt_every and (i + 1) % ckpt_every == 0:
            with phase("checkpoint"):
                _save(model, opt, ckpt_dir, i + 1, dist, fsdp)
                summary.checkpoints.append(str(ckpt_dir / "model.pt"))
    bar.close()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    summary.last_loss = float(loss.detach())
    thr = summary.throughput()
    extra = {"model_source": source, "parameters": n_total, "non_embedding_parameters": n_total - n_embed,
             "flops_per_token": fpt, "seq_len": seq, "tokenizer_vocab": len(tok),
             "mfu": (thr * fpt / (peak * dist.world)) if thr and peak else None,
             "peak_flops_per_gpu": peak, "val_metric": "mean cross-entropy loss",
             "epochs_started": epoch + 1}
    summary.write(unit="tokens", extra=extra)
    return 0


def _val_loss(model, blocks, bs: int, device, max_steps: int) -> float:
    import torch

    model.eval()
    losses = []
    with torch.no_grad():
        for j in range(0, min(len(blocks), bs * max(1, max_steps)), bs):
            b = blocks[j:j + bs].to(device)
            losses.append(float(model(input_ids=b, labels=b).loss))
    return sum(losses) / max(len(losses), 1)


def _save(model, opt, ckpt_dir: Path, step_no: int, dist, fsdp: bool) -> None:
    """Model and optimizer state; FSDP gathers a full state dict to rank 0."""
    import torch

    if fsdp:
        from torch.distributed.fsdp import FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                  FullStateDictConfig(offload_to_cpu=True, rank0_only=True)):
            state = {"model": model.state_dict(),
                     "optimizer": FSDP.optim_state_dict(model, opt), "step": step_no}
    else:
        inner = model.module if hasattr(model, "module") else model
        inner = getattr(inner, "_orig_mod", inner)
        state = {"model": inner.state_dict(), "optimizer": opt.state_dict(), "step": step_no}
    if dist.rank == 0:
        tmp = ckpt_dir / "model.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, ckpt_dir / "model.pt")
    barrier(dist)
