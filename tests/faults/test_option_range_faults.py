"""Every option and config value checked for its range at the edge; no command writes onto a file it
reads (meta.json included) nor merges runs it cannot tell apart; a closed stdout is not an error
(issue #29)."""

import argparse
import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from synth import T0, events_frame, trace_frame
from wattlife.cli import build_parser, main
from wattlife.cli.options import RANGES, check_options, numeric_actions

MS = 1_000_000
PARSER = build_parser()
NUMERIC = numeric_actions(PARSER)
# the least each command needs to parse (its required arguments, dummy paths: nothing runs)
REQUIRED = {
    "run": ["--trace", "t.csv", "--events", "e.csv", "--", "true"],
    "attribute": ["--trace", "t.csv", "--events", "e.csv", "-o", "p.csv"],
    "merge-nodes": ["--traces", "a.csv", "--events", "b.csv", "--trace", "t.csv",
                    "--events-out", "e.csv"],
    "launch-node": ["--trace", "t.csv", "--events", "e.csv", "--", "true"],
    "check": ["run"], "gen-images": ["x"], "gen-text": ["x"],
    "fetch": ["--url", "http://127.0.0.1:9/x", "-o", "x"], "upload": ["x", "--put", "http://h/"],
    "pfi-sweep": ["--config", "c.yaml", "--cell", "c", "--cap", "300", "-o", "x.csv"],
    "aggregate-curves": ["a.csv", "--job", "j", "-o", "x.csv"],
    "pfi": ["c.csv", "-o", "x.csv"], "allocate": ["c.csv", "-o", "x.csv"], "pfi-study": [],
    "calibrate-sim": ["c.csv"], "bench": ["attribution"],
    "measure": ["--results", "r", "--cell", "w/local/ckpt-on/r1", "--slice", "{}"],
    "attempt": ["--results", "r", "--into", "r/pfi/c/cap-1", "--kind", "pfi-cap", "--slice", "{}"],
    "node-emulator": ["pm-counters", "--root", "r"],
    "cells": ["--config", "c.yaml"],
}
VALUES = ["0", "-5", "nan", "1e30", "99999999999999999999"]


def _parse(command, option, value):
    """The parsed namespace, or the one-line error argparse gave (SystemExit)."""
    args = [command, *REQUIRED.get(command, [])]
    if "--" in args:
        i = args.index("--")
        args = args[:i] + [option, value] + args[i:]
    else:
        args += [option, value]
    return PARSER.parse_args(args)


def test_every_numeric_option_has_a_declared_range():
    missing = [(c, a.dest) for c, a in NUMERIC if (c, a.dest) not in RANGES]
    assert not missing, f"numeric options without a range in cli.options.RANGES: {missing}"
    assert len(NUMERIC) >= 38


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("command,action", NUMERIC,
                         ids=[f"{c}{a.option_strings[-1]}" for c, a in NUMERIC])
def test_every_numeric_option_refuses_out_of_range_values_in_one_line(capsys, command, action,
                                                                       value):
    """0, a negative, NaN and a huge value: refused with one line naming the option and its
    range, or accepted because the declared range holds it (0 for a seed, --retries, --mc)."""
    option = action.option_strings[-1]
    try:
        a = _parse(command, option, value)
    except SystemExit as exc:  # argparse's own check (not a number, not > 0): one line
        assert exc.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and option in err and "Traceback" not in err, err
        return
    lo, hi, _ = RANGES[(command, action.dest)]
    try:
        check_options(a, PARSER)
    except ValueError as exc:
        assert str(exc).startswith(f"{option}: expected ") and "<=" in str(exc)
        assert value != "0" or lo > 0
        return
    assert value == "0" and lo == 0  # the only value of the four a range may hold


