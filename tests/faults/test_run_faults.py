"""Faults around `wattlife run` (issue #18): one test per case. Real processes, real files; a full
disk is /dev/full (ENOSPC on every write) reached through a symlink in tmp_path."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import gone
from wattlife.config import SamplerSettings
from wattlife.contracts import read_events

LOOP = ("import os, sys, time\nfrom pathlib import Path\nfrom wattlife.markers import phase, step\n"
        "d = Path({d!r})\n(d / 'pid').write_text(str(os.getpid()))\n"
        "for i in range({n}):\n"
        "    with step(items=1):\n"
        "        with phase('forward'):\n            time.sleep(0.01)\n"
        "    if i == 2:\n        (d / 'ready').touch()\n"
        "(d / 'done').touch()\n")


def _cmd(tmp_path, code, *extra, events=None, trace=None):
    return [sys.executable, "-m", "wattlife.cli", "run",
            "--trace", str(trace or tmp_path / "trace.csv"),
            "--events", str(events or tmp_path / "events.csv"),
            "--gpu", "sim", "--cpu", "estimate", "--idle-s", "0.1", *extra,
            "--", sys.executable, "-c", code]


@pytest.fixture
def env(env_path, tmp_path):
    """Fallback files (temporary folder) land in tmp_path."""
    return {**env_path, "TMPDIR": str(tmp_path)}


@pytest.fixture
def run(children, env):
    """Run `wattlife run` to its end, in its own process group (ended on timeout)."""
    def go(tmp_path, code, *extra, **kw):
        return children.run(_cmd(tmp_path, code, *extra, **kw), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=120)
    return go


def _wait_for(path: Path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_events_on_a_full_disk_never_stop_the_workload(tmp_path, run):
    (tmp_path / "events.csv").symlink_to("/dev/full")
    out = run(tmp_path, LOOP.format(d=str(tmp_path), n=150))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "done").exists()  # the training loop ran to its end
    assert out.stderr.count("No space left on device;") == 1  # reported once
    meta = json.loads((tmp_path / "meta.json").read_text())
    rep = meta["recording"]["events"]
    assert meta["recording"]["complete"] is False
    summary = [m["summary"] for m in rep if "summary" in m][0]
    assert "No space left" in " ".join(summary["errors"])
    # nothing lost: every row is in the fallback file meta.json names
    assert summary["rows_written"] == 0 and summary["rows_dropped"] == 0
    ev = read_events(summary["fallback"])
    assert (ev["phase"] == "forward").sum() == 150 and summary["rows_in_fallback"] == 300
    assert Path(summary["fallback"]).parent == tmp_path


def test_trace_on_a_full_disk_keeps_the_workload_and_meta(tmp_path, run):
    (tmp_path / "trace.csv").symlink_to("/dev/full")
    out = run(tmp_path, LOOP.format(d=str(tmp_path), n=60))
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("wattlife sampler: cannot write") == 1
    meta = json.loads((tmp_path / "meta.json").read_text())
    tr = meta["recording"]["trace"]
    assert tr["write_errors"] >= 1 and tr["rows_written"] == 0
    assert tr["rows_in_fallback"] > 10 and Path(tr["fallback"]).exists()
    assert (read_events(tmp_path / "events.csv")["phase"] == "forward").sum() == 60


def test_unwritable_meta_path_falls_back_to_the_temporary_folder(tmp_path, run):
    (tmp_path / "file").write_text("not a folder")
    out = run(tmp_path, "pass", "--meta", str(tmp_path / "file" / "meta.json"))
    assert out.returncode == 0
    assert "meta.json is in" in out.stderr
    fallback = out.stderr.split("meta.json is in ")[1].split()[0]
    assert json.loads(Path(fallback).read_text())["exit_code"] == 0


def test_unwritable_trace_path_is_refused_before_the_workload_starts(tmp_path, run):
    (tmp_path / "file").write_text("not a folder")
    previous = "run_id,host,rank,phase,start_ns,end_ns,step,items,local_rank,depth,clock\n"
    (tmp_path / "events.csv").write_text(previous)
    out = run(tmp_path, LOOP.format(d=str(tmp_path), n=1),
               trace=tmp_path / "file" / "trace.csv")
    assert out.returncode == 2
    assert "--trace" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "pid").exists()
    assert (tmp_path / "events.csv").read_text() == previous  # the previous run's events kept


@pytest.mark.slow
def test_terminal_ctrl_c_reaches_the_workload_once(tmp_path, env, children):
    """Ctrl-C = SIGINT to wattlife's whole process group. The workload's KeyboardInterrupt
    handler takes 0.5 s to checkpoint; a second SIGINT would interrupt it. 10 runs at once."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom wattlife.markers import phase\n"
            "d = Path(sys.argv[1])\n"
            "try:\n    while True:\n        with phase('forward'):\n            time.sleep(0.01)\n"
            "        (d / 'ready').touch()\n"
            "except KeyboardInterrupt:\n    time.sleep(0.5)\n"
            "    (d / 'checkpoint').write_text('saved')\n    raise\n")
    procs = []
    for k in range(10):
        d = tmp_path / f"r{k}"
        d.mkdir()
        cmd = _cmd(d, code) + [str(d)]
        procs.append((d, children.spawn(cmd, env=env, stderr=subprocess.PIPE)))
    for d, _ in procs:
        _wait_for(d / "ready")
    for _, p in procs:
        os.killpg(p.pid, signal.SIGINT)  # what the terminal does
    codes = [p.wait(timeout=60) for _, p in procs]
    saved = sum((d / "checkpoint").exists() for d, _ in procs)
    assert saved == 10
    assert codes == [128 + signal.SIGINT] * 10  # the workload re-raised: killed by SIGINT
    meta = json.loads((procs[0][0] / "meta.json").read_text())
    assert meta["signals"]["received"] == ["SIGINT"]
    assert meta["signals"]["forwarded_to_cmd_group"] == ["SIGINT"]
    assert meta["exit_signal"] == "SIGINT"


