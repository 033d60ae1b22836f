"""What the attribution's rank tests set up (their fixtures call these): every rank's tree built
window by window and spilled (`streamed_trees`), a file of several ranks split in small chunks
(`split_files`)."""

from __future__ import annotations

import pytest


def streamed_trees(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every rank's tree built window by window and spilled (`RankEvents._streamed`), in
    windows, sort runs and blocks of a few rows; the phases of each tree so built."""
    from wattlife.attribution import rank_events
    from wattlife.attribution.tree_spill import SpilledTree

    built: list[int] = []
    real = SpilledTree.build.__func__

    def counted(cls, windows, spill_dir=None):
        tree = real(cls, windows, spill_dir)
        built.append(tree.n_phases)
        return tree

    monkeypatch.setattr(rank_events, "STREAM_ROWS", 0)
    monkeypatch.setattr(rank_events, "STREAM_WINDOW_ROWS", 23)
    monkeypatch.setattr(rank_events, "STREAM_SORT", {"run_rows": 97, "block_rows": 13})
    monkeypatch.setattr(SpilledTree, "build", classmethod(counted))
    return built


def split_files(monkeypatch: pytest.MonkeyPatch) -> list:
    """A file of several ranks split in chunks of 2 kB (`rank_split.SPLIT_BYTES`), a piece at
    most every 50 rows of a rank or 120 held; the folders of the parts made."""
    from wattlife.attribution import rank_split

    folders = []
    real = rank_split.RankParts.__init__

    def made(self, *a, **k):
        real(self, *a, **k)
        folders.append(self.folder)

    monkeypatch.setattr(rank_split, "SPLIT_BYTES", 2048)
    monkeypatch.setattr(rank_split, "PIECE_ROWS", 50)  # many pieces a rank
    monkeypatch.setattr(rank_split, "HOLD_ROWS", 120)
    monkeypatch.setattr(rank_split.RankParts, "__init__", made)
    return folders
