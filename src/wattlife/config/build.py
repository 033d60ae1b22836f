"""Building a typed, frozen settings object from its config section: each field its value, else
the schema's `default:` (read from the schema, never repeated in Python), else None. Lists become
tuples; nested objects the schema leaves open stay plain (read-only use) dicts."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from .loading import schema_node


def freeze(v: Any) -> Any:
    return tuple(freeze(x) for x in v) if isinstance(v, list) else v


T = TypeVar("T")


def field_at(*path: str) -> dict[str, tuple[str, ...]]:
    """Field metadata: read the field from `path` inside its section (default: its own name)."""
    return {"path": path}


def _default_at(node: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        node = node.get("properties", {}).get(key, {})
    return copy.deepcopy(node.get("default"))


def block(data: Mapping[str, Any] | None, *section: str) -> dict[str, Any]:
    """The config block of schema `section` as a plain dict: every key the schema's block
    names, its value, else the schema's default, else None (a backend's settings without a
    class in config: its own module builds them, `SamplerSettings.block`)."""
    data = data or {}
    props = schema_node(*section).get("properties", {})
    return {k: freeze(data[k]) if k in data else copy.deepcopy(p.get("default"))
            for k, p in props.items()}


def build(cls: type[T], data: Mapping[str, Any] | None, *section: str) -> T:
    """`cls` from the config mapping of schema `section`: each field its value, else the
    schema's default, else None."""
    data = data or {}
    node = schema_node(*section)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        path = f.metadata.get("path", (f.name,))
        value: Any = data
        for key in path:
            if not (isinstance(value, Mapping) and key in value):
                value = _default_at(node, path)
                break
            value = value[key]
        kwargs[f.name] = freeze(value)
    return cls(**kwargs)
