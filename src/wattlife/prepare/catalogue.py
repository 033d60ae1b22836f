"""The preparation stage's catalogue: what is downloaded, from where, and how big it is.

An entry: `name`, `kind` (dataset | model), `source` (hf | kaggle | http | path | generated),
`id` (repository id, Kaggle slug, URL or path; for `generated` none), `size_bytes` (the public
size, or the generated size), optional `params` (models), `sha256`, `revision`.
`generated` entries are files of random bytes made by `generate_artefacts` and served over
loopback by the demo, so that every download is a real HTTP transfer without a network."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..config import Prepare
from ..contracts import write_text
from ..errors import InputError

SOURCES = ("hf", "kaggle", "http", "path", "generated")
KINDS = ("dataset", "model")


def check_catalogue(entries: list[dict[str, Any]], where: str = "prepare.catalogue"
                    ) -> list[dict[str, Any]]:
    """Entries with a clear error naming the first bad key."""
    names = set()
    for i, e in enumerate(entries):
        at = f"{where}[{i}]"
        for key in ("name", "kind", "source", "size_bytes"):
            if key not in e:
                raise InputError(f"{at}: missing '{key}'")
        if e["kind"] not in KINDS:
            raise InputError(f"{at}.kind: expected one of {KINDS}, got {e['kind']!r}")
        if e["source"] not in SOURCES:
            raise InputError(f"{at}.source: expected one of {SOURCES}, got {e['source']!r}")
        if e["source"] != "generated" and not e.get("id"):
            raise InputError(f"{at}.id: a {e['source']} source needs an id (repository, slug, URL "
                             f"or path)")
        if not isinstance(e["size_bytes"], (int, float)) or e["size_bytes"] <= 0:
            raise InputError(f"{at}.size_bytes: expected a positive number, got "
                             f"{e['size_bytes']!r}")
        if e["name"] in names:
            raise InputError(f"{at}.name: {e['name']!r} appears twice")
        names.add(e["name"])
    return entries


def generate_artefacts(entries: list[dict[str, Any]], out: str | Path, seed: int = 0
                       ) -> dict[str, Any]:
    """Random-byte files for the `generated` entries (incompressible, like model weights and
    compressed datasets), with their sha256 in `manifest.json`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for e in entries:
        if e["source"] != "generated":
            continue
        f = out / f"{e['name']}.bin"
        h, left = hashlib.sha256(), int(e["size_bytes"])
        with open(f, "wb") as fh:
            while left:
                block = os.urandom(min(left, 1 << 22))
                fh.write(block)
                h.update(block)
                left -= len(block)
        manifest[e["name"]] = {"file": f.name, "size_bytes": int(e["size_bytes"]),
                               "sha256": h.hexdigest(),
                               "kind": e["kind"]}
    write_text(out / "manifest.json", json.dumps(manifest, indent=1))
    return manifest


def checked_catalogue(prepare: Prepare) -> list[dict[str, Any]]:
    """The typed `prepare` section's catalogue as a list of entries, checked (`check_catalogue`);
    `[]` when the config has none."""
    return check_catalogue(list(prepare.catalogue or ()))
