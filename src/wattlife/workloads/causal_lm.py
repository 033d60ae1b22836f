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
`backward`, so those keep only steady work, and the timed schedule — `duration_s`, `eval_at_s`,
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
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import CausalLMSpec, resource_path
from ..contracts import COMPILE
from ..markers import phase
from .cell import checkpoint_dir, start_cell
from .checkpointing import dcp_state, make_checkpointer, save_checkpoint
from .dist import Dist
from .training_loop import Batches, Schedule, backward_and_step, run_training_loop

MODELS_DIR = resource_path("models")
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}


def model_config(name_or_path: str):
    """A transformers config from a shipped name or a config.json path (its `model_type`
    decides)."""
    from transformers import AutoConfig

    p = Path(name_or_path)
    if not p.exists():
        name = name_or_path if name_or_path.endswith(".json") else name_or_path + ".json"
        p = MODELS_DIR / name
    if not p.exists():
        shipped = sorted(x.stem for x in MODELS_DIR.glob("*.json"))
        raise FileNotFoundError(f"model config {name_or_path!r} not found (a path, or a name under "
                                f"{MODELS_DIR}: {shipped})")
    d = {k: v for k, v in json.loads(p.read_text()).items() if not k.startswith("_")}
    if "model_type" not in d:
        raise ValueError(f"{p}: a model config needs 'model_type' (e.g. qwen3, qwen3_moe, llama)")
    return AutoConfig.for_model(d.pop("model_type"), **d)


EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k_experts")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
# the routed experts' fused 3-D weights in transformers' MoE models (PEFT `target_parameters`)
EXPERT_PARAMETERS = ("gate_up_proj", "down_proj")
EXPERTS_IMPLEMENTATIONS = ("auto", "eager", "grouped_mm", "batched_mm")


