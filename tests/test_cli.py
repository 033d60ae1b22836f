import pytest

from wattlife.cli import build_parser, main

COMMANDS = ["run", "attribute", "pfi", "allocate", "predict", "calibrate-sim", "sweep", "powercap",
            "gen-images", "gen-text", "train", "aggregate", "figures", "bench", "fetch", "upload",
            "gen-catalogue", "prepare-tables", "pfi-sweep", "aggregate-curves", "merge-nodes",
            "pfi-study", "check", "launch-node"]


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
