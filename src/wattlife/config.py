"""Configuration: load YAML and validate it against config/schema.yaml.

A malformed config stops with a message naming the key (as a dotted path) and what was expected.
The Snakefile calls `validate_config` first and then Snakemake's own `validate` (which also fills
the schema's defaults), so both paths give the same verdict.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


class ConfigError(ValueError):
    """The config does not follow config/schema.yaml."""


def schema_path(config_path: str | Path | None = None) -> Path:
    candidates = [os.environ.get("WATTLIFE_SCHEMA")]
    if config_path is not None:
        candidates.append(str(Path(config_path).resolve().parent / "schema.yaml"))
    candidates += [str(REPO_ROOT / "config" / "schema.yaml"), "config/schema.yaml"]
    for c in candidates:
        if c and Path(c).exists():
            return Path(c)
    raise FileNotFoundError("config/schema.yaml not found (set WATTLIFE_SCHEMA)")


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


def validate_config(cfg: dict[str, Any], schema: str | Path | None = None) -> None:
    """Raise ConfigError naming every offending key (first the most specific). A job's config
    slice (top-level `slice` key, written by the workflow: `wattlife.jobs`) holds only the keys
    that job depends on, so the top-level required keys are not required of it."""
    with open(schema or schema_path()) as fh:
        sch = yaml.safe_load(fh)
    if isinstance(cfg, dict) and "slice" in cfg:
        sch = {k: v for k, v in sch.items() if k != "required"}
    validator = jsonschema.Draft202012Validator(sch)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (-len(e.absolute_path), e.message))
    if errors:
        lines = [_describe(e) for e in errors]
        raise ConfigError("invalid config: " + "; ".join(dict.fromkeys(lines)))
    check_references(cfg)


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
                raise ConfigError(f"invalid config: execution.workloads[{i}]: workload {w!r} is not "
                                  f"defined under workloads (defined: {sorted(defined)})")


def _defaults(schema: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    for key, sub in schema.get("properties", {}).items():
        if "default" in sub and key not in cfg:
            cfg[key] = sub["default"]
        if isinstance(cfg.get(key), dict) and sub.get("type") == "object":
            _defaults(sub, cfg[key])
    return cfg


def load_config(path: str | Path) -> dict[str, Any]:
    """Read, validate and fill defaults."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config {path} does not exist")
    with open(path) as fh:
        try:
            cfg = yaml.safe_load(fh) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    sp = schema_path(path)
    validate_config(cfg, sp)
    with open(sp) as fh:
        return _defaults(yaml.safe_load(fh), cfg)
