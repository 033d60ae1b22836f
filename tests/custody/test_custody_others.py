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
    assert set(a.seal["files"]) == {"config.json", "trace.csv", "curve-point.csv"}
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
