"""The typed configuration (wattlife.config.settings): frozen objects whose defaults are the
schema's, covering every key of the schema; and the defaults that used to disagree."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from wattlife import jobs as J
from wattlife.cli import build_parser, load_sampler_cfg
from wattlife.config import (
    Analysis,
    Attribution,
    CausalLMSpec,
    Execution,
    ImageClassificationSpec,
    PfiCell,
    PowerCapSettings,
    SamplerSettings,
    load_config,
    schema,
    schema_default,
    settings,
)
from wattlife.devices.registry import backend_specs

REPO = Path(__file__).resolve().parents[2]


def _paths(cls):
    return {f.metadata.get("path", (f.name,))[0] for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls, section", [
    (SamplerSettings, ("sampler",)), (Execution, ("execution",)),
    (PowerCapSettings, ("powercap",)), (Attribution, ("attribution",)),
    (Analysis, ("analysis",)), (PfiCell, ("pfi_matrix", "cells", "*")),
])
def test_each_typed_section_covers_its_schema_keys(cls, section):
    node = schema()
    for key in section:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    # a sensor backend's own block (`sampler.<id>`) needs no class: SamplerSettings.block
    blocks = {b.id for b in backend_specs()} if cls is SamplerSettings else set()
    assert set(node["properties"]) <= _paths(cls) | blocks


def test_the_workload_specs_cover_every_workload_key():
    keys = set(schema()["properties"]["workloads"]["additionalProperties"]["properties"])
    assert keys <= _paths(ImageClassificationSpec) | _paths(CausalLMSpec)


def test_absent_keys_take_the_schemas_defaults_and_objects_are_frozen():
    s = settings({"storage": {"shared": "s", "local": "l"}})
    assert s.sampler.idle_baseline_s == schema_default("sampler", "idle_baseline_s") == 2
    assert s.analysis.allocation_cuts == tuple(schema_default("analysis", "allocation_cuts"))
    assert s.analysis.pfi_study_workloads == 500 and s.powercap.hardware == "h200"
    assert s.data.images_classes == 10 and s.execution is None and s.cells() == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.sampler.interval_ms = 1  # type: ignore[misc]


def test_demo_config_typed():
    s = settings(load_config(REPO / "config/config.yaml"))
    assert s.sampler.idle_baseline_s == 1 and s.sampler.interval_ms == 50
    assert isinstance(s.workloads["resnet"], ImageClassificationSpec)
    assert isinstance(s.workloads["qwen"], CausalLMSpec)
    assert s.workloads["qwen"].task == "pretrain" and s.workloads["qwen"].lora_rank == 32
    ids = [c.id for c in s.cells()]
    assert ids[:2] == ["resnet/shared/ckpt-on/r1", "resnet/shared/ckpt-off/r1"]
    assert len(s.cells()) == 8 and not s.pfi_run


def test_idle_baseline_default_is_the_schemas_and_the_cli_documents_its_own(capsys):
    # a sampler section without idle_baseline_s: the schema's 2 s (run.py read 0 before)
    assert SamplerSettings.from_dict({"gpu": "sim"}).idle_baseline_s == 2
    # `wattlife run` without --config: the schema's too (a measured baseline by default; 0 s
    # before issue 42), as its --idle-s help says
    assert "idle_baseline_s" not in load_sampler_cfg(None)
    assert SamplerSettings.from_dict(load_sampler_cfg(None)).idle_baseline_s == 2
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert "idle_baseline_s, else the schema's, 2" in " ".join(capsys.readouterr().out.split())


def test_cli_defaults_are_the_schemas():
    """The analysis commands' own defaults equal the schema's, so a workflow run and a command
    run by hand agree (the allocation cuts differed: 5 in the rule, 9 in the CLI)."""
    p = build_parser()
    al = p.parse_args(["allocate", "c.csv", "-o", "x.csv"])
    assert tuple(al.cuts) == tuple(schema_default("analysis", "allocation_cuts"))
    assert (al.workloads, al.jobs, al.mix) == (schema_default("analysis", "allocation_workloads"),
                                               schema_default("analysis", "allocation_jobs"),
                                               schema_default("analysis", "allocation_mix"))
    assert p.parse_args(["pfi", "c.csv", "-o", "x"]).mc == schema_default("analysis", "pfi_mc")
    st = p.parse_args(["pfi-study"])
    assert (st.workloads, st.jobs) == (schema_default("analysis", "pfi_study", "workloads"),
                                       schema_default("analysis", "pfi_study", "jobs"))
    gi = p.parse_args(["gen-images", "d"])
    assert (gi.classes, gi.train_per_class, gi.val_per_class, gi.size) == tuple(
        schema_default("data", "images", k) for k in ("classes", "train_per_class",
                                                      "val_per_class", "size"))
    assert p.parse_args(["gen-text", "d"]).words == schema_default("data", "text", "words")


def test_allocate_options_without_allocation_keys_use_the_schema():
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    for key in ("allocation_workloads", "allocation_cuts", "allocation_jobs", "allocation_mix"):
        del cfg["analysis"][key]
    opts = J.allocate_options(settings(cfg).analysis)
    assert opts == ("--cuts 0,0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4 --workloads 500 --jobs 100"
                    " --mix random")


def test_a_workload_of_unknown_kind_is_named():
    from wattlife.config import ConfigError, workload_spec

    with pytest.raises(ConfigError, match=r"workloads\.w\.kind: expected one of"):
        workload_spec("w", {"kind": "rl"})


def test_the_samplers_own_defaults_equal_the_schemas():
    """The sampler reads SamplerSettings, whose defaults are the schema's: the same backends from
    an empty section and from the schema-filled one."""
    from wattlife.sampler import build_backends

    def built(cfg):
        backends, _ = build_backends(cfg, log=lambda *a: None)
        return [({k: v for k, v in b.info().items() if k != "pid_watched"},
                 getattr(b, "interval_s", None), len(b.devices()) if hasattr(b, "devices") else 0)
                for b in backends]

    bare = SamplerSettings.from_dict({"gpu": "sim", "cpu": "estimate"})
    assert built(bare) == built(SamplerSettings.from_dict(bare.as_dict()))
