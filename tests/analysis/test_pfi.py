from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from wattlife.analysis.curves import load_curves, steady_state
from wattlife.analysis.pfi import compare_gpus, grid_sensitivity, pfi_table, pfi_value

REPO = Path(__file__).resolve().parents[2]
A100 = REPO / "results/reference/a100-emerald/dvfs_sweep.csv"


def _curve(job, caps, power, thr, gpu="H200"):
    return pd.DataFrame({"job": job, "gpu_model": gpu, "n_gpus": 8, "cap_w": caps,
                         "throughput": thr, "throughput_unit": "tokens/s", "power_w": power})


def test_proportional_curve_has_pfi_one():
    caps = np.array([200, 300, 400, 500, 600, 700.0])
    p = caps * 8
    df = pfi_table(_curve("prop", caps, p, p * 3.0), n_mc=0)
    assert df["pfi"].iloc[0] == pytest.approx(1.0)
    assert df["pfi_area"].iloc[0] == pytest.approx(1.0)
    assert df["pfi_elastic"].iloc[0] == pytest.approx(1.0)


def test_known_value_and_points_equal_to_tmax_are_skipped():
    # power falls 50% and 20%; throughput 25% and 10% -> ratios 2 and 2; a flat point is skipped
    p = np.array([500.0, 800, 900, 1000])
    t = np.array([75.0, 90, 100, 100])
    assert pfi_value(p, t, np.array([1, 2, 3, 4.0])) == pytest.approx(2.0)


def test_monte_carlo_interval_brackets_the_value():
    caps = np.array([200, 400, 700.0])
    df = _curve("j", caps, [1600, 3000, 5000], [60, 85, 100])
    df["throughput_sd"], df["power_sd"] = 0.5, 10.0
    r = pfi_table(df, n_mc=500).iloc[0]
    assert r["pfi_lo"] < r["pfi"] < r["pfi_hi"]


def test_a100_reference_pfi():
    pfi = pfi_table(load_curves(A100), n_mc=0).set_index("job")["pfi"]
    assert len(pfi) == 8
    assert pfi["ft_llama_8b_dolly"] == pytest.approx(2.6567, abs=1e-3)
    assert pfi["pt_mpt_13b_lg"] == pytest.approx(1.4026, abs=1e-3)
    # pre-training is less flexible than fine-tuning and inference on these sweeps
    assert pfi.filter(like="pt_").max() < pfi.filter(like="ft_").min()


def test_grid_sensitivity_recomputes_on_the_subgrid():
    g = grid_sensitivity(load_curves(A100), [100, 200, 300, 400])
    assert (g["grid"] == "100,200,300,400").all()
    assert g["delta"].abs().max() > 0


def test_spearman_of_the_papers_table_8_pairs():
    h200 = [1.18, 1.22, 1.31, 1.43, 1.67, 2.00]
    h100 = [1.26, 1.19, 1.33, 1.38, 1.51, 1.93]
    df = pd.DataFrame({"job": [f"j{i}" for i in range(6)] * 2,
                       "gpu_model": ["H200"] * 6 + ["H100"] * 6,
                       "pfi": h200 + h100})
    r = compare_gpus(df, "H200", "H100")
    assert r["spearman_rho"] == pytest.approx(0.943, abs=1e-3)
    assert r["spearman_rho"] == pytest.approx(stats.spearmanr(h200, h100)[0])


def test_steady_state_rules():
    v = np.concatenate([np.zeros(20), np.arange(1, 81, dtype=float)])
    assert steady_state(v, "top10", 0.2) == pytest.approx(np.mean(np.arange(73, 81)))
    assert steady_state(v, "median", 0.2) == pytest.approx(np.median(v[20:]))
    with pytest.raises(ValueError, match="top10, median or mean"):
        steady_state(v, "max")


def test_simulated_gpu_is_calibrated_on_the_a100_sweeps_and_spans_the_h200_range():
    from wattlife.analysis.calibration import calibrate
    from wattlife.config import load_config, settings
    from wattlife.sweeps.simulated import simulated_jobs, sweep_simulated

    model, per_job, fit = calibrate(load_curves(A100), 400)
    assert fit["rmse_t_rel"] < 0.02 and len(per_job) == 8
    cfg = load_config(REPO / "config/config.yaml")
    jobs = simulated_jobs(settings(cfg).powercap)
    for j in jobs:
        j.noise = 0.0
    pfi = pfi_table(sweep_simulated(jobs, cfg["powercap"]["grid_w"],
                                    large_grid=cfg["powercap"]["grid_large_w"]), n_mc=0)
    grids = pfi.set_index("job")["grid"]
    assert grids["dense-pretrain-70b"] == "200,500,600,700"  # 16 GPUs: the paper's 4-point grid
    assert grids["dense-pretrain-8b"] == "200,300,400,500,600,700"
    assert pfi["pfi"].min() >= 1.05 and pfi["pfi"].max() <= 2.8
    assert (pfi["source"] == "sim").all()


def test_study_labels_read_the_typed_cells_with_their_defaults():
    """`wattlife pfi --config`: the CLI types the config once; the labels come from the typed
    cells, a cell without `hardware` taking `powercap.hardware` and without `set` main."""
    import copy

    from wattlife.analysis.pfi import study_labels
    from wattlife.config import load_config, settings

    cfg = copy.deepcopy(load_config(REPO / "config/pfi.yaml"))
    name, cell = next(iter(cfg["pfi_matrix"]["cells"].items()))
    cell.pop("hardware", None)
    cell.pop("set", None)
    cfg["powercap"]["hardware"] = "h100"
    lab = study_labels(settings(cfg)).set_index("job")
    assert list(lab.index) == list(cfg["pfi_matrix"]["cells"])
    assert (lab.loc[name, "hardware"], lab.loc[name, "set"]) == ("h100", "main")
    assert lab.loc[name, "paper_job"] == cell["paper_job"]
    assert study_labels(settings(load_config(REPO / "config/config.yaml"))).empty
