"""PFI cap jobs and transfers under custody (`wattlife attempt`, wattlife.custody.others, issue
39): each an attempt of its own, sealed and published into its folder, a sealed one of the same
slice adopted (a PFI point that records a failure measured again), a failed one kept aside; the
tables that read them (curves, preparation tables) refuse a published file that is not as sealed.
Without Snakemake; the workflow runs them in tests/workflow/test_workflow.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from wattlife import custody as C
from wattlife.analysis.downloads import prepare_tables_files
from wattlife.cli import main
from wattlife.sweeps.real import aggregate_curve_files

SLICE = {"slice": "pfi/tiny/cap-400", "pfi_matrix": {"duration_s": 3}}
POINT = ("job,gpu_model,n_gpus,cap_w,throughput,throughput_unit,power_w,source,status\n"
         "tiny,H200 (sim),1,400,10.0,tokens/s,300.0,sim,{status}\n")


def pfi_command(status: str = "ok", rc: int = 0) -> list[str]:
    """What `pfi-sweep` leaves in its run folder (@ATTEMPT@), written by a shell line."""
    point = POINT.format(status=status).replace("\n", "\\n")
    return ["bash", "-c", f"mkdir -p @ATTEMPT@/work && printf 't_ns\\n1\\n' > @ATTEMPT@/trace.csv"
            f" && printf '{point}' > @ATTEMPT@/curve-point.csv && cat @ATTEMPT@/config.json"
            f" > /dev/null && exit {rc}"]


def cap(results: Path, status: str = "ok", rc: int = 0, slice_doc=SLICE) -> int:
    return C.attempt_job(results, results / "pfi/tiny/cap-400", "pfi-cap", slice_doc,
                         pfi_command(status, rc), poll_s=0.01)


def attempts(results: Path) -> list:
    return C.attempts_of(C.attempts_dir(results, "pfi/tiny/cap-400"))


def test_a_pfi_cap_is_an_attempt_sealed_and_published_into_its_folder(tmp_path):
    assert cap(tmp_path) == 0
    (a,) = attempts(tmp_path)
    assert a.state == "sealed" and a.published and a.seal["cell"] == "pfi/tiny/cap-400"
    assert set(a.seal["files"]) == {"config.json", "trace.csv", "curve-point.csv", "run.log"}
    assert a.seal["dirs"] == ["work"] and a.seal["slurm"] == {"job_id": None, "step_id": None}
    folder = tmp_path / "pfi/tiny/cap-400"
    assert (folder / "work").is_dir()  # an empty folder a rule declares: made
    assert os.path.samefile(folder / "curve-point.csv", a.folder / "curve-point.csv")
    assert json.loads((folder / "config.json").read_text()) == SLICE
    pointer, doc = C.published(folder)
    assert pointer.name == C.pointer_name(C.slice_hash(SLICE))
    assert doc["folder"] == "pfi/tiny/cap-400"
    assert C.cell_problems(folder) == []


def test_a_sealed_cap_of_the_same_slice_is_adopted_a_recorded_failure_measured_again(tmp_path):
    assert cap(tmp_path) == 0
    assert cap(tmp_path) == 0 and len(attempts(tmp_path)) == 1  # adopted: measured once
    assert cap(tmp_path, slice_doc={**SLICE, "x": 1}) == 0 and len(attempts(tmp_path)) == 2
    other = tmp_path / "o"
    assert cap(other, status="failed: outside the limits") == 0  # data: sealed, published
    assert cap(other) == 0  # the job run again measures it again: not adopted
    assert [a.state for a in attempts(other)] == ["sealed", "sealed"]
    assert C.published(other / "pfi/tiny/cap-400")[1]["attempt"] == attempts(other)[1].folder.name


def test_a_failed_cap_job_is_kept_aside_and_never_published(tmp_path):
    assert cap(tmp_path, rc=3) == 3
    (a,) = attempts(tmp_path)
    assert a.state == "failed" and "exited 3" in a.reason and not a.published
    assert C.published(tmp_path / "pfi/tiny/cap-400") is None


def test_the_curves_refuse_a_cut_point_and_name_its_remedy(tmp_path):
    assert cap(tmp_path) == 0
    point = tmp_path / "pfi/tiny/cap-400/curve-point.csv"
    assert len(aggregate_curve_files([point], tmp_path / "c.csv", job="tiny", caps=[400])) == 1
    data = point.read_bytes()
    point.unlink()
    point.write_bytes(data[:-9])
    with pytest.raises(ValueError, match=rf"{point}: cut .* link it again \(wattlife relink "
                                         rf"{tmp_path} pfi/tiny/cap-400\)"):
        aggregate_curve_files([point], tmp_path / "c.csv", job="tiny", caps=[400])
    assert main(["relink", str(tmp_path), "pfi/tiny/cap-400"]) == 0  # the remedy named
    assert len(aggregate_curve_files([point], tmp_path / "c.csv", job="tiny", caps=[400])) == 1


def test_the_preparation_tables_refuse_an_edited_record_or_unsealed_phases(tmp_path):
    into = tmp_path / "transfers/data"
    rec = {"name": "data", "bytes": 10}
    cmd = ["bash", "-c", f"printf '{json.dumps(rec)}\\n' > @ATTEMPT@/record.json"]
    assert C.attempt_job(tmp_path, into, "transfer", {"slice": "download/data"}, cmd) == 0
    (into / "phases.csv").write_text("phase,device,energy_j\n")
    with pytest.raises(ValueError, match=r"phases.csv: has no seal"):
        prepare_tables_files([], 1.0, 1.0, [into / "record.json"], tmp_path / "t")
    record = into / "record.json"
    record.unlink()
    record.write_text(json.dumps({**rec, "bytes": 11}) + "\n")
    with pytest.raises(ValueError, match=r"record.json: edited or replaced"):
        prepare_tables_files([], 1.0, 1.0, [record], tmp_path / "t")


@pytest.mark.parametrize("args, why", [
    (["--into", "{r}/runs/x"], "not runs/ or attempts/"),
    (["--into", "/elsewhere"], "not inside --results"),
    (["--kind", "nope"], "invalid choice"),
])
def test_bad_attempt_options_are_one_line(tmp_path, capsys, args, why):
    base = {"--into": f"{tmp_path}/pfi/a/cap-1", "--kind": "pfi-cap"}
    base.update({args[0]: args[1].format(r=tmp_path)})
    argv = ["attempt", "--results", str(tmp_path), "--slice", "{}"]
    for k, v in base.items():
        argv += [k, v]
    try:
        rc = main(argv + ["--", "true"])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and why in err[0], err
    assert not (tmp_path / "attempts").exists()


REPO = Path(__file__).resolve().parents[2]


def pfi_config(tmp_path: Path) -> Path:
    """A PFI run's config (its measurements: four caps of one cell)."""
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp_path / "res")
    cfg["powercap"].pop("jobs")
    cfg["powercap"]["hardware"] = "h200"
    cfg["pfi_matrix"] = {"dataset": "wikitext-mini", "duration_s": 3, "cells": {"tiny": {
        "model_config": "qwen3-tiny", "task": "pretrain", "gpus": 1, "seq_len": 32,
        "batch_size": 2, "device": "cpu", "caps": [400, 500, 600, 700]}}}
    conf = tmp_path / "pfi.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    return conf


