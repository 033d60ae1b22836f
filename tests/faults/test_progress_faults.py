"""Progress output of the long commands (#61): allocation, the simulated and real sweeps,
attribution of large traces and downloads each show a tqdm bar on stderr, with its description
and its count. Each test asserts the bar's own text; none depends on the machine's speed: the
`every_update_drawn` fixture makes tqdm redraw on every update (by default it redraws at most
every 0.1 s, so whether a count shows would depend on timing)."""

import io
import sys

import numpy as np
import pandas as pd
import pytest

from loopback import LoopbackServer
from synth import T0, events_frame, trace_frame

MS = 1_000_000


@pytest.fixture
def every_update_drawn(monkeypatch):
    """Every tqdm bar created during the test redraws on each update (mininterval 0, miniters
    1), whatever the caller passed."""
    import tqdm.std

    init = tqdm.std.tqdm.__dict__["__init__"]

    def eager(self, *args, **kw):
        kw.update(mininterval=0, miniters=1)
        init.__get__(self, type(self))(*args, **kw)

    monkeypatch.setattr(tqdm.std.tqdm, "__init__", eager)


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm's `disable=None` shows bars only there)."""

    def isatty(self) -> bool:
        return True


def _curves() -> pd.DataFrame:
    rows = [{"job": f"j{j}", "gpu_model": "H200", "n_gpus": 8, "cap_w": cap,
             "throughput": 100 * (cap / 700) ** (0.3 + 0.2 * j), "throughput_unit": "tokens/s",
             "power_w": 8 * cap * 0.95, "dram_active": 0.1 * (j + 1), "util_mem": 0.2 * (j + 1),
             "tensor_active": 0.5, "source": "sim"}
            for j in range(4) for cap in (200, 300, 400, 500, 600, 700)]
    return pd.DataFrame(rows)


def test_allocation_shows_its_runs(capsys, every_update_drawn):
    """One bar step per (cut, strategy) run, shown whether or not stderr is a terminal;
    `progress=False` (the benchmark) shows nothing."""
    from wattlife.analysis.allocation import simulate_allocation

    cuts = [0.0, 0.1, 0.2]
    _, summary = simulate_allocation(_curves(), cuts, n_workloads=2, n_jobs=2,
                                     strategies=["equal", "pfi_measured"])
    n = len(cuts) * summary["strategy"].nunique()  # the strategies that ran
    err = capsys.readouterr().err
    assert "allocation (random):" in err and f"0/{n}" in err and f"{n}/{n}" in err, err
    assert "100%" in err
    simulate_allocation(_curves(), cuts, n_workloads=2, n_jobs=2, progress=False)
    assert "allocation" not in capsys.readouterr().err


def test_the_allocate_command_shows_its_bar(tmp_path, capsys, every_update_drawn):
    from wattlife.cli import main

    _curves().to_csv(tmp_path / "curves.csv", index=False)
    assert main(["allocate", str(tmp_path / "curves.csv"), "-o", str(tmp_path / "a.csv"),
                 "--workloads", "2", "--jobs", "2", "--cuts", "0,0.2"]) == 0
    err = capsys.readouterr().err
    assert "allocation (random):" in err and "100%" in err, err


def test_the_simulated_sweep_shows_each_cap(capsys, every_update_drawn):
    from wattlife.simgpu_model import SimJob
    from wattlife.sweeps.simulated import sweep_simulated

    jobs = [SimJob("a", 0.2, n_gpus=1), SimJob("b", 0.6, n_gpus=1)]
    sweep_simulated(jobs, [300.0, 500.0, 700.0], n_steps=20)
    err = capsys.readouterr().err
    assert "power-cap sweep (sim):" in err and "6/6" in err and "100%" in err, err


def test_the_real_sweep_shows_each_cap(tmp_path, capsys, monkeypatch, every_update_drawn):
    """The bar of `sweep_command` over its caps (each run is replaced by one that exits 1 at
    once: the bar, not the sampler, is under test; a failed cap still counts)."""
    from wattlife import run
    from wattlife.config import SamplerSettings
    from wattlife.devices.powercap import PowerCapController
    from wattlife.sweeps.real import sweep_command

    monkeypatch.setattr(run, "run_under_sampler", lambda *a, **kw: 1)
    ctl = PowerCapController("simulated", state_file=tmp_path / "state.json")
    df = sweep_command("job", ["true"], [300, 500, 700], ctl, tmp_path / "sweep",
                       SamplerSettings.from_dict({}))
    assert df["status"].str.startswith("failed").all()
    err = capsys.readouterr().err
    assert "sweep job:" in err and "3/3" in err and "100%" in err, err


def _two_gpus() -> tuple[pd.DataFrame, pd.DataFrame]:
    t = T0 + np.arange(101) * 10 * MS
    tr = pd.concat([trace_frame(t, np.full(101, 100.0), "gpu0"),
                    trace_frame(t, np.full(101, 200.0), "gpu1")], ignore_index=True)
    return tr, events_frame([("forward", T0, T0 + 1000 * MS)])


def test_attribution_of_a_large_trace_shows_its_devices_on_a_terminal(monkeypatch,
                                                                      every_update_drawn):
    """A trace above PROGRESS_MIN_READINGS (lowered here from 2 M to 100 readings) shows a bar
    over its devices when stderr is a terminal; below it, or off a terminal, nothing."""
    from wattlife.attribution import energy

    tr, ev = _two_gpus()  # 202 readings
    monkeypatch.setattr(energy, "PROGRESS_MIN_READINGS", 100)
    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    energy.attribute_energy(tr, ev, method="integrate")
    assert "attribute:" in tty.getvalue() and "2/2" in tty.getvalue()
    assert "100%" in tty.getvalue()

    monkeypatch.setattr(energy, "PROGRESS_MIN_READINGS", 1000)  # a small trace: no bar
    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    energy.attribute_energy(tr, ev, method="integrate")
    assert "attribute" not in tty.getvalue()

    monkeypatch.setattr(energy, "PROGRESS_MIN_READINGS", 100)  # large, but not a terminal
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    energy.attribute_energy(tr, ev, method="integrate")
    assert "attribute" not in plain.getvalue()


BLOB = bytes(range(256)) * (3 * 4096 + 17)  # 3.1 MiB: four 1 MiB reads


def test_a_download_shows_its_bytes(tmp_path, capsys, every_update_drawn):
    from wattlife.prepare.fetch import fetch_http

    with LoopbackServer({"/a.bin": BLOB}) as srv:
        r = fetch_http(f"{srv.url}/a.bin", tmp_path / "a.bin")
    assert r["bytes"] == len(BLOB)
    err = capsys.readouterr().err
    assert "a.bin:" in err and "100%" in err and "3.15M/3.15M" in err, err


def test_a_copy_from_a_path_shows_its_bytes_on_a_terminal(tmp_path, monkeypatch,
                                                          every_update_drawn):
    """`fetch_path` shows a bar when stderr is a terminal (or with progress=True), not in a log."""
    from wattlife.prepare.fetch import fetch_path

    (tmp_path / "src.bin").write_bytes(BLOB)
    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    fetch_path(tmp_path / "src.bin", tmp_path / "b.bin")
    assert "b.bin:" in tty.getvalue() and "100%" in tty.getvalue()
    assert "3.15M/3.15M" in tty.getvalue()

    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    fetch_path(tmp_path / "src.bin", tmp_path / "c.bin")
    assert plain.getvalue() == ""
    fetch_path(tmp_path / "src.bin", tmp_path / "d.bin", progress=True)
    assert "d.bin:" in plain.getvalue() and "100%" in plain.getvalue()
