"""The causal-LM workload's data: the tokenizer (the pretrained folder's, or a byte-level BPE
trained on the corpus and cached), the corpus tokenised and packed into `seq_len` blocks (EOS
after each line), and the shuffled training loader (a DistributedSampler under torchrun)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import CausalLMSpec
from ..contracts import atomic_path
from ..errors import InputError
from .dist import Dist, barrier


def load_tokenizer(pretrained: Path | None, train_file: Path, vocab_size: int, cache_dir: Path,
                   dist: Dist | None = None) -> Any:
    """The pretrained folder's tokenizer, or a byte-level BPE trained on the corpus (cached in
    `cache_dir`). Under several ranks rank 0 trains it and the others wait, then load its file; a
    rank that does not share rank 0's folder trains its own (the same corpus gives the same BPE)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if pretrained is not None and (pretrained / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(pretrained))
    cached = cache_dir / "tokenizer.json"
    dist = dist or Dist()
    if dist.rank == 0 and not cached.exists():
        _train_bpe(train_file, vocab_size, cached)
    barrier(dist)  # every rank, whatever it found: a barrier only some entered would hang
    if not cached.exists():
        _train_bpe(train_file, vocab_size, cached)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_file=str(cached), eos_token="<|endoftext|>")


def _train_bpe(train_file: Path, vocab_size: int, path: Path) -> None:
    """Train a byte-level BPE of `vocab_size` on `train_file` and save it to `path` in one rename
    (a rank never reads a file another is still writing)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(train_file)], trainer)
    with atomic_path(path) as tmp:
        tok.save(str(tmp))


def pack(tokenizer: Any, text_file: Path, seq_len: int) -> Any:
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
        raise InputError(f"{text_file}: {len(ids)} tokens, fewer than one block of {seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


def corpus_files(root: Path) -> tuple[Path, Path]:
    """The staged WikiText-style folder's training and validation text (the first must exist)."""
    train_file, val_file = root / "train.txt", root / "validation.txt"
    if not train_file.exists():
        raise FileNotFoundError(f"{train_file} does not exist (a WikiText-style folder has "
                                "train.txt and validation.txt; `wattlife gen-text` makes one)")
    return train_file, val_file


def tokenize_corpus(spec: CausalLMSpec, cfg: Any, pretrained: Path | None, train_file: Path,
                    val_file: Path, workdir: Path, dist: Dist | None = None
                    ) -> tuple[Any, Any, Any]:
    """The `tokenize` phase's work: load (or train) the tokenizer, then tokenise and pack the
    training split and the validation split (the first two training blocks without one)."""
    tok = load_tokenizer(pretrained if pretrained and pretrained.exists() else None, train_file,
                         min(cfg.vocab_size, spec.tokenizer_vocab),
                         Path(workdir) / "tokenizer", dist)
    blocks = pack(tok, train_file, spec.seq_len)
    val_blocks = pack(tok, val_file, spec.seq_len) if val_file.exists() else blocks[:2]
    return tok, blocks, val_blocks


def make_loader(blocks: Any, spec: CausalLMSpec, dist: Dist, device: Any) -> tuple[Any, Any]:
    """The training batches: shuffled packed blocks (a DistributedSampler under torchrun)."""
    import torch

    bs = spec.batch_size
    if len(blocks) < bs * dist.world:
        raise InputError(f"only {len(blocks)} packed blocks of {blocks.shape[1]} tokens for batch "
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
