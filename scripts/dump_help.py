"""Write the `--help` text of `wattlife` and of every subcommand (nested ones too) to one file
per command in a folder, so two versions of the CLI can be compared byte for byte (`diff -r`).

    PYTHONPATH=src python scripts/dump_help.py OUT_DIR

The width is fixed (COLUMNS=100) so the text does not depend on the terminal."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name (none when it has no subparsers)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out.update(action.choices)
    return out


def dump(parser: argparse.ArgumentParser, out_dir: Path, name: str = "wattlife") -> list[Path]:
    """Write `parser`'s help to OUT_DIR/<name>.txt and recurse into its subcommands."""
    path = out_dir / f"{name}.txt"
    path.write_text(parser.format_help())
    written = [path]
    for sub_name, sub in sorted(_subparsers(parser).items()):
        written += dump(sub, out_dir, f"{name}_{sub_name}")
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: dump_help.py OUT_DIR", file=sys.stderr)
        return 2
    os.environ["COLUMNS"] = "100"  # argparse's formatter reads the width from here
    os.environ.pop("LINES", None)
    from wattlife.cli import build_parser

    out_dir = Path(args[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    written = dump(build_parser(), out_dir)
    print(f"{len(written)} help texts under {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
