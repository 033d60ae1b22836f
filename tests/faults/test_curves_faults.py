"""Impossible power-cap curves given to pfi, allocate and predict: each is refused with one line
naming file, line and job (or, for a non-monotone curve, flagged and warned about)."""

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.curves import load_curves, validate_curves
from wattlife.cli import main
from wattlife.contracts import CURVES_COLUMNS, ContractError


def _curves(n_jobs: int = 4) -> pd.DataFrame:
    rows = []
    for j in range(n_jobs):
        for cap in (200, 300, 400, 500, 600, 700):
            rows.append({"job": f"j{j}", "gpu_model": "H200", "n_gpus": 8, "cap_w": cap,
                         "throughput": 100 * (cap / 700) ** (0.3 + 0.2 * j),
                         "throughput_unit": "tokens/s", "power_w": 8 * cap * 0.95,
                         "dram_active": 0.1 * (j + 1), "util_mem": 0.2 * (j + 1),
                         "tensor_active": 0.5, "source": "sim"})
    return pd.DataFrame(rows)


def _write(tmp_path, df, name="curves.csv"):
    p = tmp_path / name
    df.to_csv(p, index=False)
    return str(p)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


CMDS = ["pfi", "allocate", "predict"]  # every command that reads a curves table through load_curves


def _args(cmd: str, tmp_path, curves) -> list[str]:
    """`wattlife CMD` on the curves table `curves`, writing out.csv: predict gets a PFI table of
    the four jobs, allocate a small simulation."""
    args = [cmd, _write(tmp_path, curves), "-o", str(tmp_path / "out.csv")]
    if cmd == "predict":
        pfi = pd.DataFrame({"job": [f"j{j}" for j in range(4)], "gpu_model": "H200",
                            "pfi": [1.0, 1.5, 2.0, 2.5]})
        args += ["--pfi", _write(tmp_path, pfi, "pfi.csv")]
    if cmd == "allocate":
        args += ["--workloads", "2", "--jobs", "2"]
    return args


@pytest.mark.parametrize("cmd", CMDS)
def test_zero_throughput_at_the_top_cap_is_refused(tmp_path, capsys, cmd):
    """Before: PFI 0.000 for every job and an all-NaN allocation, exit 0."""
    d = _curves()
    d.loc[(d["job"] == "j1") & (d["cap_w"] == 700), "throughput"] = 0.0
    assert main(_args(cmd, tmp_path, d)) == 2
    err = _one_error_line(capsys)
    assert "curves.csv:13: job j1" in err and "top cap 700 W" in err
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("cmd", CMDS)
def test_duplicated_caps_are_refused_with_their_line(tmp_path, capsys, cmd):
    """Before: accepted (predict gave r2 = 1.000)."""
    d = pd.concat([_curves(), _curves().iloc[[3]]], ignore_index=True)
    assert main(_args(cmd, tmp_path, d)) == 2
    assert "curves.csv:26: job j0 (H200) lists cap 500 W twice" in _one_error_line(capsys)
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("col,value,want", [("power_w", -10.0, "power > 0"),
                                            ("power_w", 0.0, "power > 0"),
                                            ("cap_w", -200.0, "cap > 0"),
                                            ("throughput", -1.0, "throughput >= 0"),
                                            ("throughput", np.inf, "finite number")])
@pytest.mark.parametrize("cmd", CMDS)
def test_impossible_values_are_refused(tmp_path, capsys, cmd, col, value, want):
    d = _curves()
    d.loc[2, col] = value
    assert main(_args(cmd, tmp_path, d)) == 2
    err = _one_error_line(capsys)
    assert f"curves.csv:4: column {col}" in err and want in err and "job j0" in err
    assert not (tmp_path / "out.csv").exists()


def _reversed() -> pd.DataFrame:
    """The test curves with j2's throughputs in reverse cap order: it falls as the cap rises."""
    d = _curves()
    rev = d["job"] == "j2"
    d.loc[rev, "throughput"] = d.loc[rev, "throughput"].to_numpy()[::-1]
    return d


def test_a_reversed_curve_is_flagged_and_warned(tmp_path, capsys):
    """Before: PFI -0.17 without a word."""
    with pytest.warns(UserWarning, match=r"falls as the cap rises .* j2 \(H200\)"):
        got = load_curves(_write(tmp_path, _reversed()))
    assert dict(got.groupby("job")["monotone"].all()) == {"j0": True, "j1": True, "j2": False,
                                                          "j3": True}
    assert main(["pfi", str(tmp_path / "curves.csv"), "-o", str(tmp_path / "pfi.csv")]) == 0
    err = capsys.readouterr().err
    assert "wattlife pfi: warning:" in err and "j2 (H200)" in err and "Traceback" not in err


