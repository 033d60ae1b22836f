import os
import signal
import sys
import time

import pytest

from wattlife import markers
from wattlife.contracts import read_events


def test_context_manager_decorator_nesting_and_steps(tmp_path):
    path = tmp_path / "events.csv"
    markers.configure(path, run_id="run1")

    @markers.phase("optimizer")
    def opt():
        return 42

    for _ in range(3):
        with markers.step(items=8):
            with markers.phase("forward"):
                time.sleep(0.001)
            tok = markers.begin("backward")
            markers.end(tok)
            assert opt() == 42
    markers.reset()
    ev = read_events(path)
    assert ev.groupby("phase").size().to_dict() == {"step": 3, "forward": 3, "backward": 3,
                                                    "optimizer": 3}
    assert set(ev.loc[ev["phase"] == "step", "items"]) == {8.0}
    assert sorted(ev.loc[ev["phase"] == "forward", "step"]) == [0, 1, 2]
    assert (ev["end_ns"] >= ev["start_ns"]).all()
    assert set(ev.loc[ev["phase"] == "forward", "depth"]) == {1}
    assert set(ev["run_id"]) == {"run1"}
    fw = ev[ev["phase"] == "forward"].iloc[0]
    st = ev[(ev["phase"] == "step") & (ev["step"] == fw["step"])].iloc[0]
    assert st["start_ns"] <= fw["start_ns"] <= fw["end_ns"] <= st["end_ns"]


def test_no_events_path_means_no_op(tmp_path):
    assert markers.get_recorder() is None
    with markers.phase("forward"):
        pass
    assert markers.begin("x") is None
    assert list(tmp_path.iterdir()) == []


def test_out_of_order_end_is_an_error(tmp_path):
    markers.configure(tmp_path / "e.csv")
    a = markers.begin("a")
    markers.begin("b")
    with pytest.raises(ValueError, match="ended out of order"):
        markers.end(a)


def test_rank_files(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    markers.configure(tmp_path / "events.csv")
    with markers.phase("forward"):
        pass
    markers.reset()
    assert (tmp_path / "events.rank3.csv").exists()
    ev = read_events(tmp_path / "events.csv" if (tmp_path / "events.csv").exists()
                     else tmp_path / "events.rank3.csv")
    assert ev["rank"].tolist() == [3] and ev["local_rank"].tolist() == [1]


def test_sigkill_keeps_intervals_closed_more_than_a_second_earlier(tmp_path, children):
    path = tmp_path / "events.csv"
    code = ("import time\nfrom wattlife.markers import phase\n"
            "for i in range(100000):\n    with phase('forward'):\n        time.sleep(0.01)\n")
    proc = children.spawn([sys.executable, "-c", code],
                            env=dict(os.environ, WATTLIFE_EVENTS=str(path)))
    time.sleep(4.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ev = read_events(path)
    assert len(ev) > 100  # ~3 s of 10 ms phases before the last flush
    assert ev["end_ns"].is_monotonic_increasing