def _run_dir(tmp_path):
    tr = trace_frame(T0 + pd.Series(range(101)).to_numpy() * 10 * MS, [100.0] * 101, "gpu0")
    tr.to_csv(tmp_path / "trace.csv", index=False)
    events_frame([("forward", T0, T0 + 500 * MS)]).to_csv(tmp_path / "events.csv", index=False)
    return ["attribute", "--trace", str(tmp_path / "trace.csv"), "--events",
            str(tmp_path / "events.csv")]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("extra,option", [
    (["--bootstrap", "-5"], "--bootstrap"),  # before: "negative dimensions are not allowed"
    (["--bootstrap", "0", "--method", "deconvolve"], "--bootstrap"),  # "too many values to unpack"
    (["--sensor-window-ms", "-10"], "--sensor-window-ms"),
    (["--sensor-window-ms", "nan"], "--sensor-window-ms"),
])
def test_attribute_options_out_of_range(tmp_path, capsys, extra, option):
    assert main(_run_dir(tmp_path) + ["-o", str(tmp_path / "phases.csv"), *extra]) == 2
    assert _one_line(capsys).startswith(f"wattlife attribute: error: {option}: expected")
    assert not (tmp_path / "phases.csv").exists()


def test_attribute_never_writes_onto_the_meta_json_it_reads(tmp_path, capsys):
    """Before: exit 0, the run's meta.json replaced by phases."""
    meta = {"run_id": "r", "cell": {"workload": "w"}}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert main(_run_dir(tmp_path) + ["-o", str(tmp_path / "meta.json")]) == 2
    assert "also an input" in _one_line(capsys)
    assert json.loads((tmp_path / "meta.json").read_text()) == meta


def test_run_refuses_one_path_for_two_of_its_outputs(tmp_path, capsys):
    assert main(["run", "--trace", str(tmp_path / "x.csv"), "--events", str(tmp_path / "x.csv"),
                 "--", "true"]) == 2
    assert "also an input" in _one_line(capsys) and not (tmp_path / "x.csv").exists()


def _curves(n_jobs=4, caps=(200, 300, 400, 500, 600, 700)):
    return pd.DataFrame([{"job": f"j{j}", "gpu_model": "H200", "n_gpus": 8, "cap_w": cap,
                          "throughput": 100 * (cap / 700) ** (0.3 + 0.2 * j),
                          "throughput_unit": "tokens/s", "power_w": 8 * cap * 0.95,
                          "dram_active": 0.1 * (j + 1), "util_mem": 0.2 * (j + 1),
                          "tensor_active": 0.5, "source": "sim"}
                         for j in range(n_jobs) for cap in caps])


@pytest.mark.parametrize("compare", ["H200", "H200,H100,A100", "H200,", "H200,H200"])
def test_pfi_compare_is_checked_before_anything_is_written(tmp_path, capsys, compare):
    """Before: an unpacking error after pfi.csv was written."""
    _curves().to_csv(tmp_path / "c.csv", index=False)
    assert main(["pfi", str(tmp_path / "c.csv"), "-o", str(tmp_path / "pfi.csv"), "--mc", "0",
                 "--compare", compare]) == 2
    assert _one_line(capsys).startswith("wattlife pfi: error: --compare: expected two")
    assert not (tmp_path / "pfi.csv").exists()


@pytest.mark.parametrize("case", ["all-nan", "one-cap"])
def test_predict_without_enough_finite_pfis_is_one_line(tmp_path, capsys, case):
    """Before: scikit-learn's own messages ("Found array with 0 sample(s)")."""
    if case == "all-nan":
        curves = _curves()
        pfi = pd.DataFrame({"job": [f"j{j}" for j in range(4)], "gpu_model": "H200",
                            "pfi": [float("nan")] * 4})
    else:  # every job measured at one cap: no PFI can be computed
        curves = _curves(caps=(700,))
        pfi = pd.DataFrame({"job": ["j0", "j1"], "gpu_model": "H200", "pfi": [1.0, float("nan")]})
    curves.to_csv(tmp_path / "c.csv", index=False)
    pfi.to_csv(tmp_path / "pfi.csv", index=False)
    code = main(["predict", str(tmp_path / "c.csv"), "--pfi", str(tmp_path / "pfi.csv"), "-o",
                 str(tmp_path / "pred.csv")])
    assert code == 2
    err = _one_line(capsys)
    assert "error:" in err and "sample" not in err
    assert not (tmp_path / "pred.csv").exists()


