from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_notebook_runs_on_cached_tables(tmp_path, monkeypatch):
    """The notebook reproduces its numbers from tables alone (here: tables made by the analysis
    functions from the committed A100 reference data and a simulated sweep)."""
    import nbformat
    from nbclient import NotebookClient

    from wattlife.analysis.pfi import pfi_table
    from wattlife.config import load_config, settings
    from wattlife.sweeps.simulated import simulated_jobs, sweep_simulated

    tables = tmp_path / "run" / "tables"
    tables.mkdir(parents=True)
    cfg = load_config(REPO / "config/config.yaml")
    curves = sweep_simulated(simulated_jobs(settings(cfg).powercap), cfg["powercap"]["grid_w"])
    pfi_table(curves, n_mc=50).to_csv(tables / "pfi.csv", index=False)
    import pandas as pd

    pd.DataFrame({"workload": ["w"] * 2, "storage": "shared", "checkpoint": "on",
                  "device_kind": ["gpu", "cpu"], "energy_j": [80.0, 20.0], "share": [0.8, 0.2],
                  "source": ["sim", "estimate"]}).to_csv(tables / "device_share.csv", index=False)
    # two cells of one workload: the "per cell" section must not add them up (issue 42)
    pd.DataFrame({"workload": "w", "storage": ["shared"] * 3 + ["local"] * 2,
                  "checkpoint": ["on"] * 3 + ["off"] * 2,
                  "phase": ["forward", "backward", "backward", "forward", "backward"],
                  "device_kind": ["gpu", "gpu", "cpu", "gpu", "gpu"],
                  "energy_j": [30.0, 50.0, 20.0, 7.0, 11.0]}).to_csv(tables / "phase_summary.csv",
                                                                     index=False)
    nb = nbformat.read(REPO / "notebooks/key_numbers.ipynb", as_version=4)
    monkeypatch.setenv("WATTLIFE_RESULTS", str(tmp_path / "run"))
    monkeypatch.setenv("WATTLIFE_ROOT", str(REPO))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "ft_llama_8b_dolly" in out and "2.657" in out
    assert "sim" in out
    # per cell: shared/on backward = 50 GPU + 20 CPU = 70.0 J, 0.7 of its cell's 100 J; local/off
    # backward 11.0 J, 0.611 of 18 J; never the sums over the two cells (81 J, 37 J)
    lines = out.splitlines()
    assert any("shared" in ln and "backward" in ln and "70.0" in ln and "0.7" in ln for ln in lines)
    assert any("local" in ln and "backward" in ln and "11.0" in ln and "0.611" in ln
               for ln in lines), out
    assert "81.0" not in out and "37.0" not in out
