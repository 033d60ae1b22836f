"""The PFI study's own groups: config/pfi.yaml against the published tables, the per-job
calibration of the simulated GPU to a published PFI, the published columns of the PFI table, the
production mix, and the study's allocation experiment at a small size."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattlife.analysis.allocation import PRODUCTION_MIXES, build_library, sample_workloads
from wattlife.analysis.calibration import (
    CALIBRATED_SOURCE,
    calibrate_to_pfi,
    calibrated_study_curves,
    sim_pfi,
)
from wattlife.analysis.pfi import (
    STUDY_SETTINGS,
    pfi_table,
    published_pfi,
    read_study_jobs,
    read_study_validation,
    with_published,
)
from wattlife.config import load_config
from wattlife.simgpu_model import SimGpuModel

REPO = Path(__file__).resolve().parents[2]
GRID6 = [200, 300, 400, 500, 600, 700]


@pytest.fixture(scope="module")
def cells():
    return load_config(REPO / "config/pfi.yaml")["pfi_matrix"]["cells"]


@pytest.fixture(scope="module")
def study():
    return read_study_jobs()


def _by_set(cells, name):
    return {k: c for k, c in cells.items() if c["set"] == name}


def test_every_headline_group_is_a_cell_with_its_label_grid_and_settings(cells, study):
    head = _by_set(cells, "headline")
    assert len(head) == 25
    by_label = {c["paper_job"]: c for c in head.values()}
    assert set(by_label) == set(study["job_id"])
    for _, r in study.iterrows():
        c = by_label[r["job_id"]]
        assert c["caps"] == [int(x) for x in r["caps"]]
        assert c["gpus"] == r["n_gpus"]
        assert c["caps"] == (GRID6 if r["n_gpus"] == 8 else [200, 500, 600, 700])
        assert c["task"] == ("pretrain" if r["task"] == "PT" else "lora")
        assert c.get("hardware", "h200") == "h200"
        # `assumed` is exactly the settings the paper leaves empty, and the given ones are kept
        empty = {key for col, key in STUDY_SETTINGS.items() if pd.isna(r[col])}
        assert set(c["assumed"]) == empty, r["job_id"]
        for col, key in STUDY_SETTINGS.items():
            if not pd.isna(r[col]):
                want = (r[col] == "Y") if col in ("compile", "grad_ckpt") else int(r[col])
                assert c[key] == want, (r["job_id"], key)


def test_job_counts_against_the_studys_run_counts(cells, study):
    head = _by_set(cells, "headline")
    assert sum(len(c["caps"]) for c in head.values()) == 132
    assert study["n_runs"].sum() == 131  # one 16-GPU group has 3 runs on its 4-cap grid
    short = study[study["n_runs"] < study["caps"].map(len)]
    assert list(short["job_id"]) == ["Dense FT H200x16 (Llama-3.1-70B)"]
    val = _by_set(cells, "validation")
    h100 = _by_set(cells, "h100")
    v = read_study_validation()
    heldout = v[v["role"] == "heldout_validation"]
    assert {c["paper_job"] for c in val.values()} == set(heldout["job_id"])
    assert sum(len(c["caps"]) for c in val.values()) == 24 == heldout["n_runs_h200"].sum()
    assert {c["paper_job"] for c in h100.values()} == set(v.loc[v["pfi_h100"].notna(), "job_id"])
    assert all(c["hardware"] == "h100" and c["caps"] == GRID6 for c in h100.values())
    assert v["n_runs_h100"].sum() == 34 and sum(len(c["caps"]) for c in h100.values()) == 36
    for c in list(val.values()) + list(h100.values()):  # seq/batch/compile/ckpt never given there
        never_given = {"seq_len", "batch_size", "compile", "activation_checkpointing"}
        assert never_given - set(c["assumed"]) \
            <= (never_given
                if c["set"] == "h100" and c["paper_job"] in set(study["job_id"]) else set())


def test_every_cell_has_a_model_config(cells):
    for c in cells.values():
        assert (REPO / "config/models" / f"{c['model_config']}.json").exists(), c["model_config"]


@pytest.mark.parametrize("row", range(25))
def test_simulated_gpu_calibrates_to_each_published_pfi(study, row):
    r = study.iloc[row]
    m = calibrate_to_pfi(float(r["pfi"]), r["caps"])
    assert sim_pfi(SimGpuModel(), m, r["caps"]) == pytest.approx(r["pfi"], abs=0.01)


def test_calibration_refuses_an_unreachable_pfi():
    with pytest.raises(ValueError, match="outside what the simulated GPU reaches"):
        calibrate_to_pfi(0.8, GRID6)  # below the model's PFI at m = 0 (1.0)


def test_calibrated_curves_are_labelled_and_carry_the_published_values():
    curves = calibrated_study_curves()
    assert (curves["source"] == CALIBRATED_SOURCE).all()
    assert not curves["source"].str.contains("measured").any()
    pfi = with_published(pfi_table(curves, n_mc=0), curves)
    assert len(pfi) == 25 and pfi["pfi_published"].notna().all()
    # calibrated under Eq. 1 as published; every job reaches its PFI with a curve that obeys
    # the caps (the table would state a miss, see test_pfi_physics)
    assert (pfi["pfi_eq1"] - pfi["pfi_published"]).abs().max() <= 0.01
    eight = pfi[pfi["grid"] == "200,300,400,500,600,700"]
    assert len(eight) == 16 and eight["pfi_4cap"].notna().all()
    assert eight["pfi_4cap_published"].notna().all()
    assert pfi.loc[pfi["grid"] != "200,300,400,500,600,700", "pfi_4cap"].isna().all()
    # the interval beside it is the published one
    r = pfi.set_index("job").loc["MoE FT H200x8 (gpt-oss-20b, seq4096/bs8)"]
    published = (r["pfi_published_lo"], r["pfi_published_hi"], r["pfi_4cap_published"])
    assert published == (2.615, 2.729, 3.32)


def test_published_table_has_validation_and_h100_rows():
    pub = published_pfi()
    assert len(pub) == 25 + 4 + 6
    h100 = pub[pub["hardware"] == "h100"].set_index("paper_job")["pfi_published"]
    assert h100["MoE FT H200x8 (Qwen3-30B-A3B)"] == 1.93


def test_production_mix_samples_pretraining_at_hu_et_al_share():
    lib = build_library(calibrated_study_curves())
    idx = sample_workloads(lib, 400, 100, "production", np.random.default_rng(0))
    share = (lib.task[idx] == "pretrain").mean()
    assert share == pytest.approx(PRODUCTION_MIXES["production"]["pretrain"], abs=0.003)
    with pytest.raises(ValueError, match="production"):
        sample_workloads(lib, 2, 2, "productoin", np.random.default_rng(0))
    # a mix naming a category or task no job has lists those there are, as plain names
    with pytest.raises(ValueError, match=r"names category \['foo'\] that no job has \(have "
                                         r"dense, moe_ft, moe_pt\)"):
        sample_workloads(lib, 2, 2, "foo=1", np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"names task \['pt'\] .*\(have finetune, pretrain\)"):
        sample_workloads(lib, 2, 2, "task:pt=1", np.random.default_rng(0))
    with pytest.raises(ValueError, match="category weights like 'dense=0.5"):
        sample_workloads(lib, 2, 2, "dense:0.5", np.random.default_rng(0))


def test_study_allocation_small(tmp_path):
    from wattlife.analysis.pfi_study import run_pfi_study

    paths = run_pfi_study(tmp_path, n_workloads=20, n_jobs=20, cuts=[0.0, 0.3],
                          sensitivity_workloads=0, mixes=("production",),
                          objectives=("absolute",),
                          a100=REPO / "results/reference/a100-emerald/dvfs_sweep.csv")
    s = pd.read_csv(paths["allocation_summary.csv"])
    assert set(s["mix"]) == {"production"} and set(s["objective"]) == {"absolute"}
    assert {"pfi_measured", "pfi_predicted", "category", "moe_ft_weighted",
            "oracle"} <= set(s["strategy"])
    assert (s["rel_to_oracle"] <= 1 + 1e-9).all()
    g = pd.read_csv(paths["gap_recovered.csv"])
    assert g["paper_gap_recovered"].dropna().unique().tolist() == [0.63]
    assert (tmp_path / "fig_pfi_vs_published.png").exists()
    assert (tmp_path / "fig_allocation_a100.png").exists()


def test_worse_than_equal_note_names_every_negative_cut():
    from wattlife.figures import worse_than_equal_note

    s = pd.DataFrame({"cut": [0.2, 0.4, 0.2, 0.4, 0.2, 0.4, 0.2],
                      "strategy": ["category", "category", "pfi_measured", "pfi_measured",
                                   "equal", "equal", "oracle"],
                      "gap_recovered": [-0.44, -4.3, 0.1, 0.2, 0.0, 0.0, 1.0]})
    assert worse_than_equal_note(s) == "category -0.44 at 20 %, -4.3 at 40 %"
    assert worse_than_equal_note(s[s["strategy"] != "category"]) == "none"


def test_published_figure_with_and_without_measured_values(tmp_path):
    from wattlife.figures import fig_pfi_published

    pub = published_pfi()
    pub = pub[pub["hardware"] == "h200"].head(4)
    p = pd.DataFrame({"job": pub["paper_job"], "gpu_model": "NVIDIA H200",
                      "pfi": pub["pfi_published"] + 0.05, "pfi_published": pub["pfi_published"],
                      "pfi_published_lo": pub["pfi_published_lo"],
                      "pfi_published_hi": pub["pfi_published_hi"], "pfi_4cap": np.nan,
                      "pfi_4cap_published": pub["pfi_4cap_published"], "source": "nvml-samples"})
    assert fig_pfi_published(p, tmp_path / "measured")[0].exists()
    assert fig_pfi_published(p.assign(source="sim"), tmp_path / "none")[0].exists()


def test_validation_and_h100_cells_take_ep_from_the_validation_table(cells):
    v = read_study_validation().set_index("job_id")
    for c in cells.values():
        if c["set"] not in ("validation", "h100") or c["paper_job"] not in v.index:
            continue
        ep = v.loc[c["paper_job"], "ep"]
        if pd.isna(ep):
            assert "expert_parallel" in c["assumed"] and c["expert_parallel"] == 1
        else:
            assert "expert_parallel" not in c["assumed"] and c["expert_parallel"] == int(ep)
