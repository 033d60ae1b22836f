"""Custody of a measurement through the workflow (issue 39), local profile, on a copy of the
workflow in a temporary folder (nothing is written into the checkout): one tiny CPU cell.

- a controller killed (SIGKILL, SIGTERM, SIGHUP to it alone) while its cell measures, then the
  README's recovery (`--unlock`, rerun) while the orphan still measures: the rerun waits for the
  orphan and adopts its result; one attempt measured, one published, the tables count one run;
  the recovered cell is up to date by its seal (nothing reruns), a changed slice reruns it;
- a lost terminal (a real pty hung up: SIGHUP to the controller and its process group, the
  measuring job included): the measurement goes on as an orphan, the naive rerun adopts it;
- two controllers on one results folder (the second after `--unlock`): the second refuses at
  start naming the first, the first's measurement is untouched;
- a cut or edited phases.csv / trace.csv: the tables refuse it, naming it and its remedy;
- a leftover rank file of an earlier attempt never fails a later one.
(These two start from the module's one finished run, put back before each: conftest.TreeSnapshot.)
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, TreeSnapshot, copy_workflow
from wattlife import custody as C

BIN = Path(sys.executable).parent
CELL = "resnet/local/ckpt-off/r1"
pytestmark = pytest.mark.slow


def make_wf(tmp_path: Path) -> dict:
    """The workflow copied to tmp_path/wf (conftest.copy_workflow: the checkout is never written
    to, which conftest's session check verifies), a one-cell config, its results folder."""
    w = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp_path / "res")
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")}
    cfg["data"]["images"].update(classes=2, train_per_class=4, val_per_class=1, size=24)
    cfg["workloads"]["resnet"].update(steps=2, val_every=2, ckpt_every=2, image_size=16,
                                      batch_size=4, workers=0)
    cfg["execution"].update(workloads=["resnet"], storage=["local"], checkpoint=["off"],
                            repeats=1)
    cfg["sampler"]["idle_baseline_s"] = 0.2
    for key in ("catalogue", "upload"):
        cfg["prepare"].pop(key, None)
    conf = tmp_path / "conf.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    res = tmp_path / "res"
    return {"wf": w, "conf": conf, "cfg": cfg, "res": res, "env": env, "tmp": tmp_path,
            "target": str(res / "tables/phase_summary.csv"), "cell": res / "runs" / CELL}


@pytest.fixture
def wf(tmp_path):
    return make_wf(tmp_path)


@pytest.fixture(scope="module")
def _finished_cell(tmp_path_factory):
    """One finished run of the one-cell config (its measurement and tables), kept aside."""
    live = tmp_path_factory.mktemp("finished-cell") / "live"
    live.mkdir()
    w = make_wf(live)
    done = snake(w)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    snap = TreeSnapshot(live)
    snap.keep()
    return w, snap


@pytest.fixture
def finished(_finished_cell):
    """The module's finished one-cell run, put back as it was before each test that starts from
    it (conftest.TreeSnapshot: same paths, hard links and mtimes; no test sees another's writes)."""
    w, snap = _finished_cell
    snap.restore()
    assert (w["cell"] / "trace.csv").stat().st_nlink >= 2  # still its attempt's file (hard link)
    return dict(w)


def snake(wf, *args, conf=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                           "--configfile", str(conf or wf["conf"]), *args, "--", wf["target"]],
                          cwd=wf["wf"], env=wf["env"], capture_output=True, text=True,
                          timeout=timeout)