def cells_rows(conf: Path, capsys) -> tuple[int, dict[str, str]]:
    rc = main(["cells", "--config", str(conf)])
    out = capsys.readouterr().out
    return rc, dict(line.split("\t")[:2] for line in out.splitlines() if "\t" in line)


def test_cells_lists_every_pfi_cap_current_stale_other_code_missing_unsealed(tmp_path, capsys):
    from wattlife.config import load_config
    from wattlife.custody.cells import matrix

    conf = pfi_config(tmp_path)
    res = tmp_path / "res"
    slices = {k: sl for k, (kind, sl) in matrix(load_config(conf)).items() if kind == "pfi-cap"}
    assert sorted(slices) == [f"pfi/tiny/cap-{w}" for w in (400, 500, 600, 700)]

    def measure(ident: str, slice_doc: dict) -> None:
        assert C.attempt_job(res, res / ident, "pfi-cap", slice_doc, pfi_command(),
                             poll_s=0.01) == 0

    measure("pfi/tiny/cap-400", slices["pfi/tiny/cap-400"])
    measure("pfi/tiny/cap-500", {**slices["pfi/tiny/cap-500"], "pfi_cap_w": 501.0})
    measure("pfi/tiny/cap-600", slices["pfi/tiny/cap-600"])
    pointer = C.published(res / "pfi/tiny/cap-600")[0]
    doc = json.loads(pointer.read_text())
    doc["code"]["measuring_sha256"] = "0" * 16  # sealed by other measuring code
    pointer.write_text(json.dumps(doc))
    (C.attempts_dir(res, "pfi/tiny/cap-700") / "a1").mkdir(parents=True)  # killed: no seal
    rc, rows = cells_rows(conf, capsys)
    assert rc == 3 and rows == {"pfi/tiny/cap-400": "current", "pfi/tiny/cap-500": "stale",
                                "pfi/tiny/cap-600": "other-code",
                                "pfi/tiny/cap-700": "unsealed"}, rows
    (C.attempts_dir(res, "pfi/tiny/cap-700") / "a1").rmdir()
    assert cells_rows(conf, capsys)[1]["pfi/tiny/cap-700"] == "missing"


