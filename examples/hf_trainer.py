"""A Hugging Face `Trainer` with wattlife's phase markers: a tiny BERT classifier built from a
config (no downloads), trained on random tokens.

    wattlife run -- python examples/hf_trainer.py [--steps 20] [--batch 16]

`PhaseMarks` (a `TrainerCallback`) marks each optimizer step as `step(items=batch)` and the
optimizer's own phase; `MarkedTrainer` marks the forward (`compute_loss`) and the backward
(`accelerator.backward`). Energy per item is per sequence here. Without `wattlife run` the
markers do nothing.
"""

import argparse
import tempfile

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from wattlife import markers
from wattlife.markers import phase


class PhaseMarks(TrainerCallback):
    """One `step` per optimizer step (with its items), and the optimizer's phase inside it."""

    def __init__(self, items_per_step: int) -> None:
        self.items, self.step_token, self.opt_token = items_per_step, None, None

    def on_step_begin(self, args, state, control, **kw):
        self.step_token = markers.begin("step", items=self.items)

    def on_pre_optimizer_step(self, args, state, control, **kw):
        self.opt_token = markers.begin("optimizer")

    def on_optimizer_step(self, args, state, control, **kw):
        markers.end(self.opt_token)

    def on_step_end(self, args, state, control, **kw):
        markers.end(self.step_token)


class MarkedTrainer(Trainer):
    """The forward and the backward of each step as phases."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        backward = self.accelerator.backward

        def marked_backward(loss, **kw):
            with phase("backward"):
                return backward(loss, **kw)

        self.accelerator.backward = marked_backward

    def compute_loss(self, model, inputs, *args, **kwargs):
        with phase("forward"):
            return super().compute_loss(model, inputs, *args, **kwargs)


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq_len: int = 32, vocab: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    a = ap.parse_args()
    with phase("model_load"):
        cfg = BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=128, num_labels=2)
        model = BertForSequenceClassification(cfg)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=a.steps, report_to=[],
                                 per_device_train_batch_size=a.batch, save_strategy="no",
                                 logging_strategy="no", use_cpu=not torch.cuda.is_available(),
                                 dataloader_num_workers=0, disable_tqdm=True)
        trainer = MarkedTrainer(model=model, args=args,
                                train_dataset=RandomTokens(a.steps * a.batch),
                                callbacks=[PhaseMarks(a.batch)])
        result = trainer.train()
    print(f"train loss {result.training_loss:.3f}")


if __name__ == "__main__":
    main()