def start(wf, name):
    """A controller in the background (its own session: signals reach it alone)."""
    log = open(wf["tmp"] / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                             "--configfile", str(wf["conf"]), "--", wf["target"]],
                            cwd=wf["wf"], env=wf["env"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_for(pred, what, timeout=600.0):
    """Poll `pred` until true (a bound against a hang, not a speed assumption)."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is no longer running
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def lock_pid(wf) -> int | None:
    lock = C.attempts_dir(wf["res"], CELL) / ".wattlife-run.lock"
    try:
        return int(json.loads(lock.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def in_flight(wf) -> bool:
    """The cell's measurement has started: its attempt's trace has rows."""
    return lock_pid(wf) is not None and any(
        p.stat().st_size > 100 for p in C.attempts_dir(wf["res"], CELL).glob("*/trace.csv"))


def tables_count(wf) -> int:
    ph = pd.read_csv(wf["res"] / "tables/phases.csv")
    return len(ph.groupby(["workload", "storage", "checkpoint", "repeat"]))


def cells_state(wf) -> str:
    out = subprocess.run(["wattlife", "cells", "--config", str(wf["conf"])], env=wf["env"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.splitlines()[0].split("\t")[1]


def dry_jobs(wf, conf=None) -> str:
    out = snake(wf, "-n", conf=conf, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("sig, wait_orphan", [
    (signal.SIGKILL, False), (signal.SIGKILL, True), (signal.SIGTERM, False),
    (signal.SIGHUP, False)], ids=["SIGKILL", "SIGKILL-orphan-awaited", "SIGTERM",
                                  "SIGHUP-to-the-controller-alone"])
def test_a_killed_controller_then_unlock_and_rerun_measures_the_cell_once(wf, sig, wait_orphan):
    """The README's recovery (`--unlock`, rerun), while the orphan still measures or (as on
    Slurm after `wattlife slurm-orphans --wait`) once it has ended."""
    first = start(wf, "first")
    try:
        wait_for(lambda: in_flight(wf) or first.poll() is not None, "the cell's measurement")
        orphan = lock_pid(wf)
        assert orphan and first.poll() is None
        if sig == signal.SIGKILL:
            os.kill(orphan, signal.SIGSTOP)  # the orphan keeps "measuring" until SIGCONT
        os.kill(first.pid, sig)
        first.wait(300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    try:
        if wait_orphan:
            os.kill(orphan, signal.SIGCONT)
            wait_for(lambda: not alive(orphan), "the orphan to end", 300)
        unlock = snake(wf, "--unlock")
        assert unlock.returncode == 0, unlock.stderr[-2000:]
        rerun = start(wf, "rerun")
        if sig == signal.SIGKILL and not wait_orphan:  # the rerun's job waits for the live orphan
            log = wf["cell"] / f"execute-{C.slice_hash(slice_of(wf))}.log"
            wait_for(lambda: log.exists() and "waiting for it to end" in log.read_text(),
                     "the rerun to wait for the orphan")
            assert len(C.attempts_of(C.attempts_dir(wf["res"], CELL))) == 1
            os.kill(orphan, signal.SIGCONT)
        assert rerun.wait(600) == 0, (wf["tmp"] / "rerun.log").read_text()[-3000:]
    finally:
        if orphan and alive(orphan):
            os.kill(orphan, signal.SIGCONT)
        wait_for(lambda: not orphan or not alive(orphan), "the orphan to end", 300)
    attempts = C.attempts_of(C.attempts_dir(wf["res"], CELL))
    published = [a for a in attempts if a.published]
    assert len(published) == 1 and all(a.state != "unsealed" for a in attempts), attempts
    if sig == signal.SIGKILL:  # the orphan's measurement is the result: measured once
        assert len(attempts) == 1
    else:  # the killed attempt is kept aside with its reason, never published
        assert all(a.state == "failed" and "SIG" in (a.reason or "") for a in attempts
                   if not a.published)
    assert tables_count(wf) == 1 and C.cell_problems(wf["cell"], ("phases.csv",)) == []
    assert cells_state(wf) == "current"
    assert "Nothing to be done" in dry_jobs(wf)  # up to date by its seal, metadata or not
    print(f"{request_id(sig, wait_orphan)}: measured {len(attempts)}, published "
          f"{len(published)}, spares {sum(a.state == 'sealed' for a in attempts) - 1}, failed "
          f"{sum(a.state == 'failed' for a in attempts)}, tables count {tables_count(wf)}")
    if sig == signal.SIGKILL:  # a changed slice reruns the orphan's cell
        cfg = yaml.safe_load(yaml.safe_dump(wf["cfg"]))
        cfg["workloads"]["resnet"]["steps"] = 3
        conf = wf["tmp"] / "changed.yaml"
        conf.write_text(yaml.safe_dump(cfg))
        assert "rule execute:" in dry_jobs(wf, conf)


def request_id(sig, wait_orphan) -> str:
    return signal.Signals(sig).name + (" (orphan awaited)" if wait_orphan else "")


def slice_of(wf) -> dict:
    from wattlife.config import load_config
    from wattlife.jobs import cell_slice

    return cell_slice(load_config(wf["conf"]), "resnet", "local", "off", 1)


class Terminal:
    """A controller on a terminal of its own, as on an ssh login: a pty whose slave is its
    controlling terminal (it leads its session; its jobs are in its process group, the terminal's
    foreground group). `hang_up` closes the master, as a lost connection does: the kernel sends
    SIGHUP to the controller, and, once it has exited, to its whole process group."""

    def __init__(self, wf, name: str, argv: list[str] | None = None) -> None:
        master, slave = os.openpty()

        def own_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # as a login shell starts it: SIGHUP at its default, whatever this test's runner
            # inherited (under `nohup` it is ignored, and a hang-up would then stop nothing)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)

        argv = argv or ["--profile", "profiles/local", "--configfile", str(wf["conf"]), "--",
                        wf["target"]]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "snakemake", *argv], cwd=wf["wf"], env=wf["env"], stdin=slave,
            stdout=slave, stderr=slave, preexec_fn=own_terminal)
        os.close(slave)
        self.master, self.log, self.stop = master, wf["tmp"] / f"{name}.log", threading.Event()
        self.reader = threading.Thread(target=self._drain)
        self.reader.start()

    def _drain(self) -> None:
        """Read the terminal (a full pty would block the controller) until told to hang up."""
        with open(self.log, "wb") as out:
            while not self.stop.is_set():
                if select.select([self.master], [], [], 0.2)[0]:
                    try:
                        out.write(os.read(self.master, 65536))
                    except OSError:  # the controller has gone
                        break
        os.close(self.master)

    def hang_up(self) -> None:
        self.stop.set()
        self.reader.join()


def test_a_lost_terminal_leaves_the_measurement_to_finish_and_the_rerun_adopts_it(wf):
    """The controller's terminal is lost (a real pty hung up, not a signal sent by hand) while
    its cell measures; then the naive recovery (`--unlock`, rerun) at once: the orphaned
    measurement goes on, is sealed and published, the rerun's job waits for it and adopts it.
    One attempt, measured once; the tables count one run."""
    term = Terminal(wf, "first")
    try:
        wait_for(lambda: in_flight(wf) or term.proc.poll() is not None, "the cell's measurement")
        orphan = lock_pid(wf)
        assert orphan and term.proc.poll() is None
        assert os.getpgid(orphan) == term.proc.pid  # the terminal's SIGHUP reaches the job
        term.hang_up()
        assert term.proc.wait(300) == -signal.SIGHUP  # Snakemake itself dies of it
    finally:
        term.hang_up()
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()
    try:
        assert snake(wf, "--unlock").returncode == 0
        rerun = snake(wf)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    finally:
        wait_for(lambda: not alive(orphan), "the orphan to end", 300)
    log = (wf["cell"] / f"execute-{C.slice_hash(slice_of(wf))}.log").read_text()
    attempts = C.attempts_of(C.attempts_dir(wf["res"], CELL))
    assert len(attempts) == 1 and attempts[0].state == "sealed" and attempts[0].published, attempts
    assert tables_count(wf) == 1 and cells_state(wf) == "current"
    assert "Nothing to be done" in dry_jobs(wf)
    print(f"lost terminal: measured {len(attempts)}, published 1, spares 0, tables count 1; "
          f"rerun's job: {'waited' if 'waiting for it to end' in log else 'adopted at once'}")


def test_a_second_controller_on_the_folder_refuses_naming_the_first(wf):
    """A second controller, with the same config and then with one that shares the first's cell
    (and adds a repeat), refuses at start naming the first (host, pid); the first's measurement is
    kept. Both seconds try while one first controller's measurement is held (its set-up is the
    expensive part), each after `--unlock`, as a user would."""
    cfg = yaml.safe_load(yaml.safe_dump(wf["cfg"]))
    cfg["execution"]["repeats"] = 2
    overlapping = wf["tmp"] / "overlapping.yaml"
    overlapping.write_text(yaml.safe_dump(cfg))
    first = start(wf, "first")
    measuring = None
    try:
        wait_for(lambda: in_flight(wf) or first.poll() is not None, "the cell's measurement")
        measuring = lock_pid(wf)
        assert measuring and first.poll() is None
        # the first's measurement held until the seconds have started: a tiny cell could otherwise
        # finish the whole run first, and a run with nothing to do starts no controller
        os.kill(measuring, signal.SIGSTOP)
        for conf in (wf["conf"], overlapping):  # same config, overlapping config
            assert snake(wf, "--unlock").returncode == 0  # Snakemake's own lock: gone for all
            second = snake(wf, conf=conf)
            assert second.returncode != 0, (conf.name, second.stdout[-2000:] +
                                            second.stderr[-2000:])
            assert (f"another controller runs on this results folder: a process (host "
                    f"{os.uname().nodename}, pid {first.pid})") in second.stdout + \
                second.stderr, conf.name
        os.kill(measuring, signal.SIGCONT)
        assert first.wait(600) == 0, (wf["tmp"] / "first.log").read_text()[-3000:]
    finally:
        if measuring and alive(measuring):
            os.kill(measuring, signal.SIGCONT)
        if first.poll() is None:
            first.kill()
            first.wait()
    assert len(C.attempts_of(C.attempts_dir(wf["res"], CELL))) == 1 and tables_count(wf) == 1
    assert not (wf["res"] / ".wattlife-controller.lock").exists()


def test_a_cut_phases_or_trace_file_is_refused_by_the_tables_with_its_remedy(finished):
    wf = finished  # measured and tabled (the module's one finished run, put back)
    cell = wf["cell"]
    phases = cell / "phases.csv"
    data = phases.read_bytes()
    phases.write_bytes(data[: len(data) * 55 // 100])  # cut at 55 %
    out = snake(wf)
    assert out.returncode != 0
    log = (wf["res"] / "logs/aggregate_phases.log").read_text() + out.stderr
    assert f"{phases}: cut" in log and "re-attribute it" in log
    assert snake(wf, "--forcerun", str(phases)).returncode == 0  # the remedy it names
    trace = cell / "trace.csv"
    data = trace.read_bytes()
    trace.unlink()  # an editor's save: a new file in its place, the attempt's own untouched
    trace.write_bytes(data.replace(b",", b";", 1))
    out = snake(wf)
    assert out.returncode != 0
    check = (cell / "check.log").read_text()
    assert f"{trace}" in check and "edited or replaced" in check and "wattlife relink" in check
    relink = subprocess.run(["wattlife", "relink", str(wf["res"]), CELL], env=wf["env"],
                            capture_output=True, text=True, timeout=60)
    assert relink.returncode == 0, relink.stderr
    assert snake(wf).returncode == 0 and tables_count(wf) == 1


def test_a_leftover_rank_file_of_an_earlier_attempt_never_fails_a_rerun(finished):
    wf = finished  # measured and tabled (the module's one finished run, put back)
    retire = subprocess.run(["wattlife", "retire", str(wf["res"]), CELL], env=wf["env"],
                            capture_output=True, text=True, timeout=60)
    assert retire.returncode == 0, retire.stderr
    shutil.copy(wf["cell"] / "run.log", wf["cell"] / "events.rank1.csv")  # left by older code
    out = snake(wf, "--forcerun", str(wf["cell"] / "trace.csv"))  # the command retire names
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (wf["cell"] / "events.rank1.csv").exists()
    attempts = C.attempts_of(C.attempts_dir(wf["res"], CELL))
    assert len(attempts) == 2 and sum(a.retired for a in attempts) == 1  # kept as a spare
    assert tables_count(wf) == 1
