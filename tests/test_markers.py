import os
import signal
import sys
import time
import warnings

import pytest

from conftest import wait_rows
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
    flushed = len(wait_rows(path, 101))  # data rows on disk before the kill
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a last line cut by the kill is reported, not fatal
        ev = read_events(path)
    assert len(ev) >= flushed - 1  # every interval flushed before the kill is kept
    assert ev["end_ns"].is_monotonic_increasing


class _FakeEvent:
    """A completed CUDA event at GPU time `t` (ns); `elapsed_time` in ms like torch's."""

    def __init__(self, t: int) -> None:
        self.t = t

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: "_FakeEvent") -> float:
        return (other.t - self.t) / 1e6


class _FakeCudaClock(markers._CudaClock):
    """`_CudaClock` without a GPU (a fake named as such): GPU time is a counter; `reanchor(off)`
    takes an anchor whose host time is `off` ns away from what the previous anchor predicts."""

    def __init__(self) -> None:
        self.gpu_ns = 1_000_000_000
        self.anchors = [(_FakeEvent(self.gpu_ns), 1_800_000_000_000_000_000)]
        self.anchored_at = time.monotonic()

    def advance(self, ns: int) -> None:
        self.gpu_ns += ns

    def event(self):
        return _FakeEvent(self.gpu_ns), len(self.anchors) - 1

    def maybe_reanchor(self) -> None:
        pass

    def reanchor(self, off_ns: int) -> None:
        ev = _FakeEvent(self.gpu_ns)
        self.anchors.append((ev, self.to_ns(ev, len(self.anchors) - 1) + off_ns))


def test_gpu_timeline_boundary_across_anchors_is_clamped_so_rows_nest(tmp_path):
    """The H200 case: `checkpoint` converted through one anchor, the next `step` through the
    next, which maps the GPU clock 116 µs earlier; the rows written still nest."""
    from wattlife.attribution import phase_tree

    path = tmp_path / "events.csv"
    rec = markers.configure(path, run_id="r")
    rec.cuda = clock = _FakeCudaClock()
    with markers.phase("checkpoint"):
        clock.advance(6_000_000_000)
    rec.flush()  # resolved through anchor 0; then a re-anchor between top-level phases
    clock.reanchor(-116_000)
    with markers.step(items=8):
        with markers.phase("data_load"):
            clock.advance(20_000)
        with markers.phase("forward"):
            clock.advance(300_000_000)
    with markers.step(items=8):
        with markers.phase("forward"):
            clock.advance(300_000_000)
    markers.reset()
    ev = read_events(path).set_index("phase", append=True)
    assert set(ev["clock"]) == {"cuda"}
    ck = ev.xs("checkpoint", level="phase").iloc[0]
    st = ev.xs("step", level="phase").sort_values("start_ns")
    assert st["start_ns"].iloc[0] == ck["end_ns"]  # clamped onto the checkpoint's end
    assert st["clamp_ns"].iloc[0] == 116_000 and st["clamp_ns"].iloc[1] == 0
    dl = ev.xs("data_load", level="phase").iloc[0]
    # 20 µs long, it lay wholly before the checkpoint's end: both bounds move (116 + 96 µs)
    assert dl["clamp_ns"] == 212_000 and dl["start_ns"] == dl["end_ns"] == ck["end_ns"]
    # the first forward started 96 µs before the checkpoint's end
    assert ev.xs("forward", level="phase")["clamp_ns"].tolist() == [96_000, 0]
    phase_tree(ev.reset_index("phase"))  # strict nesting (no tolerance): no ContractError


def test_host_timed_phase_open_when_gpu_timeline_starts_keeps_order(tmp_path):
    path = tmp_path / "events.csv"
    rec = markers.configure(path, run_id="r")
    outer = markers.begin("setup")  # host-timed: opened before the GPU timeline
    rec.cuda = clock = _FakeCudaClock()
    with markers.phase("model_load"):
        clock.advance(1000)
    markers.end(outer)
    markers.reset()
    ev = read_events(path)
    assert ev["phase"].tolist() == ["model_load", "setup"]
    assert ev["clock"].tolist() == ["cuda", "host"]
