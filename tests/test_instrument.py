import pytest

from wattlife import markers
from wattlife.contracts import read_events
from wattlife.instrument import WattlifeCallback, marked_batches, train_step


def test_plain_loop_helpers_mark_each_phase(tmp_path):
    import torch

    markers.configure(tmp_path / "e.csv")
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(5)]
    for batch in marked_batches(data):
        train_step(model, batch, torch.nn.functional.cross_entropy, opt, device="cpu")
    markers.reset()
    ev = read_events(tmp_path / "e.csv")
    counts = ev["phase"].value_counts().to_dict()
    assert counts["data_load"] == 6  # five batches and the final StopIteration wait
    for name in ("step", "h2d", "forward", "backward", "optimizer"):
        assert counts[name] == 5
    assert set(ev.loc[ev["phase"] == "step", "items"]) == {8.0}


@pytest.mark.slow
def test_trainer_callback_marks_steps_forward_backward_optimizer(tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    markers.configure(tmp_path / "e.csv")
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64,
                                       n_positions=16))
    data = [{"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))}
            for _ in range(12)]
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                             max_steps=3, report_to=[], save_strategy="no", use_cpu=True,
                             logging_strategy="no", disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data,
            callbacks=[WattlifeCallback(items_per_step=64)]).train()
    markers.reset()
    ev = read_events(tmp_path / "e.csv")
    counts = ev["phase"].value_counts().to_dict()
    assert counts["step"] == 3 and counts["forward"] == 3 and counts["optimizer"] == 3
    assert counts["backward"] == 3
    from wattlife.attribution import phase_tree

    phase_tree(ev)  # properly nested
