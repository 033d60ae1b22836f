"""Compilation and warm-up as their own phases, and one process on several GPUs (issue 26):
known answers on hand-made traces and events, attributed through `attribute_files`."""

import json
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from synth import T0, trace_frame
from wattlife.attribution import attribute_files
from wattlife.attribution.warmup import label_warmup, step_rows, with_compile_rows
from wattlife.contracts import ContractError, GpuIdentity
from wattlife.run import single_process_gpus

S = 1_000_000_000
# inside each 1 s step: forward [0, 0.4), backward [0.4, 0.9), optimizer [0.9, 1.0)
PARTS = (("forward", 0.0, 0.4), ("backward", 0.4, 0.9), ("optimizer", 0.9, 1.0))


def _events(n_steps: int = 8, rank: int = 0) -> pd.DataFrame:
    rows = []
    for k in range(n_steps):
        t = T0 + (1 + k) * S
        rows.append(("step", t, t + S, 1, 100.0))
        rows += [(p, t + int(a * S), t + int(b * S), 2, np.nan) for p, a, b in PARTS]
    return pd.DataFrame({"run_id": "r", "host": "h", "rank": rank,
                         "phase": [r[0] for r in rows], "start_ns": [r[1] for r in rows],
                         "end_ns": [r[2] for r in rows], "step": 0,
                         "items": [r[4] for r in rows], "depth": [r[3] for r in rows]})


def _power(t_ns: np.ndarray, busy_w: dict[str, float], compile_w: float) -> np.ndarray:
    """100 W before the first step; then per part of each step; step 0's forward and backward
    (the compiling calls) at `compile_w`."""
    rel = (t_ns - T0 - 5_000_000) / S  # a reading averages the 10 ms before it
    p = np.full(len(t_ns), 100.0)
    for k in range(8):
        for name, a, b in PARTS:
            m = (rel >= 1 + k + a) & (rel < 1 + k + b)
            p[m] = compile_w if k == 0 and name != "optimizer" else busy_w[name]
    return p


def _write(tmp_path, devices=("gpu0",), compiled=True, meta=None):
    t = T0 + np.arange(0, 1001) * 10_000_000  # 10 s, a reading every 10 ms
    busy = {"forward": 500.0, "backward": 600.0, "optimizer": 300.0}
    tr = pd.concat([trace_frame(t, _power(t, busy, 200.0), device=d) for d in devices])
    tr.to_csv(tmp_path / "trace.csv", index=False)
    _events().to_csv(tmp_path / "events.csv", index=False)
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "summary.json").write_text(json.dumps({"compile": compiled}))
    if meta is not None:
        (tmp_path / "meta.json").write_text(json.dumps(meta))
    return tmp_path / "trace.csv", tmp_path / "events.csv"


def test_compile_and_warmup_are_their_own_rows_forward_and_backward_are_post_warmup(tmp_path):
    """A compiled run recorded without `compile` markers: its first forward and backward are
    read as `compile`, the first 3 steps as `warmup`; forward/backward hold the 5 post-warm-up
    steps."""
    trace, events = _write(tmp_path)
    ph = attribute_files(trace, events, tmp_path / "phases.csv", method="integrate")
    e = ph[ph["device"] == "gpu0"].set_index("phase")["energy_j"]
    assert e["compile"] == pytest.approx(0.9 * 200.0, rel=1e-6)
    assert e["warmup"] == pytest.approx(0.1 * 300.0 + 2 * (0.4 * 500 + 0.5 * 600 + 0.1 * 300),
                                        rel=1e-6)
    assert e["forward"] == pytest.approx(5 * 0.4 * 500.0, rel=1e-6)
    assert e["backward"] == pytest.approx(5 * 0.5 * 600.0, rel=1e-6)
    t = ph[ph["device"] == "gpu0"].set_index("phase")["time_s"]
    assert t["forward"] == pytest.approx(5 * 0.4) and t["compile"] == pytest.approx(0.9)
    raw = attribute_files(trace, events, tmp_path / "raw.csv", method="integrate",
                          warmup_labels=False)
    assert not {"compile", "warmup"} & set(raw["phase"])  # the names as recorded, on request


def test_an_uncompiled_run_has_warmup_but_no_compile_and_marked_compile_is_kept(tmp_path):
    trace, events = _write(tmp_path, compiled=False)
    ph = attribute_files(trace, events, tmp_path / "phases.csv", method="integrate")
    assert "compile" not in set(ph["phase"]) and "warmup" in set(ph["phase"])
    # a workload that marks `compile` itself (nested in forward, same bounds): read as marked
    ev = _events()
    first = ev[ev["phase"] == "forward"].head(1).assign(phase="compile", depth=3)
    marked = label_warmup(pd.concat([first, ev], ignore_index=True), compiled=True)
    assert (marked["phase"] == "compile").sum() == 1
    assert step_rows(ev)["warmup"].tolist() == [True] * 3 + [False] * 5
    assert not step_rows(ev.head(5 * 4))["warmup"].any()  # 5 steps: none is warm-up


