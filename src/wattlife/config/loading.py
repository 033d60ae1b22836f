"""Loading a configuration: the YAML read, validated against the schema shipped in the package
(`resources/schema.yaml`), its defaults filled; the package data found with `resource_path`.

A malformed config stops with a message naming the key (as a dotted path) and what was expected.
Every YAML file of the package is read strictly (`strict_yaml`): a key given twice in one mapping
is an error naming the file, the line and the key (PyYAML, and so Snakemake, keep the last one
silently).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..contracts.sources import (
    CPU_ROLE,
    GPU_ROLE,
    NODE_ROLE,
    backend_choices,
    cap_choices,
    fallback_choices,
)
from ..errors import InputError


class ConfigError(InputError):
    """The config does not follow config/schema.yaml."""


def resource_path(*parts: str) -> Path:
    """A file or folder shipped in the package (`wattlife/resources/`): e.g. `"schema.yaml"`,
    `"models"`, `"hardware", "h200.yaml"`, `"reference", "pfi-study"`."""
    return Path(str(resources.files("wattlife").joinpath("/".join(("resources",) + parts))))


def schema_path() -> Path:
    """The configuration schema (`config/schema.yaml` in the repository is a link to it)."""
    return resource_path("schema.yaml")


@functools.cache
def _shipped_schema() -> dict[str, Any]:
    result: dict[str, Any] = yaml.safe_load(schema_path().read_text())
    return result


#: the schema's keys naming a registered sensor or power-cap backend -> their enums, from the
#: backends' rows (`contracts.sources`, registered through `devices.registry` and
#: `devices.powercap`), never from the file (a backend
#: registered later, a plugin's or a test's, counts too)
REGISTRY_KEYS: dict[tuple[str, ...], Callable[[], list[str]]] = {
    **{("sampler", role): functools.partial(backend_choices, role)
       for role in (GPU_ROLE, CPU_ROLE, NODE_ROLE)},
    ("sampler", "cpu_fallback"): functools.partial(fallback_choices, CPU_ROLE),
    ("powercap", "backend"): lambda: cap_choices(_shipped_schema()["properties"]["powercap"]
                                                 ["properties"]["backend"].get("default")),
}


def schema() -> dict[str, Any]:
    """The configuration schema: the shipped file (read once per process) with the enums of
    `REGISTRY_KEYS` filled from the registries at each call. The result is shared: read only."""
    sch = _shipped_schema()
    for path, values in REGISTRY_KEYS.items():
        sch = _with_enum(sch, path, values())
    return sch


def _with_enum(node: dict[str, Any], path: tuple[str, ...], values: list[str]) -> dict[str, Any]:
    """`node` with the property at `path` holding `enum: values` (copied along the path only)."""
    if not path:
        return {**node, "enum": values}
    props = node["properties"]
    return {**node, "properties": {**props, path[0]: _with_enum(props[path[0]], path[1:],
                                                                 values)}}


def _describe(err: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in err.absolute_path) or "(top level)"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        where = path if path != "(top level)" else "top level"
        keys = ", ".join(f"{where}.{k}" if where != "top level" else k for k in extra)
        return f"unknown key {keys}: allowed keys at {where} are {allowed}"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        key = f"{path}.{missing}" if path != "(top level)" else missing
        return f"missing required key {key}"
    if err.validator == "type":
        return f"{path}: expected {err.validator_value}, got {err.instance!r}"
    if err.validator == "enum":
        return f"{path}: expected one of {err.validator_value}, got {err.instance!r}"
    if err.validator == "pattern":
        want = err.schema.get("description") or f"a string matching {err.validator_value}"
        return f"{path}: expected {want}, got {err.instance!r}"
    return f"{path}: {err.message}"


def validate_config(cfg: dict[str, Any], schema_file: str | Path | None = None) -> None:
    """Raise ConfigError naming every offending key (first the most specific). A job's config
    slice (top-level `slice` key, written by the workflow: `wattlife.jobs`) holds only the keys
    that job depends on, so the top-level required keys are not required of it."""
    sch = yaml.safe_load(Path(schema_file).read_text()) if schema_file else schema()
    if isinstance(cfg, dict) and "slice" in cfg:
        sch = {k: v for k, v in sch.items() if k != "required"}
    if lines := _problems(cfg, sch):
        raise ConfigError("invalid config: " + "; ".join(lines))
    check_references(cfg)


def _problems(cfg: Any, sch: dict[str, Any]) -> list[str]:
    """Every offending key of `cfg` against schema `sch`, described once each, the most specific
    first."""
    validator = jsonschema.Draft202012Validator(sch)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (-len(e.absolute_path), e.message))
    return list(dict.fromkeys(_describe(e) for e in errors))


def check_references(cfg: dict[str, Any]) -> None:
    """Names one section uses must be defined in another: every workload of
    `execution.workloads` is a key of `workloads` (except in a PFI run, whose targets are the
    `pfi_matrix` sweeps). Raise ConfigError naming the key."""
    if ((cfg.get("pfi_matrix") or {}).get("cells")):
        return  # a PFI run: its targets are the sweeps, execution.workloads is unused
    defined = cfg.get("workloads") or {}
    used = (cfg.get("execution") or {}).get("workloads") or []
    if isinstance(used, list):
        for i, w in enumerate(used):
            if w not in defined:
                raise ConfigError(f"invalid config: execution.workloads[{i}]: workload {w!r} is "
                                  f"not defined under workloads (defined: {sorted(defined)})")


def _defaults(schema: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill the schema's defaults as Snakemake's `validate` does: in the entries of a mapping of
    objects (`additionalProperties`, e.g. each workload) too, so a cell's config slice is the
    same text, and the same hash, from the CLI as from the workflow (wattlife.custody)."""
    props = schema.get("properties", {})
    for key, sub in props.items():
        if "default" in sub and key not in cfg:
            cfg[key] = sub["default"]
        if isinstance(cfg.get(key), dict) and sub.get("type") == "object":
            _defaults(sub, cfg[key])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and extra.get("type") == "object":
        for key, value in cfg.items():
            if key not in props and isinstance(value, dict):
                _defaults(extra, value)
    return cfg