def _first(cfg, keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = getattr(cfg, k, None)
        if v:
            return int(v)
    return None


def is_moe(cfg) -> bool:
    """Whether the config routes tokens to experts."""
    return bool(_first(cfg, EXPERT_COUNT_KEYS))


def experts_implementation(spec: CausalLMSpec, device) -> str:
    """The transformers experts backend the workload asks for: `experts_implementation` from the
    config, `auto` = `grouped_mm` on CUDA, `eager` elsewhere (the CPU path the tests run)."""
    want = spec.experts_implementation
    if want not in EXPERTS_IMPLEMENTATIONS:
        raise ValueError(f"experts_implementation: expected one of "
                         f"{list(EXPERTS_IMPLEMENTATIONS)}, got {want!r}")
    if want == "auto":
        return "grouped_mm" if getattr(device, "type", str(device)) == "cuda" else "eager"
    return want


def _has_experts_backends() -> bool:
    """Whether the installed transformers has selectable experts backends (5.x)."""
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS  # noqa: F401
    except ImportError:
        return False
    return True


def model_vocab(tokenizer_len: int, multiple: int = 64) -> int:
    """The vocabulary a random-init model is built with: the tokenizer's, rounded up to
    `multiple`."""
    if multiple < 1:
        raise ValueError(f"vocab_multiple: expected an integer >= 1, got {multiple}")
    return -(-int(tokenizer_len) // multiple) * multiple


def model_vocab_size(model) -> int:
    """Rows of the model's input embedding (= columns of its output projection)."""
    return int(_base(model).get_input_embeddings().weight.shape[0])


def parameter_counts(model, cfg) -> dict[str, int]:
    """Total, trained, and active (per token) matmul parameters; see the module docstring.

    Routed experts live under `.experts.` in transformers' MoE models (shared experts under
    `shared_expert(s)`, which every token uses); a token uses top_k / n_experts of them."""
    n_experts, top_k = _first(cfg, EXPERT_COUNT_KEYS), _first(cfg, TOP_K_KEYS)
    frac = top_k / n_experts if n_experts and top_k else 1.0
    emb_in = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight is emb_in
    total = trained = 0
    active = trained_active = 0.0
    for name, prm in model.named_parameters():
        n = prm.numel()
        total += n
        trained += n if prm.requires_grad else 0
        if prm is emb_in and not tied:
            continue  # the input lookup is no matmul
        f = frac if ".experts." in f".{name}" else 1.0
        active += n * f
        trained_active += n * f if prm.requires_grad else 0
    return {"parameters": total, "trained_parameters": trained, "active_parameters": int(active),
            "trained_active_parameters": int(trained_active), "experts": n_experts or 0,
            "experts_per_token": top_k or 0}


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


def attention_flops_per_token(cfg, seq_len: int) -> float:
    """Scores and values, forward and backward, summed over layers (sliding-window layers see at
    most their window; MLA's query/key and value head sizes may differ)."""
    heads = cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    qk = ((getattr(cfg, "qk_nope_head_dim", 0) or 0) + (getattr(cfg, "qk_rope_head_dim", 0) or 0)
          or hd)
    v = getattr(cfg, "v_head_dim", None) or hd
    window = getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    s_eff = [min(seq_len, window) if (t == "sliding_attention" and window) else seq_len
             for t in types]
    return float(sum(6.0 * s * heads * (qk + v) for s in s_eff))


def flops_per_token(cfg, counts: dict[str, int], seq_len: int) -> float:
    """Model FLOPs per trained token (see the module docstring)."""
    return (4.0 * counts["active_parameters"] + 2.0 * counts["trained_active_parameters"]
            + attention_flops_per_token(cfg, seq_len))


def peak_flops(device, spec: CausalLMSpec) -> float | None:
    if spec.peak_tflops:
        return float(spec.peak_tflops) * 1e12
    if device.type != "cuda":
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    for key, tf in PEAK_TFLOPS.items():
        if key in name:
            return tf * 1e12
    return None


def train_causal_lm(spec: CausalLMSpec, data_root: Path, storage: str, local_root: Path,
                    checkpoint: str, ckpt_root: Path, workdir: Path) -> int:
    """Train workload `spec` (a config's `workloads.<name>`) in one matrix cell (`checkpoint`: a
    `checkpointing.CHECKPOINT_MODES` mode); writes work/summary.json."""
    import torch

    dist, device, summary, root = start_cell(spec, data_root, storage, local_root, workdir)
    train_file, val_file = root / "train.txt", root / "validation.txt"
    if not train_file.exists():
        raise FileNotFoundError(f"{train_file} does not exist (a WikiText-style folder has "
                                "train.txt and validation.txt; `wattlife gen-text` makes one)")
    seq = spec.seq_len
    pretrained = Path(spec.pretrained) if spec.pretrained else None

    with phase("setup"):  # importing transformers alone takes seconds
        cfg, experts = _model_config_for(spec, device)
    with phase("tokenize"):  # load (or train) the tokenizer, then tokenise and pack the corpus
        tok = load_tokenizer(pretrained if pretrained and pretrained.exists() else None, train_file,
                             min(cfg.vocab_size, spec.tokenizer_vocab),
                             Path(workdir) / "tokenizer")
        blocks = pack(tok, train_file, seq)
        val_blocks = pack(tok, val_file, seq) if val_file.exists() else blocks[:2]

    task = spec.task
    with phase("model_load"):
        built = _build_model(spec, cfg, experts, tok, pretrained, device, dist)
        model, cfg = built.model, built.config
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                lr=spec.lr,
                                weight_decay=0.1 if task == "pretrain" else 0.0,
                                fused=device.type == "cuda")
        loader, sampler = _loader(blocks, spec, dist, device)

    fsdp = built.fsdp
    explicit_sync = (dist.world > 1 and not fsdp
                     and spec.grad_sync == "explicit")
    items = spec.batch_size * seq
    summary.train_items = len(blocks) * seq
    ckpt_dir = checkpoint_dir(ckpt_root, workdir)
    batches = Batches(loader, sampler)
    fpt = flops_per_token(cfg, built.counts, seq)
    attn = attention_flops_per_token(cfg, seq)
    peak = peak_flops(device, spec)

    uncompiled = [bool(spec.compile)]  # the first call of a compiled model compiles

    def train_step() -> tuple[float, Any]:
        batch = batches.next()
        with phase("h2d"):
            batch = batch.to(device, non_blocking=True)
        first, uncompiled[0] = uncompiled[0], False
        with phase("forward"), phase(COMPILE) if first else nullcontext():
            loss = model(input_ids=batch, labels=batch).loss  # labels shifted inside
        backward_and_step(model, loss, opt, explicit_sync, dist.world, compiling=first)
        return items, loss

    def validate() -> float:
        # the uncompiled module: evaluation (eval mode, no grad) would recompile the whole model
        # (43-58 s for Qwen3-1.7B on the H200) for a few forward passes
        return _val_loss(getattr(model, "_orig_mod", model), val_blocks, spec.batch_size, device,
                         spec.val_steps)

    # the PFI study's protocol: a fixed run length, one evaluation and one checkpoint at set times
    schedule = Schedule(steps=spec.steps, val_every=spec.val_every, ckpt_every=spec.ckpt_every,
                        duration_s=spec.duration_s, eval_at_s=spec.eval_at_s,
                        ckpt_at_s=spec.ckpt_at_s, clock_after_first_step=spec.compile)
    lora = task == "lora"
    ckpt = make_checkpointer(  # every rank saves its shards (FSDP) or its share (deduplicated)
        checkpoint, lambda n: save_checkpoint(model, opt, ckpt_dir, n, dist, fsdp, lora),
        lambda: dcp_state(model, opt, lora), ckpt_dir, dist, device, {"adapters_only": lora})
    result = run_training_loop(
        train_step, model=model, schedule=schedule, batches=batches, items_per_step=items,
        summary=summary, dist=dist, device=device, validate=validate, checkpointer=ckpt)
    with phase("finalize"):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        summary.last_loss = float(result.last_loss.detach())
        thr, thr_wall = summary.throughput(), summary.throughput_wall()
        extra = {"model_source": built.source, "model_type": cfg.model_type, "task": task,
                 **built.counts, "flops_per_token": fpt, "seq_len": seq,
                 "tokenizer_vocab": len(tok),
                 "vocab_size": int(model_vocab_size(model)),
                 "experts_impl": built.experts_used or "none", "compile": spec.compile,
                 "compile_mode": spec.compile_mode or ("default" if spec.compile else None),
                 **built.lora_info,
                 "tflops_per_gpu": thr * fpt / dist.world / 1e12 if thr else None,
                 "mfu": (thr * fpt / (peak * dist.world)) if thr and peak else None,
                 "mfu_basis": "step",
                 "mfu_wall": (thr_wall * fpt / (peak * dist.world)) if thr_wall and peak else None,
                 "attention_flops_per_token": attn,
                 "mfu_causal": (thr * (fpt - attn / 2) / (peak * dist.world))
                 if thr and peak else None,
                 "peak_flops_per_gpu": peak, "val_metric": "mean cross-entropy loss",
                 "epochs_started": result.epochs_started}
        summary.write(unit="tokens", extra=extra)
    return 0


def _model_config_for(spec: CausalLMSpec, device: Any) -> tuple[Any, str | None]:
    """The workload's transformers config (`model_config` with `model_overrides` applied) and the
    experts backend to build it with (None: dense, or transformers < 5's per-expert loop only)."""
    cfg = model_config(spec.model_config)
    # e.g. fewer layers to fit one GPU
    for key, value in (spec.model_overrides or {}).items():
        if not hasattr(cfg, key):
            raise ValueError(f"model_overrides.{key}: {cfg.model_type} configs have no such field")
        setattr(cfg, key, value)
    experts = experts_implementation(spec, device) if is_moe(cfg) else None
    if experts and not _has_experts_backends():
        experts = None  # transformers < 5: the per-expert loop only (recorded as such)
    return cfg, experts


@dataclass
class _BuiltModel:
    model: Any  # wrapped as trained: PEFT, DDP / FSDP, compile
    config: Any  # the transformers model's own config (vocabulary as built)
    source: str  # `pretrained:<folder>` or `random-init`
    experts_used: str | None  # the experts backend the model runs (None: dense)
    lora_info: dict[str, Any]
    counts: dict[str, int]  # parameter_counts, before sharding
    fsdp: bool


def _build_model(spec: CausalLMSpec, cfg: Any, experts: str | None, tok: Any,
                 pretrained: Path | None, device: Any, dist: Dist) -> _BuiltModel:
    """Construct (or load) the model, add LoRA adapters, move it to the device, shard or wrap it
    for DDP, and compile it, as the workload says (the `model_load` phase's work)."""
    import torch

    cfg.use_cache = False
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if spec.precision == "bf16" else torch.float32
    backend = {"experts_implementation": experts} if experts else {}
    model: Any  # the transformers model, then wrapped (PEFT, DDP, compile)
    if pretrained is not None and (pretrained / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(str(pretrained), dtype=dtype,
                                                     attn_implementation=_attn(cfg), **backend)
        if len(tok) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tok))
        source = f"pretrained:{pretrained}"
    else:
        cfg.vocab_size = model_vocab(len(tok), spec.vocab_multiple)
        cfg._attn_implementation = _attn(cfg)
        if experts:
            cfg._experts_implementation = experts
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        source = "random-init"
    cfg = model.config
    experts_used = (getattr(cfg, "_experts_implementation", None) if experts
                    else "eager" if is_moe(cfg) else None)
    if spec.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora_info: dict[str, Any] = {}
    if spec.task == "lora":
        model, lora_info = _with_lora(model, spec)
    counts = parameter_counts(model, cfg)
    model = model.to(device)
    fsdp = dist.world > 1 and spec.fsdp
    if fsdp:  # FSDP2: one shard unit per decoder layer, then the root (CPU/Gloo too)
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        names = set(getattr(_base(model), "_no_split_modules", None) or [])
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)
        for layer in [m for m in model.modules() if type(m).__name__ in names]:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    elif dist.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if spec.compile:
        mode: dict[str, Any] = {"mode": spec.compile_mode} if spec.compile_mode else {}
        model = torch.compile(model, **mode)
    return _BuiltModel(model, cfg, source, experts_used, lora_info, counts, fsdp)


