"""Custody of a measurement (wattlife.custody, issue 39), without Snakemake: attempts are sealed
and published atomically, a published cell is verified before use (cut, edited, replaced, stale),
a sealed attempt is adopted instead of measured again, leftovers of an earlier attempt never
reach a later one, a live earlier attempt is waited for, and one controller holds a results
folder. The workflow scenarios (killed controllers, two controllers) are in
tests/custody/test_custody_workflow.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from conftest import REPO
from wattlife import custody as C
from wattlife.analysis.aggregate import verify_sources
from wattlife.check import check_run
from wattlife.custody import measure as M
from wattlife.custody.attempts import mark, new_attempt
from wattlife.custody.cells import cell_state
from wattlife.custody.seal import code_version, seal_attempt

CELL = "resnet/local/ckpt-off/r1"
SLICE = {"slice": f"execute/{CELL}", "workloads": {"resnet": {"steps": 2}}}


def fake_attempt(results: Path, slice_doc=SLICE, ranks: int = 0, rows: int = 3) -> Path:
    """A sealed attempt folder as `wattlife measure` leaves one (files written by hand)."""
    a = new_attempt(C.attempts_dir(results, CELL))
    (a / "config.json").write_text(json.dumps(slice_doc) + "\n")
    (a / "trace.csv").write_text("t_ns,device\n" + "".join(f"{i},gpu0\n" for i in range(rows)))
    (a / "events.csv").write_text("t_ns,phase\n1,step\n")
    for r in range(1, ranks + 1):
        (a / f"events.rank{r}.csv").write_text("t_ns,phase\n1,step\n")
    (a / "meta.json").write_text('{"cell": {}}')
    (a / "work").mkdir()
    (a / "work" / "summary.json").write_text("{}")
    (a / "run.log").write_text("ok\n")
    seal_attempt(a, CELL, slice_doc, 1.0, 2.0, 0)
    return a


def test_a_sealed_attempt_is_published_with_a_manifest_of_every_file(tmp_path):
    a = fake_attempt(tmp_path)
    pointer = C.publish(tmp_path, a, C.cell_dir(tmp_path, CELL))
    doc = json.loads(pointer.read_text())
    assert pointer.name == f"sealed-{C.slice_hash(SLICE)}.json"
    assert set(doc["files"]) == {"config.json", "trace.csv", "events.csv", "meta.json",
                                 "work/summary.json", "run.log"}
    assert doc["files"]["trace.csv"]["rows"] == 4 and len(doc["files"]["trace.csv"]["sha256"]) == 64
    assert doc["slice"] == SLICE and doc["code"] == code_version() and doc["host"]
    assert doc["attempt_path"] == f"attempts/{CELL}/{a.name}" and "job_id" in doc["slurm"]
    cell = C.cell_dir(tmp_path, CELL)
    assert os.path.samefile(cell / "trace.csv", a / "trace.csv")  # the attempt's own file
    assert C.cell_problems(cell) == []


def test_deleting_the_cells_files_never_touches_the_attempt_and_relink_restores_them(tmp_path):
    a = fake_attempt(tmp_path)
    cell = C.cell_dir(tmp_path, CELL)
    C.publish(tmp_path, a, cell)
    for name in ("trace.csv", "events.csv", "meta.json"):  # what Snakemake does before a job
        (cell / name).unlink()
    assert (a / "trace.csv").read_text().count("\n") == 4
    assert "missing" in C.cell_problems(cell)[0][1]
    C.relink(tmp_path, cell)
    assert C.cell_problems(cell) == []


def test_a_leftover_rank_file_of_an_earlier_attempt_is_gone_after_the_next_publish(tmp_path):
    cell = C.cell_dir(tmp_path, CELL)
    C.publish(tmp_path, fake_attempt(tmp_path, ranks=1), cell)  # a 2-rank run of the cell
    assert (cell / "events.rank1.csv").exists()
    C.publish(tmp_path, fake_attempt(tmp_path, ranks=0), cell)  # then a 1-rank one
    assert not (cell / "events.rank1.csv").exists()
    assert check_run(cell, kind="auto") is not None
    assert not [f for f in check_run(cell) if "rank1" in f.file]


@pytest.mark.parametrize("damage, remedy", [
    ("cut", "relink"), ("edit", "relink"), ("cut-attempt", "re-measure")])
def test_a_cut_or_edited_trace_is_named_with_what_re_derives_it(tmp_path, damage, remedy):
    a = fake_attempt(tmp_path, rows=50)
    cell = C.cell_dir(tmp_path, CELL)
    C.publish(tmp_path, a, cell)
    data = (cell / "trace.csv").read_bytes()
    (cell / "trace.csv").unlink()  # an editor writes a new file in its place
    if damage == "cut":
        (cell / "trace.csv").write_bytes(data[: len(data) * 55 // 100])
    elif damage == "edit":
        (cell / "trace.csv").write_bytes(data.replace(b"gpu0", b"gpu1", 1))
    else:  # the attempt's own file is cut too: nothing intact is left to link
        os.chmod(a / "trace.csv", 0o644)
        (a / "trace.csv").write_bytes(data[:20])
        (cell / "trace.csv").write_bytes(data[:20])
    (file, why), = C.cell_problems(cell)
    assert file == str(cell / "trace.csv")
    assert ("cut" if damage != "edit" else "edited") in why and remedy in why


def phases(cell: Path, pointer: Path) -> Path:
    p = cell / "phases.csv"
    p.write_text("device,phase,energy_j\n" + "".join(f"gpu{i},step,{i}.5\n" for i in range(8)))
    C.seal_derived(p, pointer)
    return p


@pytest.mark.parametrize("cut_at", [0.55, "mid-row"])
def test_aggregate_and_check_refuse_a_cut_phases_file(tmp_path, cut_at):
    cell = C.cell_dir(tmp_path, CELL)
    p = phases(cell, C.publish(tmp_path, fake_attempt(tmp_path), cell))
    verify_sources([p])  # intact: used
    data = p.read_bytes()
    n = int(len(data) * cut_at) if cut_at != "mid-row" else data.rfind(b",")
    p.write_bytes(data[:n])
    with pytest.raises(ValueError, match=r"phases.csv: cut .* re-attribute it"):
        verify_sources([p])
    found = [f for f in check_run(cell) if f.code == "custody.damaged"]
    assert found and found[0].file == str(p) and "re-attribute" in found[0].message


def test_phases_of_another_publication_are_stale(tmp_path):
    cell = C.cell_dir(tmp_path, CELL)
    p = phases(cell, C.publish(tmp_path, fake_attempt(tmp_path), cell))
    C.publish(tmp_path, fake_attempt(tmp_path, rows=5), cell)  # measured again meanwhile
    with pytest.raises(ValueError, match="derived from another publication"):
        verify_sources([p])


def test_a_sealed_attempt_of_the_same_slice_is_adopted_not_measured_again(tmp_path, monkeypatch):
    a = fake_attempt(tmp_path)  # an orphan's: sealed, never published
    monkeypatch.setattr(M, "attempt_new", lambda *_: pytest.fail("measured twice"))
    assert C.measure_cell(tmp_path, CELL, SLICE) == 0
    assert C.published(C.cell_dir(tmp_path, CELL))[1]["attempt"] == a.name
    assert C.retire(tmp_path, CELL) == 1  # the user's say: measure it again
    assert C.published(C.cell_dir(tmp_path, CELL)) is None
    calls = []
    monkeypatch.setattr(M, "attempt_new", lambda *args: calls.append(args) or 0)
    assert C.measure_cell(tmp_path, CELL, SLICE) == 0 and len(calls) == 1


def test_a_failed_measurement_is_kept_aside_and_never_published(tmp_path, monkeypatch):
    monkeypatch.setattr(M, "cell_command", lambda s, c, a: f"echo partial > {a}/trace.csv; exit 3")
    assert C.measure_cell(tmp_path, CELL, SLICE) == 3
    (att,) = C.attempts_of(C.attempts_dir(tmp_path, CELL))
    assert att.state == "failed" and "exited 3" in att.reason
    assert C.published(C.cell_dir(tmp_path, CELL)) is None


def test_measure_seals_and_publishes_what_its_command_wrote(tmp_path, monkeypatch):
    monkeypatch.setattr(M, "cell_command", lambda s, c, a: f"echo t_ns > {a}/trace.csv")
    assert C.measure_cell(tmp_path, CELL, SLICE) == 0
    (att,) = C.attempts_of(C.attempts_dir(tmp_path, CELL))
    assert att.state == "sealed" and att.published and set(att.seal["files"]) == {
        "config.json", "trace.csv", "run.log"}
    assert not os.access(att.folder / "trace.csv", os.W_OK) or os.geteuid() == 0


def test_a_live_earlier_attempt_is_waited_for_then_adopted(tmp_path, monkeypatch):
    """Two measuring jobs of one cell (an orphan and a rerun): never at the same time."""
    root = C.attempts_dir(tmp_path, CELL)
    release = threading.Event()
    waited = []
    monkeypatch.setattr(M, "attempt_new", lambda *_: pytest.fail("measured twice"))

    def orphan():
        with M.cell_lock(root, 0.01):
            release.wait(10)
            C.publish(tmp_path, fake_attempt(tmp_path), C.cell_dir(tmp_path, CELL))

    t = threading.Thread(target=orphan)
    t.start()
    try:
        while not (root / ".wattlife-run.lock").exists():
            release.wait(0.01)
        # this process holds the lock in the thread: seen from here as another job's
        monkeypatch.setattr(M, "run_folder_lock", fake_foreign_lock(root, release, waited))
        assert C.measure_cell(tmp_path, CELL, SLICE, poll_s=0.01) == 0
    finally:
        release.set()
        t.join(10)
    assert waited and len(C.attempts_of(root)) == 1


def fake_foreign_lock(root, release, waited):
    """run_folder_lock as another job sees it: busy while the orphan's lock file is there."""
    import contextlib

    @contextlib.contextmanager
    def lock(folder):
        if (root / ".wattlife-run.lock").exists():
            waited.append(1)
            release.set()
            raise RuntimeError("a process (host h, pid 1) is measuring this run already")
        yield
    return lock