def test_cells_lists_the_transfers_beside_the_cells_with_their_kind(tmp_path, capsys):
    from wattlife.config import load_config
    from wattlife.custody.cells import cell_states, matrix

    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp_path / "res")
    conf = tmp_path / "demo.yaml"
    conf.write_text(yaml.safe_dump(cfg))
    config = load_config(conf)
    kinds = {k: kind for k, (kind, _) in matrix(config).items()}
    names = [e["name"] for e in cfg["prepare"]["catalogue"]]
    assert {k for k, v in kinds.items() if v == "transfer"} == \
        {f"transfers/{n}" for n in [*names, "upload"]}
    assert sum(v == "cell" for v in kinds.values()) == 8
    res = tmp_path / "res"
    sl = matrix(config)["transfers/upload"][1]
    assert C.attempt_job(res, res / "transfers/upload", "transfer", sl, pfi_command(),
                         poll_s=0.01) == 0
    rows = {r["cell"]: r for r in cell_states(res, config)}
    assert rows["transfers/upload"]["state"] == "current"
    assert rows["transfers/upload"]["kind"] == "transfer"
    assert rows[f"transfers/{names[0]}"]["state"] == "missing"
    # transfers at once are part of a transfer's slice (the run's --resources transfers=N)
    assert {r["cell"]: r for r in cell_states(res, config, 2)}["transfers/upload"]["state"] \
        == "stale"
    rc, listed = cells_rows(conf, capsys)
    assert rc == 3 and listed["transfers/upload"] == "current"


def test_every_jobs_custody_lines_are_kept_beside_its_attempts(tmp_path, capsys):
    """The rule's log of a job is remade by the next job of the same cap (an orphan's lines would
    go): custody.log beside the attempts keeps every job's, appended."""
    argv = ["attempt", "--results", str(tmp_path), "--into", str(tmp_path / "pfi/tiny/cap-400"),
            "--kind", "pfi-cap", "--slice", json.dumps(SLICE), "--poll-s", "0.01", "--",
            *pfi_command()]
    assert main(argv) == 0 and main(argv) == 0  # measured, then adopted
    text = (C.attempts_dir(tmp_path, "pfi/tiny/cap-400") / "custody.log").read_text()
    assert text.count("measuring in") == 1 and text.count("adopted the sealed result") == 1
    assert text.count(f"pid {os.getpid()}: INFO") >= 3, text
    capsys.readouterr()