def _loader(blocks, spec: CausalLMSpec, dist, device):
    """The training batches: shuffled packed blocks (a DistributedSampler under torchrun)."""
    import torch

    bs = spec.batch_size
    if len(blocks) < bs * dist.world:
        raise ValueError(f"only {len(blocks)} packed blocks of {blocks.shape[1]} tokens for batch "
                         f"size {bs} x {dist.world} ranks: use more data or a shorter seq_len")
    sampler: Any = None
    if dist.world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(blocks, dist.world, dist.rank, shuffle=True)
    loader = torch.utils.data.DataLoader(blocks, batch_size=bs, shuffle=sampler is None,
                                         sampler=sampler, drop_last=True,
                                         pin_memory=device.type == "cuda",
                                         num_workers=spec.workers)
    return loader, sampler


def _val_loss(model, blocks, bs: int, device, max_steps: int) -> float:
    import torch

    model.eval()
    losses = []
    with torch.no_grad():
        for j in range(0, min(len(blocks), bs * max(1, max_steps)), bs):
            b = blocks[j:j + bs].to(device)
            losses.append(float(model(input_ids=b, labels=b).loss))
    return sum(losses) / max(len(losses), 1)


def _attn(cfg) -> str:
    """SDPA where the architecture supports it (gpt-oss's attention sinks need eager)."""
    return "eager" if cfg.model_type in ("gpt_oss",) else "sdpa"