def test_a_background_write_inside_a_warmup_step_keeps_its_name(tmp_path):
    """A background checkpoint write (a concurrent phase) that starts and ends inside warm-up
    step 0 is not renamed `warmup`: it stays out of the timeline, its time with the step's
    phases (renamed, it joined the timeline and overlapped the step's forward: an error)."""
    trace, events = _write(tmp_path)
    ev = pd.read_csv(events)
    t = T0 + S  # step 0's start
    write = ev.head(1).assign(phase="checkpoint_write", start_ns=t + S // 5,
                              end_ns=t + S // 2, depth=1, items=np.nan)
    ev = pd.concat([ev, write], ignore_index=True)
    labelled = label_warmup(ev, compiled=True)
    assert (labelled["phase"] == "checkpoint_write").sum() == 1
    ev.to_csv(events, index=False)
    ph = attribute_files(trace, events, tmp_path / "phases.csv", method="integrate")
    assert "checkpoint_write" not in set(ph["phase"])
    e = ph[ph["device"] == "gpu0"].set_index("phase")["energy_j"]
    assert e["compile"] == pytest.approx(0.9 * 200.0, rel=1e-6)  # as without the write


def _busy_meta(local_ranks):
    return {"idle_baseline": {"start_ns": T0, "end_ns": T0 + S // 2},
            "gpus": [{"device": f"gpu{k}", "local_rank": r, "cuda_ordinal": k}
                     for k, r in enumerate(local_ranks)]}


def test_one_process_driving_two_busy_gpus_gives_both_its_phases(tmp_path):
    trace, events = _write(tmp_path, devices=("gpu0", "gpu1"), meta=_busy_meta([0, 0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no GPU is left unclaimed
        ph = attribute_files(trace, events, tmp_path / "phases.csv", method="integrate")
    e = ph.set_index(["device", "phase"])["energy_j"]
    for d in ("gpu0", "gpu1"):
        assert e[(d, "forward")] == pytest.approx(1000.0, rel=1e-6)
        assert e[(d, "backward")] == pytest.approx(1500.0, rel=1e-6)
    assert "idle" not in set(ph["phase"])


def test_a_busy_gpu_no_rank_claims_warns_with_its_mean_power_and_strict_refuses(tmp_path):
    trace, events = _write(tmp_path, devices=("gpu0", "gpu1"), meta=_busy_meta([0, 1]))
    with pytest.warns(UserWarning, match=r"h/gpu1: no rank claims this GPU, but its mean power "
                                         r"\d+ W is well above its idle floor 100 W"):
        ph = attribute_files(trace, events, tmp_path / "phases.csv", method="integrate")
    assert set(ph.loc[ph["device"] == "gpu1", "phase"]) <= {"idle", "unattributed"}
    with pytest.raises(ContractError, match="gpu1"):
        attribute_files(trace, events, tmp_path / "strict.csv", method="integrate", strict=True)


def test_an_overlap_names_the_phases_and_lines_the_file_records(tmp_path):
    """Step 0 is warm-up (its rows relabelled `warmup`, its forward and backward copied as
    `compile`) and meta.json adds wrapper rows without a line (the line column turns float):
    the overlap error still names `backward` and `forward` at the file's integer lines."""
    trace, events = _write(tmp_path, meta=_busy_meta([0]))
    lines = events.read_text().splitlines(keepends=True)
    assert lines[2].split(",")[3] == "forward" and lines[3].split(",")[3] == "backward"
    cells = lines[3].split(",")
    cells[4] = str(int(lines[2].split(",")[4]) + S // 10)  # backward starts in forward (0.3 s)
    lines[3] = ",".join(cells)
    events.write_text("".join(lines))
    with pytest.raises(ContractError) as err:
        attribute_files(trace, events, tmp_path / "phases.csv", method="integrate")
    assert re.search(rf"phase 'backward' \({re.escape(str(events))}:4\) .* overlaps 'forward' "
                     rf"\({re.escape(str(events))}:3\) .* by 300.000 ms", str(err.value))
    assert "warmup" not in str(err.value) and ".0)" not in str(err.value)


def test_wattlife_run_gives_a_single_process_every_visible_gpu():
    gpus = [GpuIdentity(device=f"gpu{k}", ordinal=k, local_rank=k) for k in range(2)]
    assert [g.local_rank for g in single_process_gpus(["python", "train.py"], gpus)] == [0, 0]
    for cmd in (["torchrun", "--nproc-per-node", "2", "x.py"], ["/usr/bin/torchrun", "x"],
                ["python", "-m", "torch.distributed.run", "x.py"], ["sh", "-c", "srun python x"]):
        assert single_process_gpus(cmd, gpus) == gpus


def test_check_names_a_compiled_run_without_compile_rows_and_a_run_without_steady_steps(tmp_path):
    from wattlife.check import warmup_findings

    ev = _events()
    codes = [c for _, c, _, _ in warmup_findings(ev, {"compile": True}, "e", "s")]
    assert codes == ["events.compile-unmarked"]
    assert warmup_findings(with_compile_rows(ev, True), {"compile": True}, "e", "s") == []
    short = ev[ev["start_ns"] < T0 + 5 * S]  # 4 steps
    assert [c for _, c, _, _ in warmup_findings(short, None, "e", "s")] == ["steps.no-steady"]
    # a summary timing its step basis on the events agrees with them within 0.1 %
    good = {"throughput": 100.0, "step_clock": "cuda"}
    assert warmup_findings(ev, good, "e", "s") == []
    bad = [c for _, c, _, _ in warmup_findings(ev, {**good, "throughput": 101.0}, "e", "s")]
    assert bad == ["summary.step-throughput"]


def test_a_compiled_runs_fixed_length_counts_from_the_end_of_its_compiling_step(monkeypatch):
    """duration_s = 10 with a first step of 100 s (compilation): 10 more 1 s steps, not none."""
    from types import SimpleNamespace

    from wattlife.workloads import training_loop as tl

    clock = {"t": 0.0, "steps": 0}

    def train_step():
        clock["steps"] += 1
        clock["t"] += 100.0 if clock["steps"] == 1 else 1.0
        return 1.0, None

    monkeypatch.setattr(tl.time, "monotonic", lambda: clock["t"])
    summary = SimpleNamespace(restart_clock=lambda: None, add_step=lambda items: None,
                              stop_clock=lambda: None,
                              end_pause=lambda: None, val_acc=None, checkpoints=[])
    for after, want in ((True, 11), (False, 1)):
        clock.update(t=0.0, steps=0)
        sched = tl.Schedule(steps=1000, duration_s=10.0, clock_after_first_step=after)
        got = tl.run_training_loop(
            train_step, model=SimpleNamespace(train=lambda: None), schedule=sched,
            batches=SimpleNamespace(epoch=0), items_per_step=1.0, summary=summary,
            dist=SimpleNamespace(rank=0, world=1), device="cpu")
        assert got.steps == want


def test_the_wall_basis_ends_with_the_training_loop(monkeypatch, tmp_path):
    """`throughput_wall` spans the loop only: what follows it (a loader's shut-down, the final
    synchronisation, writing the summary) is not training time. Clock faked: 4 steps of 1 s,
    then 100 s after the loop."""
    from types import SimpleNamespace

    from wattlife.workloads import summary as summary_mod
    from wattlife.workloads import training_loop as tl

    now = {"t": 0.0}
    monkeypatch.setattr(summary_mod, "time", SimpleNamespace(perf_counter=lambda: now["t"]))
    summary = summary_mod.Summary(tmp_path, SimpleNamespace(rank=0, world=1))

    def train_step():
        now["t"] += 1.0
        return 8.0, None

    tl.run_training_loop(
        train_step, model=SimpleNamespace(train=lambda: None), schedule=tl.Schedule(steps=4),
        batches=SimpleNamespace(epoch=0), items_per_step=8.0, summary=summary,
        dist=SimpleNamespace(rank=0, world=1), device="cpu")
    now["t"] += 100.0  # e.g. the GPU decode loader's shut-down
    assert summary.throughput_wall() == pytest.approx(32 / 4)
    summary.restart_clock()  # a new loop runs the clock again
    now["t"] += 2.0
    summary.add_step(8.0)
    assert summary.throughput_wall() == pytest.approx(5 * 8 / 2)


@pytest.mark.parametrize("descending", [False, True])
def test_the_compile_copy_of_tied_first_forwards_is_the_first_in_file_order(descending):
    """Two forwards at the rank's first forward start (an outer and an inner call): the
    `compile` copy is of the one the file lists first, as the streamed path takes it
    (`prepare_windows`, a stable sort); pandas' default sort of 50 rows or more swapped ties."""
    ev = _events(n_steps=60)
    fw = ev[ev["phase"] == "forward"].iloc[0]
    inner = fw.copy()
    inner["end_ns"], inner["depth"] = fw["end_ns"] - 1_000_000, fw["depth"] + 1
    ev = pd.concat([pd.DataFrame([inner]), ev], ignore_index=True)  # file order: inner first
    if descending:
        ev = ev.iloc[::-1].reset_index(drop=True)
    first = ev[(ev["phase"] == "forward") & (ev["start_ns"] == fw["start_ns"])].iloc[0]
    got = with_compile_rows(ev, compiled=True)
    copy = got[(got["phase"] == "compile") & (got["start_ns"] == fw["start_ns"])]
    assert len(copy) == 1
    assert copy["end_ns"].iloc[0] == first["end_ns"]
    assert copy["depth"].iloc[0] == first["depth"] + 1
