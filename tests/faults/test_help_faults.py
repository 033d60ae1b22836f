"""Every option of every command has --help text that gives its default (flags too: "default:
off"), unless it is required; every positional argument is described."""

import argparse

from wattlife.cli import build_parser


def _subparsers(p: argparse.ArgumentParser):
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def _problems() -> list[str]:
    out = []
    root = build_parser()
    parsers = {"wattlife": root, **{f"wattlife {k}": v for k, v in _subparsers(root).items()}}
    for name, p in parsers.items():
        for a in p._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            opt = "/".join(a.option_strings) or a.dest
            text = (a.help or "").strip()
            if not text or text == argparse.SUPPRESS:
                out.append(f"{name} {opt}: no help text")
                continue
            if not a.option_strings:
                continue  # positional: described is enough
            group_required = any(a in g._group_actions and g.required
                                 for g in p._mutually_exclusive_groups)
            if not (a.required or group_required or "default" in text.lower()):
                out.append(f"{name} {opt}: help does not give the default")
    return out


def test_every_option_has_help_with_its_default():
    assert _problems() == []
