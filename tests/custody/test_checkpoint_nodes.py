"""A multi-node cell's checkpoint folders removed on every node of its job (issue 40).

`wattlife measure` runs on the job's first node; a cell of N nodes checkpointing to `local`
storage leaves a folder on each node's own disk. In a Slurm job it removes them with a step of
one `wattlife drop-checkpoint --folder` per node, the folder's variables expanded by each node.
Here `srun` is a stand-in that runs the command once per node with that node's SLURMD_NODENAME
(the live path: tests/test_slurm_nodes.py on the CI cluster)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import BIN, REPO
from wattlife import custody as C
from wattlife import jobs as J
from wattlife.cli.custody import checkpoint_folder
from wattlife.config import load_config
from wattlife.custody import measure as M

CELL = "resnet/local/ckpt-on/r1"
FAKE_SRUN = """#!/bin/bash
# stand-in for srun: one task per node (--nodes=N), each with its node's SLURMD_NODENAME
n=1
for a in "$@"; do case $a in --nodes=*) n=${a#--nodes=};; -*) ;; *) break;; esac; shift; done
for i in $(seq "$n"); do SLURMD_NODENAME=n$i "$@" || exit $?; done
"""


def _slice(tmp_path: Path, nodes: int) -> dict:
    """The demo's slice of CELL on `nodes` nodes, its `local` root each node's own folder."""
    cfg = load_config(str(REPO / "config" / "config.yaml"))
    cfg["storage"] = {"shared": str(tmp_path / "shared"),
                      "local": str(tmp_path / "local") + "/$SLURMD_NODENAME"}
    cfg["execution"]["nodes"] = nodes
    k = M.cell_keys(CELL)
    return J.cell_slice(cfg, k["workload"], k["storage"], k["checkpoint"], k["repeat"])


def test_the_per_node_command_is_a_step_on_every_node_with_the_folder_unexpanded(tmp_path):
    folder = checkpoint_folder(_slice(tmp_path, 2), CELL, expand=False)
    assert str(folder).endswith("/$SLURMD_NODENAME/checkpoints/resnet-local-ckpton-r1")
    cmd = M.every_node_drop_command(folder, 2)
    assert re.search(r'srun --jobid="\$SLURM_JOB_ID" --overlap --nodes=2 --ntasks=2 '
                     r"--ntasks-per-node=1 wattlife drop-checkpoint --folder '", cmd), cmd
    assert cmd.startswith("for v in $(compgen -e")  # the executor's step variables cleared
    assert f"'{folder}'" in cmd  # quoted: each node expands $SLURMD_NODENAME itself


@pytest.mark.parametrize("nodes", [2, 1])
def test_a_multi_node_cells_checkpoint_folders_go_on_every_node_and_no_other(tmp_path,
                                                                           monkeypatch, nodes):
    """Each node's folder of the cell is removed (before: the first node's only); another run's
    folders, on any node, stay. One node: removed here, no step started."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    (bindir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURMD_NODENAME", "n1")  # measure runs on the job's first node
    run_id = M.cell_run_id(CELL)
    mine = [tmp_path / f"local/n{i}/checkpoints/{run_id}" for i in (1, 2)]
    other = [tmp_path / f"local/n{i}/checkpoints/resnet-local-ckpton-r2" for i in (1, 2)]
    for d in mine + other:
        d.mkdir(parents=True)
        (d / "model.pt").write_bytes(b"x" * 8)
    monkeypatch.setattr(M, "cell_command", lambda s, c, a: f"echo t_ns > {a}/trace.csv")
    slice_doc = _slice(tmp_path, nodes)
    assert C.measure_cell(tmp_path / "res", CELL, slice_doc, poll_s=0.01,
                          checkpoints=checkpoint_folder(slice_doc, CELL, expand=False),
                          checkpoint_nodes=nodes) == 0
    assert not mine[0].exists() and mine[1].exists() is (nodes == 1)
    assert all(d.exists() for d in other)
    log = (C.attempts_dir(tmp_path / "res", CELL) / M.JOB_LOG).read_text()
    if nodes == 2:  # each node said what it removed
        assert f"n1: removed the checkpoint folder {mine[0]}" in log, log
        assert f"n2: removed the checkpoint folder {mine[1]}" in log, log


def test_a_failed_per_node_step_still_removes_this_nodes_folder_and_says_so(tmp_path,
                                                                          monkeypatch, caplog):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text("#!/bin/bash\necho 'srun: error: no such job' >&2\nexit 1\n")
    (bindir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    here = tmp_path / f"local/n1/checkpoints/{M.cell_run_id(CELL)}"
    here.mkdir(parents=True)
    folder = checkpoint_folder(_slice(tmp_path, 2), CELL, expand=False)
    M.drop_cell_checkpoints(folder, CELL, 2)
    assert not here.exists()
    assert "failed (exit 1: srun: error: no such job)" in caplog.text
    assert "remove it on the others by hand" in caplog.text


def test_drop_checkpoint_folder_expands_the_nodes_variables_and_names_the_node(tmp_path,
                                                                             monkeypatch, capsys):
    from wattlife.cli import main

    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    mine = tmp_path / "local/n2/checkpoints/resnet-local-ckpton-r1"
    mine.mkdir(parents=True)
    folder = f"{tmp_path}/local/$SLURMD_NODENAME/checkpoints/resnet-local-ckpton-r1"
    assert main(["drop-checkpoint", "--folder", folder]) == 0
    assert not mine.exists()
    assert capsys.readouterr().out.startswith(f"n2: removed the checkpoint folder {mine} ")
    assert main(["drop-checkpoint", "--folder", str(tmp_path / "local/n2")]) == 2  # not one
    assert "not a cell's checkpoint folder" in capsys.readouterr().err
    assert main(["drop-checkpoint"]) == 2
    assert "give either SUMMARY or --folder" in capsys.readouterr().err
