"""`wattlife` commands of the workloads and their data: train, gen-images, gen-text."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InputError


def cmd_gen_images(a: argparse.Namespace) -> int:
    from ..workloads.datagen import make_image_tree

    n = make_image_tree(a.output, n_classes=a.classes, train_per_class=a.train_per_class,
                        val_per_class=a.val_per_class, size=a.size, seed=a.seed,
                        workers=a.workers)
    print(f"wrote {n} JPEG files under {a.output}")
    return 0


def cmd_gen_text(a: argparse.Namespace) -> int:
    from ..workloads.datagen import make_text_corpus

    n = make_text_corpus(a.output, n_words=a.words, seed=a.seed)
    print(f"wrote {n} words under {a.output}")
    return 0


def cmd_train(a: argparse.Namespace) -> int:
    from ..config import load_config, settings
    from ..workloads import train_cell

    s = settings(load_config(a.config))
    if a.workload not in s.workloads:
        raise InputError(f"--workload {a.workload}: not a key of {a.config}'s workloads "
                         f"(defined: {sorted(s.workloads)})")
    return train_cell(s, a.workload, a.storage, a.checkpoint, a.workdir)


def _add_train(sub: Any) -> None:
    """The `train` command's parser."""
    tr = sub.add_parser("train", help="run one training workload (phases marked)")
    tr.add_argument("--config", required=True, help="config YAML with the workloads section")
    tr.add_argument("--workload", required=True, help="a key of the config's workloads")
    tr.add_argument("--storage", choices=["shared", "local"], default="shared",
                    help="read the dataset in place, or stage it to local disk first "
                         "(default shared)")
    tr.add_argument("--checkpoint", choices=["off", "sync", "async", "on"], default="off",
                    help="checkpoints: off (default), sync, async (written in the background); "
                    "on = sync")
    tr.add_argument("--workdir", required=True, help="folder for checkpoints and local copies")
    tr.set_defaults(fn=cmd_train)


def _add_gen_images(sub: Any) -> None:
    """The `gen-images` command's parser."""
    gi = sub.add_parser("gen-images", help="generate an ImageNet-layout tree of real JPEG files")
    gi.add_argument("output", help="folder of the tree (train/<class>/*.JPEG, val/<class>/*.JPEG)")
    gi.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    gi.add_argument("--train-per-class", type=int, default=32,
                    help="training images per class (default 32)")
    gi.add_argument("--val-per-class", type=int, default=8,
                    help="validation images per class (default 8)")
    gi.add_argument("--size", type=int, default=96, help="image side in pixels (default 96)")
    gi.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gi.add_argument("--workers", type=int, default=1, help="processes writing files (default 1)")
    gi.set_defaults(fn=cmd_gen_images)


def _add_gen_text(sub: Any) -> None:
    """The `gen-text` command's parser."""
    gt = sub.add_parser("gen-text", help="generate a WikiText-like text corpus")
    gt.add_argument("output", help="folder for train.txt and validation.txt")
    gt.add_argument("--words", type=int, default=200_000, help="words in all (default 200000)")
    gt.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gt.set_defaults(fn=cmd_gen_text)


def add_parsers(sub: Any) -> None:
    """Add this group's parsers, in the order of `wattlife --help` (the module docstring's)."""
    _add_train(sub)
    _add_gen_images(sub)
    _add_gen_text(sub)