def test_workload_dies_with_wattlife_even_after_sigkill(tmp_path, env, children, run):
    p = children.spawn(_cmd(tmp_path, LOOP.format(d=str(tmp_path), n=100000)), env=env)
    _wait_for(tmp_path / "ready")
    pid = int((tmp_path / "pid").read_text())
    children.adopt_group(pid)  # the workload leads its own group: end it too if the test fails
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert gone(pid), "the workload outlived wattlife"
    # the killed run's lock is released by the kernel: a new run on the same events file works
    out = run(tmp_path, "pass")
    assert out.returncode == 0, out.stderr


def test_sigterm_ended_workload_gives_143(tmp_path, env, children):
    p = children.spawn(_cmd(tmp_path, LOOP.format(d=str(tmp_path), n=100000)), env=env)
    _wait_for(tmp_path / "ready")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["exit_code"] == 143 and meta["exit_signal"] == "SIGTERM"


def test_leftover_processes_of_the_workload_are_ended(tmp_path, run):
    """CMD exits leaving a background child in its group: wattlife ends it."""
    code = ("import subprocess, sys\nfrom pathlib import Path\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
            f"Path({str(tmp_path / 'orphan')!r}).write_text(str(p.pid))\n")
    out = run(tmp_path, code)
    assert out.returncode == 0, out.stderr
    assert gone(int((tmp_path / "orphan").read_text()), timeout=1)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["signals"]["leftover_processes_ended"] == 1


def test_two_runs_cannot_share_an_events_file(tmp_path, env, children, run):
    a = children.spawn(_cmd(tmp_path, LOOP.format(d=str(tmp_path), n=100000)), env=env)
    _wait_for(tmp_path / "ready")
    deadline = time.monotonic() + 30
    while len((tmp_path / "events.csv").read_text().splitlines()) < 3:  # A's first flush
        assert time.monotonic() < deadline
        time.sleep(0.05)
    other = tmp_path / "other"
    other.mkdir()
    out = run(other, "pass", events=tmp_path / "events.csv")
    assert out.returncode == 2
    assert "in use by another wattlife run" in out.stderr and "--events" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=30) == 143
    assert (read_events(tmp_path / "events.csv")["phase"] == "forward").sum() > 2  # A's rows kept


