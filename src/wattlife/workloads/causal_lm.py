"""Causal language model on a WikiText-style corpus, every lifecycle phase marked.

Any Hugging Face causal-LM config (`config/models/<name>.json` or a path; `model_type` picks the
architecture: Qwen3, Qwen3-MoE, Llama, Mistral, gpt-oss, DeepSeek-V2, ...): pretrained weights from
`pretrained` when that folder exists, random init otherwise. Tokenizer from the pretrained folder,
else a byte-level BPE trained here with `tokenizers` on the training split (no hub needed). Text is
tokenised once, concatenated with EOS and packed into `seq_len` blocks. bf16 parameters, fused
AdamW (on GPU), SDPA attention where the architecture has it.

Vocabulary: a randomly initialised model's embedding and output layer are sized to the tokenizer it
trains with (`len(tokenizer)` rounded up to a multiple of `vocab_multiple`, default 64, for the
matrix units), not to the architecture's published vocabulary (Qwen3's 151,936): logits over ids
that never occur would be matmuls counted in MFU for nothing. A pretrained model keeps its own
vocabulary (grown if the tokenizer is larger). The summary gives `vocab_size` and
`tokenizer_vocab`.

MoE experts: `experts_implementation` picks transformers' experts backend (`auto`: `grouped_mm` on
CUDA — one grouped GEMM per projection over all experts — and `eager`, the per-expert loop, on
CPU; or `eager`, `grouped_mm`, `batched_mm` by name); the summary records the backend the model
actually uses (`experts_impl`, `none` for dense models). `compile: true` wraps the model in
`torch.compile` (mode `compile_mode`, default the default; the first training step compiles: its
forward and backward calls are marked `compile`, nested inside that step's `forward` and
`backward`, so those keep only compiled work, and the timed schedule — `duration_s`, `eval_at_s`,
`ckpt_at_s` — counts from the end of that step, so a fixed-length run trains as long whatever the
compile time; evaluation runs the uncompiled module, which shares the weights, rather than
recompiling for eval mode); the summary records it.

Task `pretrain` trains every parameter; `lora` freezes the base model and trains PEFT LoRA adapters
(rank `lora_rank`, default 32) on the attention projections (q/k/v/o, MLA's q_a/q_b/kv_a/kv_b), the
dense MLP projections (gate/up/down) where the model has dense MLPs, and — `lora_experts`, default
true, where the installed PEFT has `target_parameters` — the routed experts' fused weights
(`experts.gate_up_proj`, `experts.down_proj`: one rank-r adapter per expert). The router and the
embeddings carry none. The summary lists them (`lora_target_modules`, `lora_target_parameters`).
Its checkpoints hold only the adapters and their optimizer state. Under torchrun with
`fsdp: true` the model is sharded (FSDP2 `fully_shard`, one unit per decoder layer) and, with
`activation_checkpointing`, the decoder layers recompute their activations; otherwise DDP.
`grad_sync: explicit` all-reduces gradients after backward as its own phase (DDP only; FSDP's
reduce-scatter stays inside backward).

MFU = achieved model FLOP/s / peak. Per token: 2 N_active (forward) + 2 N_active (backward, input
gradients) + 2 N_trained (backward, weight gradients) + 12 L s H_attn (attention scores and values,
forward and backward), where N_active counts the matmul parameters a token goes through (the output
projection at the model's vocabulary size included, the input embedding lookup not; for MoE only
the routed top-k experts), and
N_trained the active ones that are trained (all of them for `pretrain`: the usual 6 N; the adapters
for `lora`). Peak bf16 dense per GPU from `peak_tflops` or the GPU's name (H100/H200 989, A100 312
TFLOP/s). `mfu` uses the `step` throughput (training steps only); `mfu_wall` the `wall` one.
Attention is counted in full (not halved for causal masking); `mfu_causal` counts it halved
(`attention_flops_per_token` is in the summary).

Phases besides the step's: `setup` (importing transformers, reading the model config), `tokenize`
(load or train the tokenizer, tokenise and pack the corpus: the dataset's preparation),
`model_load` (construction, LoRA wrapping, the move to the device, sharding, compile wrapping,
optimizer and data loader set-up) and `finalize` (the final device synchronisation and the
summary), so that no second of the cell is `unattributed`.

The pieces: `workloads.lm_model` (config, build, wrap, compile; LoRA adapters; parameter counts,
FLOPs, MFU), `workloads.lm_data` (tokenizer, packing, loader); this module drives the cell (the
step, evaluation, the summary).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from ..config import CausalLMSpec
from ..contracts import COMPILE, FINALIZE, FORWARD, H2D, MODEL_LOAD, SETUP, TOKENIZE
from ..markers import phase
from .cell import checkpoint_dir, start_cell
from .checkpointing import dcp_state, make_checkpointer, save_checkpoint
from .dist import Dist
from .lm_data import corpus_files, make_loader, tokenize_corpus
from .lm_model import (
    BuiltModel,
    attention_flops_per_token,
    build_model,
    flops_per_token,
    mfu_fields,
    model_config_for,
    model_vocab_size,
    peak_flops,
)
from .summary import Summary
from .training_loop import Batches, LoopResult, Schedule, backward_and_step, run_training_loop


def train_causal_lm(spec: CausalLMSpec, data_root: Path, storage: str, local_root: Path,
                    checkpoint: str, ckpt_root: Path, workdir: Path) -> int:
    """Train workload `spec` (a config's `workloads.<name>`) in one matrix cell (`checkpoint`: a
    `checkpointing.CHECKPOINT_MODES` mode); writes work/summary.json."""
    import torch

    dist, device, summary, root = start_cell(spec, data_root, storage, local_root, workdir)
    train_file, val_file = corpus_files(root)
    pretrained = Path(spec.pretrained) if spec.pretrained else None
    with phase(SETUP):  # importing transformers alone takes seconds
        cfg, experts = model_config_for(spec, device)
    with phase(TOKENIZE):  # load (or train) the tokenizer, then tokenise and pack the corpus
        tok, blocks, val_blocks = tokenize_corpus(spec, cfg, pretrained, train_file, val_file,
                                                  workdir, dist)
    with phase(MODEL_LOAD):
        built = build_model(spec, cfg, experts, tok, pretrained, device, dist)
        opt = torch.optim.AdamW([p for p in built.model.parameters() if p.requires_grad],
                                lr=spec.lr,
                                weight_decay=0.1 if spec.task == "pretrain" else 0.0,
                                fused=device.type == "cuda")
        loader, sampler = make_loader(blocks, spec, dist, device)
    summary.train_items = len(blocks) * spec.seq_len
    ckpt_dir = checkpoint_dir(ckpt_root, workdir)
    batches = Batches(loader, sampler)
    seq, cfg = spec.seq_len, built.config
    fpt, attn = flops_per_token(cfg, built.counts, seq), attention_flops_per_token(cfg, seq)
    peak = peak_flops(device, spec)
    result = _train(spec, built, opt, batches, val_blocks, summary, dist, device, checkpoint,
                    ckpt_dir)
    with phase(FINALIZE):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        summary.last_loss = float(result.last_loss.detach())
        thr, thr_wall = summary.throughput(), summary.throughput_wall()
        extra = {"model_source": built.source, "model_type": cfg.model_type, "task": spec.task,
                 **built.counts, "flops_per_token": fpt, "seq_len": seq,
                 "tokenizer_vocab": len(tok), "vocab_size": int(model_vocab_size(built.model)),
                 "experts_impl": built.experts_used or "none", "compile": spec.compile,
                 "compile_mode": spec.compile_mode or ("default" if spec.compile else None),
                 **built.lora_info, **mfu_fields(thr, thr_wall, fpt, attn, peak, dist.world),
                 "peak_flops_per_gpu": peak, "val_metric": "mean cross-entropy loss",
                 "epochs_started": result.epochs_started}
        summary.write(unit="tokens", extra=extra)
    return 0


def _train(spec: CausalLMSpec, built: BuiltModel, opt: Any, batches: Batches, val_blocks: Any,
           summary: Summary, dist: Dist, device: Any, checkpoint: str,
           ckpt_dir: Path) -> LoopResult:
    """The training loop of the cell: its step, its evaluation, its checkpointer (every rank
    saves its shards under FSDP, or its share, deduplicated) and its schedule."""
    model, fsdp, lora = built.model, built.fsdp, spec.task == "lora"
    explicit_sync = dist.world > 1 and not fsdp and spec.grad_sync == "explicit"
    items = spec.batch_size * spec.seq_len

    def validate() -> float:
        # the uncompiled module: evaluation (eval mode, no grad) would recompile the whole model
        # (43-58 s for Qwen3-1.7B on the H200) for a few forward passes
        return _val_loss(getattr(model, "_orig_mod", model), val_blocks, spec.batch_size, device,
                         spec.val_steps)

    # the PFI study's protocol: a fixed run length, one evaluation and one checkpoint at set times
    schedule = Schedule(steps=spec.steps, val_every=spec.val_every, ckpt_every=spec.ckpt_every,
                        duration_s=spec.duration_s, eval_at_s=spec.eval_at_s,
                        ckpt_at_s=spec.ckpt_at_s, clock_after_first_step=spec.compile)
    ckpt = make_checkpointer(
        checkpoint, lambda n: save_checkpoint(model, opt, ckpt_dir, n, dist, fsdp, lora),
        lambda: dcp_state(model, opt, lora), ckpt_dir, dist, device, {"adapters_only": lora})
    train_step = _step_function(model, opt, batches, device, items, explicit_sync, dist.world,
                                bool(spec.compile))
    return run_training_loop(
        train_step, model=model, schedule=schedule, batches=batches, items_per_step=items,
        summary=summary, dist=dist, device=device, validate=validate, checkpointer=ckpt)


def _step_function(model: Any, opt: Any, batches: Batches, device: Any, items: float,
                   explicit_sync: bool, world: int,
                   compiled: bool) -> Callable[[], tuple[float, Any]]:
    """One training step: batch (`data_load`), `h2d`, `forward` (labels shifted inside the
    model), then the marked backward / grad_sync / optimizer tail. A compiled model's first
    forward and backward compile: marked `compile` inside them."""
    uncompiled = [compiled]

    def train_step() -> tuple[float, Any]:
        batch = batches.next()
        with phase(H2D):
            batch = batch.to(device, non_blocking=True)
        first, uncompiled[0] = uncompiled[0], False
        with phase(FORWARD), phase(COMPILE) if first else nullcontext():
            loss = model(input_ids=batch, labels=batch).loss  # labels shifted inside
        backward_and_step(model, loss, opt, explicit_sync, world, compiling=first)
        return items, loss

    return train_step


def _val_loss(model: Any, blocks: Any, bs: int, device: Any, max_steps: int) -> float:
    """Mean cross-entropy over the first `max_steps` validation batches (at least one)."""
    import torch

    model.eval()
    losses = []
    with torch.no_grad():
        for j in range(0, min(len(blocks), bs * max(1, max_steps)), bs):
            b = blocks[j:j + bs].to(device)
            losses.append(float(model(input_ids=b, labels=b).loss))
    return sum(losses) / max(len(losses), 1)
