"""The writers of the contract files: atomic (a temporary file beside the target, one rename),
never over an input."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ContractError

if TYPE_CHECKING:
    import pandas as pd


def refuse_overwrite(output: str | Path, inputs: list[str | Path]) -> None:
    """An output path that is one of the inputs would destroy raw data: refuse it."""
    out = Path(output).resolve()
    for i in inputs:
        if i is not None and Path(i).resolve() == out:
            raise ContractError(f"{output}: the output path is also an input ({i}); refusing to "
                                "overwrite it, choose another -o")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename, on
    failure it is removed, so nothing partial is ever at the final path."""
    path = Path(path)
    if path.is_dir():
        raise ContractError(f"{path}: is a directory, expected a file path to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            yield tmp
            os.replace(tmp, path)
        except OSError as exc:  # name the path the user gave, not the temporary one
            # a write into the open file (a full disk) carries no file name at all
            if exc.filename in (str(tmp), tmp, None) and exc.errno is not None:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
            raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_csv(df: pd.DataFrame, path: str | Path, **kw: Any) -> Path:
    """`df.to_csv(path, index=False)`, atomically."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, **kw)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write a text file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_table(df: pd.DataFrame, path: str | Path, columns: list[str]) -> Path:
    """Write a contract table with its columns first (extras after), atomically."""
    extra = [c for c in df.columns if c not in columns]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ContractError(f"writing {path}: missing column(s) {missing}")
    return write_csv(df[columns + extra], path)