def test_the_pfi_of_a_reversed_curve_is_the_formulas_value_beside_its_flag(tmp_path):
    """`pfi` writes Eq. 1 as it is for a reversed curve (negative: throughput rises as the cap is
    cut) and the row carries monotone=False, so the number is never read without its flag.
    j2 at cap c: P = 7.6 c, T = 100 ((900 - c) / 700)^0.7, so with the 700 W run as reference
    each capped point gives (1 - c/700) / (1 - ((900 - c) / 200)^0.7)."""
    assert main(["pfi", _write(tmp_path, _reversed()), "-o", str(tmp_path / "pfi.csv")]) == 0
    pfi = pd.read_csv(tmp_path / "pfi.csv").set_index("job")
    caps = np.array([200.0, 300.0, 400.0, 500.0, 600.0])
    want = np.mean((1 - caps / 700) / (1 - ((900 - caps) / 200) ** 0.7))
    assert want < 0
    assert pfi.loc["j2", "pfi"] == pytest.approx(want, rel=1e-9)
    assert pfi.loc["j2", "n_caps"] == 5
    assert pfi["monotone"].to_dict() == {"j0": True, "j1": True, "j2": False, "j3": True}
    assert (pfi.drop("j2")["pfi"] > 0).all()


@pytest.mark.parametrize("cmd", CMDS)
def test_a_reversed_curve_is_warned_about_by_every_command(tmp_path, capsys, cmd):
    """pfi, allocate and predict each finish (exit 0) and say, in one warning line, which job's
    curve falls as the cap rises."""
    assert main(_args(cmd, tmp_path, _reversed())) == 0
    err = capsys.readouterr().err
    warned = [ln for ln in err.splitlines() if f"wattlife {cmd}: warning:" in ln
              and "falls as the cap rises" in ln]
    assert len(warned) == 1 and "j2 (H200)" in warned[0], err
    assert "Traceback" not in err and (tmp_path / "out.csv").exists()


def test_small_noise_is_not_non_monotone():
    d = _curves()
    d.loc[4, "throughput"] = d.loc[3, "throughput"] * 0.995  # within 1% of the job's maximum
    assert validate_curves(d)["monotone"].all()


@pytest.mark.parametrize("cmd", ["pfi", "allocate", "predict", "calibrate-sim", "aggregate-curves"])
def test_header_only_curves_give_one_line(tmp_path, capsys, cmd):
    """Before: a KeyError traceback."""
    p = tmp_path / "curves.csv"
    p.write_text(",".join(CURVES_COLUMNS) + "\n")
    args = [cmd, str(p)]
    args += {"predict": ["--pfi", str(p), "-o", str(tmp_path / "o.csv")],
             "calibrate-sim": ["--tdp", "700"]}.get(cmd, ["-o", str(tmp_path / "o.csv")])
    assert main(args) == 2
    assert "curves.csv: header only, no data rows" in _one_error_line(capsys)


def test_header_only_pfi_table_for_predict(tmp_path, capsys):
    pfi = tmp_path / "pfi.csv"
    pfi.write_text("job,gpu_model,pfi\n")  # the pfi contract names gpu_model
    assert main(["predict", _write(tmp_path, _curves()), "--pfi", str(pfi), "-o",
                 str(tmp_path / "o.csv")]) == 2
    assert "pfi.csv: header only" in _one_error_line(capsys)


def test_an_empty_file_and_a_directory_are_named(tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("")
    assert main(["pfi", str(tmp_path / "empty.csv"), "-o", str(tmp_path / "o.csv")]) == 2
    assert "empty.csv: empty file" in _one_error_line(capsys)
    assert main(["pfi", str(tmp_path), "-o", str(tmp_path / "o.csv")]) == 2
    assert "is a directory" in _one_error_line(capsys)


def test_validate_curves_refuses_directly():
    d = _curves()
    d.loc[0, "power_w"] = -1
    with pytest.raises(ContractError, match=r"x.csv:2: column power_w"):
        validate_curves(d, "x.csv")


def test_failed_and_missing_caps_of_an_assembled_curve_are_left_out_with_a_warning(tmp_path):
    """A curve assembled from per-cap jobs (aggregate-curves --caps) keeps a failed or missing cap
    as a row with status and no numbers: PFI leaves it out and says so; a bad number on a later
    line is still named by its line in the file."""
    d = _curves(1)
    d["status"] = "ok"
    d.loc[1, ["throughput", "power_w"]] = np.nan
    d.loc[1, "status"] = "failed: the run exited with 1"
    d.loc[2, ["throughput", "power_w"]] = np.nan
    d.loc[2, "status"] = "missing"
    with pytest.warns(UserWarning, match=r"2 cap\(s\) not measured, left out: "
                                         r"j0 300 W .*j0 400 W \(missing\)"):
        out = validate_curves(d.copy(), "c.csv")
    assert sorted(out["cap_w"]) == [200, 500, 600, 700]
    d.loc[4, "power_w"] = -1.0
    with pytest.warns(UserWarning), pytest.raises(ContractError, match=r"c.csv:6: column power_w"):
        validate_curves(d, "c.csv")