def test_an_empty_storage_list_is_refused_like_an_empty_workloads_list(tmp_path):
    """Before: accepted, and the whole execution matrix silently disappeared."""
    from wattlife.config import ConfigError, load_config

    cfg = yaml.safe_load(open("config/config.yaml"))
    for key in ("storage", "checkpoint"):
        bad = json.loads(json.dumps(cfg))
        bad["execution"][key] = []
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(bad))
        with pytest.raises(ConfigError, match=f"execution.{key}: \\[\\] should be non-empty"):
            load_config(tmp_path / "c.yaml")


def _phases(tmp_path, name, energy):
    d = tmp_path / name
    d.mkdir()
    cols = {"run_id": name, "host": "h", "device": "cpu0", "device_kind": "cpu",
            "phase": "backward", "method": "integrate", "energy_j": energy, "energy_lo_j": energy,
            "energy_hi_j": energy, "time_s": 0.25, "count": 5, "mean_power_w": energy / 0.25,
            "source": "estimate", "covered_fraction": 1.0}
    pd.DataFrame([cols]).to_csv(d / "phases.csv", index=False)
    return d


def test_aggregate_never_sums_two_runs_it_cannot_tell_apart(tmp_path, capsys):
    """Before: no warning, blank cells, 29.3 + 25.4 = 54.7 J as one run."""
    a, b = _phases(tmp_path, "a", 29.3), _phases(tmp_path, "b", 25.4)
    assert main(["aggregate", str(a / "phases.csv"), str(b / "phases.csv"), "-o",
                 str(tmp_path / "tables")]) == 0
    err = capsys.readouterr().err
    assert "warning: no cell for 2 phases file(s)" in err
    assert f"{a / 'meta.json'} missing" in err and f"{b / 'meta.json'} missing" in err
    s = pd.read_csv(tmp_path / "tables" / "phase_summary.csv")
    assert sorted(s["energy_j"]) == [25.4, 29.3] and set(s["n"]) == {1}
    # the same run twice (same cell and repeat in meta.json): refused
    for d in (a, b):
        (d / "meta.json").write_text(json.dumps({"cell": {"workload": "w", "storage": "shared",
                                                          "checkpoint": "off", "repeat": 1}}))
    assert main(["aggregate", str(a / "phases.csv"), str(b / "phases.csv"), "-o",
                 str(tmp_path / "t2")]) == 2
    assert "are the same run" in _one_line(capsys)


@pytest.mark.parametrize("command", ["attribute", "pfi"])
def test_a_closed_stdout_is_not_an_error(tmp_path, env_path, command):
    """`wattlife pfi ... | head -1`: before, exit 2 "Broken pipe" although the output was whole."""
    if command == "attribute":
        args = _run_dir(tmp_path) + ["-o", str(tmp_path / "out.csv"), "--method", "integrate"]
    else:
        _curves(40).to_csv(tmp_path / "c.csv", index=False)
        args = ["pfi", str(tmp_path / "c.csv"), "-o", str(tmp_path / "out.csv"), "--mc", "0"]
    p = subprocess.Popen([sys.executable, "-m", "wattlife.cli", *args], env=env_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader has gone before the first line
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Broken pipe" not in err and (tmp_path / "out.csv").exists()


def test_option_name_is_the_users_spelling():
    a = argparse.Namespace(command="attribute", sensor_window_ms=-1.0, bootstrap=200)
    with pytest.raises(ValueError, match="^--sensor-window-ms: expected milliseconds, > 0"):
        check_options(a, PARSER)


def test_powercap_restore_without_state_names_the_file_it_needs(capsys):
    """Before: exit 0 "no power limit to restore" from a default file nothing writes."""
    assert main(["powercap", "restore"]) == 2
    err = _one_line(capsys)
    assert "give --state" in err and "powercap-state-<host>.json" in err