@pytest.mark.parametrize("value", ["-50", "0", "nan", "abc"])
def test_interval_ms_must_be_positive(tmp_path, env, value):
    out = subprocess.run(_cmd(tmp_path, "pass", "--interval-ms", value), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--interval-ms" in out.stderr and "> 0" in out.stderr
    assert not (tmp_path / "trace.csv").exists()


def test_config_interval_ms_must_be_positive():
    from wattlife.sampler import build_backends

    with pytest.raises(ValueError, match=r"sampler.interval_ms must be .* > 0, got -50"):
        build_backends(SamplerSettings.from_dict({"interval_ms": -50, "gpu": "none",
                                                  "cpu": "estimate"}))


def test_missing_command_gives_127_and_meta(tmp_path, env):
    out = subprocess.run(_cmd(tmp_path, "pass")[:-3] + ["no-such-command-xyz"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 127
    assert "cannot start 'no-such-command-xyz'" in out.stderr
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["exit_code"] == 127 and "No such file" in meta["start_error"]


def test_events_written_once_the_disk_frees_up_nothing_lost_nothing_doubled(tmp_path, monkeypatch,
                                                                            capsys):
    """The markers' writer while the disk is full, including a write cut in the middle of a row,
    then free again: every row lands once, in order; the failure is reported once."""
    import errno

    from wattlife import markers, safewrite

    real_write = os.write
    state = {"full": False, "cut": False}

    def write(fd, data):
        if state["cut"]:  # half of the bytes get out, then the disk is full
            state["cut"], state["full"] = False, True
            return real_write(fd, bytes(data[:len(data) // 2 + 3]))
        if state["full"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(safewrite.os, "write", write)
    rec = markers.configure(tmp_path / "events.csv", run_id="r")
    for k in range(30):
        if k == 10:
            state["cut"] = True
        if k == 20:
            state["full"] = False
        with markers.phase("forward"):
            pass
        rec.flush()
    markers.reset()
    ev = read_events(tmp_path / "events.csv")
    assert len(ev) == 30 and ev["start_ns"].is_monotonic_increasing
    assert capsys.readouterr().err.count("No space left on device;") == 1


def test_events_still_unwritable_at_exit_go_to_a_fallback_file(tmp_path, monkeypatch):
    import errno

    from wattlife import markers, safewrite

    monkeypatch.setattr(safewrite.tempfile, "tempdir", str(tmp_path))  # the fallback folder
    real = os.write

    def events_disk_full(fd, data):  # only the events file's disk is full
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/events.csv"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(safewrite.os, "write", events_disk_full)
    rec = markers.configure(tmp_path / "events.csv", run_id="r")
    for _ in range(5):
        with markers.phase("forward"):
            pass
    rec.close()
    s = rec._out.summary()
    assert s["rows_written"] == 0 and s["rows_in_fallback"] == 5 and s["rows_dropped"] == 0
    assert "No space left" in s["errors"][0]
    assert (read_events(s["fallback"])["phase"] == "forward").sum() == 5


def test_ctrl_c_during_the_idle_baseline_starts_nothing(tmp_path, env, children):
    p = children.spawn(_cmd(tmp_path, LOOP.format(d=str(tmp_path), n=5), "--idle-s", "60"),
                       env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "events.csv.lock").exists():  # wattlife holds the run: idle baseline
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(timeout=30) == 130
    assert not (tmp_path / "pid").exists()
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["exit_code"] == 130 and "before CMD started" in meta["start_error"]


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, states: str, timeout=20.0) -> str:
    deadline = time.monotonic() + timeout
    while _state(pid) not in states and time.monotonic() < deadline:
        time.sleep(0.02)
    return _state(pid)


def test_ctrl_z_stops_and_fg_continues_the_workload_too(tmp_path, env, children):
    p = children.spawn(_cmd(tmp_path, LOOP.format(d=str(tmp_path), n=100000)), env=env)
    _wait_for(tmp_path / "ready")
    pid = int((tmp_path / "pid").read_text())
    children.adopt_group(pid)
    os.killpg(p.pid, signal.SIGTSTP)  # what the terminal does on Ctrl-Z
    assert _wait_state(pid, "T") == "T"  # the workload stopped with wattlife
    assert _wait_state(p.pid, "T") == "T"
    os.killpg(p.pid, signal.SIGCONT)  # what the shell's `fg` does
    assert _wait_state(pid, "RS") in "RS"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143


def test_events_folder_unusable_in_the_workload_never_raises(tmp_path, monkeypatch):
    """Markers pointed (outside `wattlife run`) at a path whose folder is a file: the training
    loop runs on, the rows end in the fallback file."""
    from wattlife import markers, safewrite

    monkeypatch.setattr(safewrite.tempfile, "tempdir", str(tmp_path))
    (tmp_path / "file").write_text("x")
    rec = markers.configure(tmp_path / "file" / "events.csv", run_id="r")
    for _ in range(3):
        with markers.step(items=1):
            with markers.phase("forward"):
                pass
    rec.close()
    s = rec._out.summary()
    assert s["rows_in_fallback"] == 6 and "cannot open" in s["errors"][0]
    assert len(read_events(s["fallback"])) == 6


def test_memory_bound_while_the_disk_is_full_counts_dropped_rows(tmp_path, monkeypatch):
    from wattlife import safewrite

    monkeypatch.setattr(safewrite.tempfile, "tempdir", str(tmp_path))
    (tmp_path / "t.csv").symlink_to("/dev/full")
    out = safewrite.SafeAppender(tmp_path / "t.csv", "a,b\n", "test", max_pending_bytes=40)
    for k in range(10):
        out.write(f"{k},{k}\n")  # 4 bytes a row; the header's 4 bytes are queued too
    s = out.close()
    assert s["rows_in_fallback"] == 9 and s["rows_dropped"] == 1  # 4 + 9*4 = 40 bytes kept
    assert s["rows_in_fallback"] + s["rows_dropped"] + s["rows_written"] == 10


def test_a_sweep_stops_when_wattlife_is_signalled(tmp_path):
    """In-process (as `sweep` calls it): a SIGTERM to this process is forwarded to CMD, and once
    CMD has ended and meta.json is written it reaches the caller, instead of being swallowed and
    the next cap started."""
    from wattlife.run import run_under_sampler

    code = ("import os, signal, time\nos.kill(os.getppid(), signal.SIGTERM)\n"
            "time.sleep(30)\n")  # ended by the forwarded SIGTERM
    with pytest.raises(SystemExit) as exc:
        run_under_sampler([sys.executable, "-c", code], tmp_path / "trace.csv",
                          tmp_path / "events.csv",
                          settings=SamplerSettings.from_dict({"gpu": "sim", "cpu": "none"}),
                          reraise_signals=True)
    assert exc.value.code == 143
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["exit_code"] == 143 and meta["signals"]["forwarded_to_cmd_group"] == ["SIGTERM"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers put back