def test_cell_states_name_current_stale_other_code_damaged_missing_unsealed(tmp_path):
    code = code_version()["measuring_sha256"]
    assert cell_state(tmp_path, CELL, SLICE, code)["state"] == "missing"
    new_attempt(C.attempts_dir(tmp_path, CELL))  # in flight or killed: nothing sealed
    assert cell_state(tmp_path, CELL, SLICE, code)["state"] == "unsealed"
    cell = C.cell_dir(tmp_path, CELL)
    C.publish(tmp_path, fake_attempt(tmp_path), cell)
    row = cell_state(tmp_path, CELL, SLICE, code)
    assert row["state"] == "current" and row["unsealed"] == 1 and row["spares"] == 0
    assert cell_state(tmp_path, CELL, {**SLICE, "x": 1}, code)["state"] == "stale"
    assert cell_state(tmp_path, CELL, SLICE, "other")["state"] == "other-code"
    mark(fake_attempt(tmp_path), "failed.json", reason="x")  # a sealed spare, odd but counted
    (cell / "events.csv").unlink()
    row = cell_state(tmp_path, CELL, SLICE, code)
    assert row["state"] == "damaged" and row["spares"] == 1


def test_a_second_controller_refuses_naming_the_first_and_a_dead_ones_lock_is_taken(tmp_path):
    lock = C.take_controller(tmp_path)
    other = {"job_id": None, "host": socket.gethostname(), "pid": os.getpid() + 10**6,
             "started": 0.0}
    with pytest.raises(RuntimeError, match=rf"another controller runs on this results folder: "
                                           rf"a process \(host .*, pid {os.getpid()}\)"):
        C.take_controller(tmp_path, other)
    C.release_controller(tmp_path)
    assert not lock.exists()
    lock.write_text(json.dumps(other))  # a killed controller's: its process is gone
    assert C.take_controller(tmp_path) == lock
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    C.release_controller(tmp_path)


