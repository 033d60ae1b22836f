"""benchmarks/h200_gpu_decode.py's summary over repeats (`--repeats`): intervals per setting and
each GPU setting against `cpu`, from a hand-made table with a known answer."""

import sys

import pandas as pd
import pytest
from scipy import stats

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))


def _table(rates: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for setting, values in rates.items():
        for r, v in enumerate(values, 1):
            rows.append({"setting": setting, "repeat": r, "images_per_s_step": v,
                         "share_of_synthetic": v / 400.0, "gpu_data_load_j": 1.0,
                         "share_of_eager_synthetic": v / 500.0})
    return pd.DataFrame(rows)


def test_settings_summary_intervals_and_readings():
    from h200_gpu_decode import settings_summary

    s = settings_summary(_table({"cpu": [100, 110, 90], "gpu": [200, 210, 190],
                                 "gpu-b": [95, 115, 92], "gpu-one": [300]})).set_index("setting")
    half = stats.t.ppf(0.975, 2) * 10 / 3 ** 0.5  # sd 10, n 3
    assert s.loc["cpu", "n"] == 3 and s.loc["cpu", "images_per_s_step"] == pytest.approx(100)
    assert s.loc["cpu", "rate_lo"] == pytest.approx(100 - half)
    assert s.loc["gpu", "share_of_synthetic"] == pytest.approx(0.5)
    assert s.loc["gpu", "share_of_eager_synthetic"] == pytest.approx(0.4)
    assert s.loc["gpu", "eager_share_hi"] - 0.4 == pytest.approx(half / 500)
    assert s.loc["gpu", "vs_cpu"] == pytest.approx(100)
    assert s.loc["gpu", "vs_cpu_reading"] == "differs"
    assert s.loc["gpu-b", "vs_cpu_reading"] == "within noise"
    assert s.loc["gpu-one", "vs_cpu_reading"] == "n = 1" and s.loc["gpu-one", "n"] == 1
    assert pd.isna(s.loc["cpu", "vs_cpu"])  # the baseline is not compared with itself


def test_cell_names_compose_their_settings():
    from h200_gpu_decode import TOKENS, cell_settings

    assert cell_settings("cpu") == ("cpu", 0, "", False)
    decode, more, prelude, graphs = cell_settings("gpu-no-helpers-graphs-priority-in-flight")
    assert (decode, more, graphs) == ("gpu", 0, True)
    assert prelude == (TOKENS["no-helpers"][1] + TOKENS["priority"][1]
                       + TOKENS["in-flight"][1])
    assert cell_settings("gpu-more-helpers-batched")[1:] == (2, TOKENS["batched"][1], False)
    # the committed calls' names still read as they ran
    assert "g.PACK = False" in cell_settings("gpu-graphs-bytes")[2]
    assert "a.augment(" in cell_settings("gpu-per-image")[2]
    with pytest.raises(ValueError, match="'turbo' does not start with a setting"):
        cell_settings("gpu-graphs-turbo")
    with pytest.raises(ValueError, match="starts with cpu or gpu"):
        cell_settings("tpu-graphs")
