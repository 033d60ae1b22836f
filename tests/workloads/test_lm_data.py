"""The causal-LM workload's tokenizer under several ranks (workloads/lm_data.py): rank 0 trains
the byte-level BPE while the others wait at a barrier, every rank enters that barrier whatever its
cache held, the file appears in one rename, and a rank that does not share rank 0's folder trains
the same tokenizer itself."""

import pytest

from wattlife.workloads import lm_data
from wattlife.workloads.datagen import make_text_corpus
from wattlife.workloads.dist import Dist

REAL_TRAIN = lm_data._train_bpe


@pytest.fixture
def trained(monkeypatch) -> list:
    """The paths `_train_bpe` trained a tokenizer into (it still trains)."""
    paths: list = []
    monkeypatch.setattr(lm_data, "_train_bpe",
                        lambda f, v, p: (paths.append(p), REAL_TRAIN(f, v, p))[1])
    return paths


def test_rank_0_trains_the_tokenizer_and_the_others_load_its_file(tmp_path, monkeypatch,
                                                                  trained):
    make_text_corpus(tmp_path / "text", n_words=3_000)
    train, cache = tmp_path / "text" / "train.txt", tmp_path / "tok"
    barriers = []

    def rank_0_meanwhile(d):  # rank 0 trains and saves while rank 1 waits here
        barriers.append(d.rank)
        if d.rank == 1:
            REAL_TRAIN(train, 300, cache / "tokenizer.json")

    monkeypatch.setattr(lm_data, "barrier", rank_0_meanwhile)
    tok1 = lm_data.load_tokenizer(None, train, 300, cache, Dist(1, 1, 2))
    assert trained == [] and barriers == [1]
    tok0 = lm_data.load_tokenizer(None, train, 300, cache, Dist(0, 0, 2))  # cached: no training
    assert trained == [] and barriers == [1, 0]
    assert tok0.get_vocab() == tok1.get_vocab() and len(tok1) == 300

    other = tmp_path / "node-local"  # a folder rank 0 does not write to
    monkeypatch.setattr(lm_data, "barrier", lambda d: barriers.append(d.rank))
    tok3 = lm_data.load_tokenizer(None, train, 300, other, Dist(3, 1, 4))
    assert trained == [other / "tokenizer.json"] and barriers[-1] == 3
    assert tok3.get_vocab() == tok1.get_vocab()  # the same corpus gives the same BPE
    assert [p.name for p in other.iterdir()] == ["tokenizer.json"]  # no temporary file left


def test_a_single_process_trains_once_and_then_reads_its_cache(tmp_path, trained):
    make_text_corpus(tmp_path / "text", n_words=3_000)
    train, cache = tmp_path / "text" / "train.txt", tmp_path / "tok"
    first = lm_data.load_tokenizer(None, train, 300, cache)
    second = lm_data.load_tokenizer(None, train, 300, cache)
    assert trained == [cache / "tokenizer.json"] and first.get_vocab() == second.get_vocab()