def _base(model):
    """The transformers model under PEFT/DDP/compile wrappers."""
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def lora_plan(model, spec: CausalLMSpec,
              peft_has_target_parameters: bool) -> dict[str, list[str]]:
    """Which modules and parameters get LoRA adapters (see the module docstring): the attention
    and dense-MLP Linear layers the model has (`lora_targets` overrides), and the routed experts'
    fused weights when `lora_experts` (default true) and PEFT can target parameters."""
    import torch

    linear = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear)}
    modules = list(spec.lora_targets or [t for t in LORA_TARGETS if t in linear])
    params: list[str] = []
    if spec.lora_experts and peft_has_target_parameters:
        for n, m in model.named_modules():
            if n.endswith(".experts") or n == "experts":
                own = {pn for pn, p in m.named_parameters(recurse=False) if p.dim() == 3}
                params = [f"experts.{pn}" for pn in EXPERT_PARAMETERS if pn in own]
                break
    if not modules and not params:
        raise ValueError(f"{type(model).__name__}: none of the LoRA target modules {LORA_TARGETS} "
                         "exists; set workloads.<name>.lora_targets")
    return {"lora_target_modules": modules, "lora_target_parameters": params}


def _with_lora(model, spec: CausalLMSpec):
    """Freeze the base model; LoRA adapters as `lora_plan` says. Returns the PEFT model and what
    carries adapters (for the summary)."""
    import inspect

    from peft import LoraConfig, get_peft_model

    has_tp = "target_parameters" in inspect.signature(LoraConfig).parameters
    plan: dict[str, Any] = lora_plan(model, spec, has_tp)
    r = spec.lora_rank
    targets = plan["lora_target_parameters"]
    extra: dict[str, Any] = {"target_parameters": targets} if targets else {}
    lora = LoraConfig(r=r, lora_alpha=spec.lora_alpha, lora_dropout=0.0,
                      target_modules=plan["lora_target_modules"], task_type="CAUSAL_LM", **extra)
    peft_model = get_peft_model(model, lora)
    if not has_tp and spec.lora_experts and any(
            n.endswith(".experts") for n, _ in model.named_modules()):
        plan["lora_note"] = "installed PEFT has no target_parameters: the experts carry no adapters"
    return peft_model, {**plan, "lora_rank": r}
