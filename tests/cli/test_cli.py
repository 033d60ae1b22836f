import pytest

from wattlife.cli import build_parser, main

COMMANDS = ["run", "attribute", "pfi", "allocate", "predict", "calibrate-sim", "sweep", "powercap",
            "gen-images", "gen-text", "train", "aggregate", "figures", "bench", "fetch", "upload",
            "gen-catalogue", "prepare-tables", "pfi-sweep", "aggregate-curves", "merge-nodes",
            "pfi-study", "check", "launch-node", "slurm-orphans", "slurm-energy", "measure",
            "cells", "retire", "relink", "seal-derived", "attempt", "drop-checkpoint",
            "node-emulator"]


def test_every_command_has_help(capsys):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)
    for c in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([c, "--help"])
        assert exc.value.code == 0
        assert "usage: wattlife " + c in capsys.readouterr().out


def test_errors_are_one_clear_line(tmp_path, capsys):
    rc = main(["attribute", "--trace", str(tmp_path / "none.csv"), "--events",
               str(tmp_path / "e.csv"), "-o", str(tmp_path / "p.csv")])
    assert rc == 2
    assert "wattlife attribute: error:" in capsys.readouterr().err


def test_run_options_go_over_the_sampler_section_and_help_names_the_schemas_defaults(capsys):
    """`wattlife run`'s options override the config's sampler section (what meta.json records);
    without --config every default is the schema's (a measured 2 s idle baseline included; it
    was 0 s before issue 42), as its --help names them."""
    from pathlib import Path

    from wattlife.cli import load_sampler_cfg
    from wattlife.config import load_config, schema_default

    assert load_sampler_cfg(None, gpu=None, cpu="estimate", interval_ms=None) == {
        "cpu": "estimate"}
    cfg = Path(__file__).resolve().parents[2] / "config/config.yaml"
    section = load_config(cfg)["sampler"]
    got = load_sampler_cfg(str(cfg), interval_ms=20.0, idle_baseline_s=0.0)
    assert got == {**section, "interval_ms": 20.0, "idle_baseline_s": 0.0}
    assert list(got) == list(section)  # keys keep their place: meta.json's order unchanged
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for key, option in (("interval_ms", "interval in ms"), ("gpu", "GPU backend"),
                        ("cpu", "CPU backend")):
        assert f"the config's, else {schema_default('sampler', key)})" in text.split(option)[1][:60]