def test_a_controller_in_a_slurm_job_is_named_by_its_job_host_and_pid(tmp_path):
    """The refusal names the first controller's Slurm job, host and pid; it holds while Slurm
    lists the job, whatever host asks, and is taken over once the job has left the queue."""
    first = {"job_id": "4242", "host": "login1", "pid": 777, "started": 0.0}
    lock = C.take_controller(tmp_path, first)
    second = {"job_id": None, "host": "login2", "pid": 888, "started": 1.0}
    queued = {"4242"}
    with pytest.raises(RuntimeError) as err:
        C.take_controller(tmp_path, second, job_alive=lambda j: j in queued)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(
        f"{tmp_path}: another controller runs on this results folder: Slurm job 4242 "
        f"(host login1, pid 777), since 1970-01-01 00:00:00 UTC")
    queued.clear()  # the first's job has ended (killed with its allocation)
    assert C.take_controller(tmp_path, second, job_alive=lambda j: j in queued) == lock
    assert json.loads(lock.read_text())["host"] == "login2"


def test_the_waiting_tables_refuse_a_cut_trace_of_a_sealed_cell(tmp_path):
    from wattlife.analysis.waiting import write_waiting_tables

    cell = C.cell_dir(tmp_path, CELL)
    C.publish(tmp_path, fake_attempt(tmp_path, rows=40), cell)
    data = (cell / "trace.csv").read_bytes()
    (cell / "trace.csv").unlink()
    (cell / "trace.csv").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"trace.csv: cut .*wattlife relink"):
        write_waiting_tables(tmp_path / "phases.csv", tmp_path / "tables", 1.0,
                             traces=[cell / "trace.csv"], metas=[cell / "meta.json"])