class _DuplicateKey(yaml.YAMLError):  # type: ignore[misc]
    def __init__(self, key: Any, line: int, first: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line, self.first = key, line, first


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader refusing a key given twice in one mapping (a merge `<<` may still
    be overridden: that is what it is for)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if first is not None:
                raise _DuplicateKey(key, key_node.start_mark.line + 1, first)
            seen[key] = key_node.start_mark.line + 1
        result: dict[Any, Any] = super().construct_mapping(node, deep)
        return result


def strict_yaml(text: str, where: str | Path) -> Any:
    """The YAML (or JSON) document of `text`; a key given twice in one mapping is a ConfigError
    naming `where`, the line and the key; bad YAML a ConfigError naming `where`."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ConfigError(f"{where}:{exc.line}: duplicate key '{exc.key}' (first at line "
                          f"{exc.first}); a key may appear once in a mapping (YAML keeps the last "
                          "one silently)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None


def _read_yaml(path: Path) -> Any:
    """The YAML document of a config file ({} when empty); a missing file, bad YAML or a
    duplicated key named (`strict_yaml`)."""
    if not path.exists():
        raise FileNotFoundError(f"config {path} does not exist")
    return strict_yaml(path.read_text(), path) or {}


def check_config_files(paths: list[str | Path]) -> None:
    """Each config file the workflow was given (`workflow.configfiles`: the Snakefile's own and
    every `--configfile`) read strictly: a duplicated key is a ConfigError naming file, line and
    key (Snakemake keeps the last one silently)."""
    for p in paths:
        if Path(p).exists():
            _read_yaml(Path(p))


def load_config(path: str | Path) -> dict[str, Any]:
    """Read, validate and fill defaults; a ConfigError names the file besides each key."""
    cfg = _read_yaml(Path(path))
    try:
        validate_config(cfg)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("invalid config:", f"invalid config {path}:", 1)) \
            from None
    return _defaults(schema(), cfg)


def load_section(path: str | Path, section: str) -> dict[str, Any]:
    """One top-level section of a config file, validated alone, its defaults filled: for
    commands that read only that section (`wattlife run --config`: `sampler`). The file may
    hold the section alone, a whole config or a job slice; its other sections are neither
    required nor checked (their names must still be the schema's). ConfigError names the file,
    each offending key (dotted) and what was expected."""
    path = Path(path)
    cfg = _read_yaml(path)
    full = schema()
    only = {**full, "required": [section],
            "properties": {k: (v if k == section else {}) for k, v in full["properties"].items()}}
    if lines := _problems(cfg, only):
        raise ConfigError(f"invalid config {path} (its `{section}` section is read): "
                          + "; ".join(lines))
    return _defaults(full["properties"][section], dict(cfg[section]))


def schema_node(*path: str) -> dict[str, Any]:
    """The schema node at `path` (property names; "*" = additionalProperties)."""
    node = schema()
    for key in path:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    return node


def schema_default(*path: str) -> Any:
    """The schema's default of the key at `path` (e.g. "sampler", "idle_baseline_s"); None when
    the schema gives none."""
    return copy.deepcopy(schema_node(*path).get("default"))
