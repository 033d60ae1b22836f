"""The embedded demo's pipeline, end to end, on a smaller copy of the demo config. (The committed
reference results' figures, regenerated from their CSVs: tests/project/test_readme.py, where
README.md's `make figures-from-cache` runs `wattlife figures --reference`.)"""

import subprocess
import sys

import pandas as pd
import pytest

from wattlife.figures import draw_all


@pytest.mark.slow
def test_pipeline_runs_end_to_end_and_draws_every_figure(tmp_path, env_path, finished_demo):
    p = finished_demo["conf"]  # the demo, run once per session (tests/conftest.py)
    res = finished_demo["res"]
    for f in ("fig1_phase_energy_time", "fig2_device_share", "fig3_storage_checkpoint",
              "fig4_download_size", "fig5_staging_breakeven", "fig6_power_throughput", "fig7_pfi",
              "fig8_allocation", "fig9_waiting"):
        assert (res / "figures" / f"{f}.png").stat().st_size > 10_000, f
        assert (res / "figures" / f"{f}.pdf").exists()
    ph = pd.read_csv(res / "tables" / "phases.csv")
    assert len(ph.groupby(["storage", "checkpoint"])) == 4
    assert set(ph.loc[ph["device_kind"] == "gpu", "source"]) == {"sim"}
    assert set(ph["workload"]) == {"resnet", "qwen"}
    assert {"tokenize", "forward", "optimizer"} <= set(ph.loc[ph["workload"] == "qwen", "phase"])
    assert "stage_copy" in set(ph.loc[ph["storage"] == "local", "phase"])
    assert "stage_copy" not in set(ph.loc[ph["storage"] == "shared", "phase"])
    assert "checkpoint" not in set(ph.loc[ph["checkpoint"] == "off", "phase"])
    dl = pd.read_csv(res / "tables" / "downloads.csv")  # 5 downloads over loopback + 1 upload
    assert len(dl.drop_duplicates("artefact")) == 6 and set(dl["server"]) == {"loopback"}
    assert set(dl["direction"]) == {"download", "upload"}
    assert (dl["net_recv_bytes"] >= dl["bytes"]).all()
    assert set(dl.loc[dl["device_kind"] == "gpu", "source"]) == {"sim"}
    assert (dl["energy_j"] > 0).all()
    fit = pd.read_csv(res / "tables" / "download_fit.csv")
    assert set(fit.loc[fit["direction"] == "download", "n"]) == {5}
    cache = pd.read_csv(res / "tables" / "facility_cache.csv")
    assert cache["source"].str.startswith("estimate").all()
    pfi = pd.read_csv(res / "tables" / "pfi.csv")
    assert set(pfi["source"]) == {"sim"} and pfi["pfi"].between(1.0, 3.0).all()
    # figures regenerate from the tables alone
    again = draw_all(res / "tables", tmp_path / "again")
    assert len(again) == 18
    wait = pd.read_csv(res / "tables" / "waiting.csv")  # the GPU is simulated: so labelled
    assert set(wait.loc[wait["device_kind"] == "gpu", "basis"]) == {"simulated"}
    # one HTML report with every figure and its caption
    rep = tmp_path / "report.html"
    out = subprocess.run([sys.executable, "-m", "snakemake", "--report", str(rep), "--configfile",
                          str(p)], cwd=finished_demo["wf"], env=env_path, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    html = rep.read_text(errors="replace")
    for f in ("fig1_phase_energy_time", "fig4_download_size", "fig6_power_throughput",
              "fig8_allocation"):
        assert f in html
    assert "interval 50 ms" in html  # captions rendered from this run's config
    assert 'GPU backend <tt class=\\"docutils literal\\">sim</tt>' in html