def test_an_orphaned_slurm_jobs_cell_is_waited_for_while_squeue_lists_it(tmp_path, monkeypatch):
    """On Slurm the holder of a cell's lock is a job: a rerun's job waits while `squeue` lists
    the orphan, then adopts what it published (a fake squeue: no cluster needed)."""
    root = C.attempts_dir(tmp_path, CELL)
    root.mkdir(parents=True)
    (root / ".wattlife-run.lock").write_text(json.dumps(
        {"job_id": "4242", "host": "gpu-node-7", "pid": 1, "started": 0.0}))
    done = tmp_path / "orphan-done"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(
        f"#!/bin/sh\nif [ -e {done} ]; then echo 'slurm_load_jobs error: Invalid job id "
        f"specified' >&2; exit 1; fi\necho RUNNING\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(M, "attempt_new", lambda *_: pytest.fail("measured beside the orphan"))
    polls = []

    def sleep(_s):  # each poll of the waiting job; the orphan ends at the third
        polls.append(1)
        if len(polls) == 3:
            C.publish(tmp_path, fake_attempt(tmp_path), C.cell_dir(tmp_path, CELL))
            done.touch()

    with M.cell_lock(root, 0.0, sleep=sleep):
        assert M.adoptable(tmp_path, M.cell_target(tmp_path, CELL), C.slice_hash(SLICE)) is not None
    assert len(polls) == 3 and not (root / ".wattlife-run.lock").exists()


@pytest.mark.parametrize("changed, counts", [
    ("sampler.py", True), ("devices/nvml.py", True), ("workloads/training_loop.py", True),
    ("run/process.py", True), ("launch.py", False), ("jobs.py", False),
    ("analysis/aggregate.py", False), ("cli/custody.py", False), ("figures/__init__.py", False)])
def test_the_code_a_seal_names_is_the_measuring_code_only(tmp_path, changed, counts):
    """A change in how the command line is built (launch, jobs), in analysis or in the CLI never
    makes a cell "measured by other code"; a change in the sampler, a device, a workload or
    `wattlife run` does."""
    import wattlife
    from wattlife.custody.seal import MEASURING_CODE

    src = Path(wattlife.__file__).parent
    assert all((src / part).exists() for part in MEASURING_CODE)  # a renamed part is not lost
    pkg = tmp_path / "wattlife"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_version(pkg)
    with open(pkg / changed, "a") as fh:
        fh.write("\n# changed\n")
    assert (code_version(pkg) != before) is counts
    assert before == code_version()  # the copy hashes as the package itself


def test_sealing_reads_each_file_once_relink_reads_none_and_readers_still_verify(tmp_path,
                                                                                monkeypatch):
    """The seal's cost (issue 39): `measure` hashes each file once (publish trusts the seal it
    has just written), `relink` compares sizes only, and a reader verifies each cell once, in
    full: an edit of the same size that relink lets through is refused by the reader."""
    from wattlife.custody import seal as S

    reads: list[str] = []
    real = S.file_entry
    monkeypatch.setattr(S, "file_entry", lambda p: reads.append(Path(p).name) or real(p))
    a = new_attempt(C.attempts_dir(tmp_path, CELL))
    (a / "trace.csv").write_text("t_ns,device\n1,gpu0\n")
    (a / "meta.json").write_text("{}")
    seal = seal_attempt(a, CELL, SLICE, 1.0, 2.0, 0)
    assert sorted(reads) == ["meta.json", "trace.csv"]
    reads.clear()
    cell = C.cell_dir(tmp_path, CELL)
    C.publish(tmp_path, a, cell, fresh=seal)
    assert reads == []
    (cell / "trace.csv").unlink()
    C.relink(tmp_path, cell)
    assert reads == [] and (cell / "trace.csv").exists()
    assert C.require_sound([cell / "trace.csv", cell / "meta.json"], derived=False) == []
    assert sorted(reads) == ["meta.json", "trace.csv"]  # the cell verified once, not per file
    (a / "trace.csv").chmod(0o644)
    (a / "trace.csv").write_text("t_ns,device\n1,gpu9\n")  # same size, other bytes
    C.relink(tmp_path, cell)  # sizes match: let through
    with pytest.raises(ValueError, match="trace.csv: edited or replaced"):
        C.require_sound([cell / "trace.csv", cell / "meta.json"], derived=False)


def test_a_measurement_stopped_by_sigterm_is_kept_aside_and_sighup_does_not_stop_it(tmp_path,
                                                                                     monkeypatch):
    """SIGTERM (the user's say: scancel, kill) reaches the command's session and the attempt is
    kept aside with the reason; SIGHUP (the controller's terminal lost) is logged, not forwarded:
    the command finishes and its attempt is sealed and published."""
    import signal
    import time

    done, me = tmp_path / "done", os.getpid()
    monkeypatch.setattr(M, "cell_command", lambda s, c, a: (
        f"for i in $(seq 6000); do [ -e {done} ] && break; sleep 0.05; done; "
        f"echo t_ns > {a}/trace.csv"))

    def send(sig, then=None):
        def go():
            while not list(C.attempts_dir(tmp_path, CELL).glob("*/run.log")):
                time.sleep(0.02)
            time.sleep(0.2)
            os.kill(me, sig)  # this process: the job (`wattlife measure`) itself
            if then:
                time.sleep(0.3)
                then.touch()
        t = threading.Thread(target=go)
        t.start()
        return t

    hup_before = signal.getsignal(signal.SIGHUP)  # SIG_IGN under nohup, else SIG_DFL
    t = send(signal.SIGHUP, then=done)
    assert C.measure_cell(tmp_path, CELL, SLICE) == 0
    t.join()
    (att,) = C.attempts_of(C.attempts_dir(tmp_path, CELL))
    assert att.state == "sealed" and att.published
    assert signal.getsignal(signal.SIGHUP) is hup_before  # put back after the job
    done.unlink()
    C.retire(tmp_path, CELL)
    t = send(signal.SIGTERM)
    assert C.measure_cell(tmp_path, CELL, SLICE) != 0
    t.join()
    last = C.attempts_of(C.attempts_dir(tmp_path, CELL))[-1]
    assert last.state == "failed" and "after SIGTERM" in last.reason and not last.published


def _demo_cell_slice(tmp_path: Path, cell: str) -> dict:
    """The demo config's slice of `cell`, its storage in tmp_path (as the rule builds it)."""
    from wattlife import jobs as J
    from wattlife.config import load_config

    cfg = load_config(str(REPO / "config" / "config.yaml"))
    cfg["storage"] = {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")}
    k = M.cell_keys(cell)
    return J.cell_slice(cfg, k["workload"], k["storage"], k["checkpoint"], k["repeat"])


@pytest.mark.parametrize("drop", [True, False], ids=["removed", "kept-for-upload"])
def test_a_cells_checkpoint_folder_is_removed_when_its_job_ends_unless_kept(tmp_path, monkeypatch,
                                                                           drop):
    """Issue 40: a checkpoint is not a measurement. The cell's checkpoint folder
    (<storage>/checkpoints/<run id>/, where its workload writes it) is gone when `measure` ends,
    after the attempt is sealed and published, whose files all verify; the upload cell's is kept
    (`--keep-checkpoint`); nothing outside that folder is touched."""
    from wattlife.cli.custody import checkpoint_folder

    cell = "resnet/shared/ckpt-on/r1"
    slice_doc = _demo_cell_slice(tmp_path, cell)
    ckpt = tmp_path / "shared" / "checkpoints" / M.cell_run_id(cell)
    beside = tmp_path / "shared" / "checkpoints" / "resnet-shared-ckptoff-r1"
    beside.mkdir(parents=True)
    monkeypatch.setattr(M, "cell_command", lambda s, c, a: (
        f"mkdir -p {ckpt} && head -c 4096 /dev/zero > {ckpt}/model.pt && echo t_ns > "
        f"{a}/trace.csv"))
    folder = checkpoint_folder(slice_doc, cell)
    assert folder == ckpt
    assert C.measure_cell(tmp_path / "res", cell, slice_doc,
                          checkpoints=folder if drop else None) == 0
    (att,) = C.attempts_of(C.attempts_dir(tmp_path / "res", cell))
    assert att.state == "sealed" and att.published
    assert not C.cell_problems(C.cell_dir(tmp_path / "res", cell))
    assert ckpt.exists() is not drop and beside.exists()
    if drop:  # a failed attempt's checkpoint goes too; an adopting job's (none written) is said
        monkeypatch.setattr(M, "cell_command", lambda s, c, a: f"mkdir -p {ckpt}; exit 3")
        assert C.retire(tmp_path / "res", cell) == 1
        assert C.measure_cell(tmp_path / "res", cell, slice_doc, checkpoints=folder) == 3
        assert not ckpt.exists()


def test_drop_checkpoint_removes_only_the_folder_of_the_summarys_last_checkpoint(tmp_path,
                                                                                 capsys):
    from wattlife.cli import main

    ckpt = tmp_path / "shared" / "checkpoints" / "qwen-local-ckpton-r1"
    (ckpt / "dcp").mkdir(parents=True)
    (ckpt / "dcp" / "0.distcp").write_bytes(b"x" * 10)
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"checkpoints": [str(ckpt / "dcp")]}))
    assert main(["drop-checkpoint", str(summary)]) == 0
    assert not ckpt.exists() and (tmp_path / "shared" / "checkpoints").exists()
    assert "1 files, 10 bytes" in capsys.readouterr().out
    assert main(["drop-checkpoint", str(summary)]) == 0  # again: said, not an error
    assert "no checkpoint folder" in capsys.readouterr().out
    summary.write_text(json.dumps({"checkpoints": [str(tmp_path / "model.pt")]}))
    assert main(["drop-checkpoint", str(summary)]) == 2  # not under a checkpoints folder
    assert "not a cell's checkpoint folder" in capsys.readouterr().err and tmp_path.exists()
