import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _no_events_env(monkeypatch):
    """Tests never inherit an events path from an outer `wattlife run`."""
    monkeypatch.delenv("WATTLIFE_EVENTS", raising=False)
    monkeypatch.delenv("WATTLIFE_RUN_ID", raising=False)
    from wattlife import markers

    markers.reset()
    yield
    markers.reset()


@pytest.fixture
def env_path():
    """Environment whose PATH finds this interpreter's `wattlife` and `snakemake`."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def wait_rows(path: Path, min_rows: int, device: str | None = None,
              timeout: float = 180.0) -> list[str]:
    """Poll a growing CSV until it holds `min_rows` data rows (of `device`, if given); its rows.
    Readiness is read from the file, never assumed after a fixed sleep (CI machines are loaded)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            lines = path.read_text().splitlines()[1:]
        except FileNotFoundError:
            lines = []
        if device is not None:
            lines = [ln for ln in lines if f",{device}," in ln]
        if len(lines) >= min_rows:
            return lines
        assert time.monotonic() < deadline, f"{path}: {len(lines)} rows after {timeout} s"
        time.sleep(0.1)


# Tests are guests: the live Slurm tests (marked `slurm`) submit jobs only where the user opted
# in, as .ci/run does after .ci/slurm-up.sh started its own one-node cluster; an `sbatch` or
# `sinfo` that merely answers (a login node, a user's cluster) is never used. Their partition is
# the CI cluster's (`debug` in .ci/slurm-up.sh) unless WATTLIFE_TEST_SLURM_PARTITION names one.
SLURM_OPT_IN = "WATTLIFE_TEST_SLURM"


def slurm_opted_in() -> bool:
    return os.environ.get(SLURM_OPT_IN) == "1"


def slurm_test_partition() -> str:
    return os.environ.get("WATTLIFE_TEST_SLURM_PARTITION", "debug")


# How often a test's Snakemake controller asks Slurm about its jobs, nothing else: the Slurm
# executor (snakemake-executor-plugin-slurm 2.x) sleeps `init_seconds_before_status_checks` (40 s
# by default) while no job is in flight and after each job it sees end, and its shutdown waits
# for that sleep: each tiny CI run waited up to 40 s to see its job end and ~40 s to stop.
# No job, flag or file of a run changes (squeue stays the status command: MinJobAge >> 3 x 2 s).
SLURM_POLL = ("--slurm-init-seconds-before-status-checks", "2")
# ... and keeps asking every 2 s while its job runs (the executor adds 10 s to each wait that saw
# no job end: a ~25-s job was seen ~10 s late): `python tests/slurm_controller.py` is
# `python -m snakemake` with that wait capped; the Slurm-profile runs that wait for a job use it
SLURM_SNAKEMAKE = (sys.executable, str(Path(__file__).with_name("slurm_controller.py")))


# What no test may change in the checkout (each Snakemake run works on a copy: `workflow_dir`;
# `wattlife run`'s default run folders go under runs/)
GUARDED = ("results", "data", ".snakemake", "runs")
# the workflow's files a Snakemake run of the checkout reads, copied for the tests
WORKFLOW_FILES = ("Snakefile", "rules", "config", "scripts", "profiles", "report", "envs")


def checkout_listing(root: Path = REPO) -> dict[str, tuple[int, int]]:
    """Every file and folder under the checkout's guarded folders: (size, mtime_ns) by path."""
    out: dict[str, tuple[int, int]] = {}
    for top in GUARDED:
        base = root / top
        if not base.exists():
            continue
        for d, dirs, files in os.walk(base):
            for name in dirs + files:
                p = Path(d) / name
                st = p.lstat()
                out[str(p.relative_to(root))] = (st.st_size if name in files else 0,
                                                 st.st_mtime_ns)
        out[top] = (0, base.lstat().st_mtime_ns)
    return out


def listing_changes(before: dict, after: dict) -> list[str]:
    """The paths added, removed or changed between two `checkout_listing`s (sorted)."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


@pytest.fixture(scope="session", autouse=True)
def _checkout_untouched():
    """No test writes into the checkout's results/, data/ or .snakemake/: the session fails at its
    end (an error at the last test's teardown) naming what changed."""
    before = checkout_listing()
    yield
    changed = listing_changes(before, checkout_listing())
    assert not changed, f"tests changed the checkout's {'/'.join(GUARDED)}: {changed[:20]}"


def wattlife_sim_run(run: Path, script: str) -> None:
    """A real `wattlife run` of `python -c script` into `run` (trace.csv, events.csv, meta.json):
    simulated GPU, estimated CPU, 0.2 s idle baseline; the interpreter's folder first on PATH."""
    import subprocess

    env = dict(os.environ)
    env.pop("WATTLIFE_EVENTS", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [sys.executable, "-m", "wattlife.cli", "run", "--trace", str(run / "trace.csv"),
           "--events", str(run / "events.csv"), "--gpu", "sim", "--cpu", "estimate",
           "--idle-s", "0.2", "--", sys.executable, "-c", script]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def package_with_rows(dest: Path, module: str, table: str, rows: str) -> Path:
    """A copy of the package at DEST/wattlife whose `table` (a `NAME... = (` tuple at the top of
    `module`, e.g. "contracts/phases.py") has `rows` appended: how the recipes' one-row edits are
    tried without touching src/. Returns DEST (for PYTHONPATH)."""
    pkg = dest / "wattlife"
    shutil.copytree(REPO / "src" / "wattlife", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    path = pkg / module
    text = path.read_text()
    found = re.search(rf"^{re.escape(table)}[^\n]* = \(\n.*?^\)\n", text, re.M | re.S)
    assert found, f"no {table} table in {module}"
    end = found.end() - 2
    path.write_text(text[:end] + rows + text[end:])
    return dest


def copy_workflow(dest: Path) -> Path:
    """A copy of the checkout's workflow (Snakefile, rules, config with its links resolved,
    scripts, profiles, report, envs) in `dest`, with the committed results/reference linked in
    read-only use; Snakemake run there writes its .snakemake/ and default outputs there."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, symlinks=False)
        else:
            shutil.copy2(src, dest / name)
    (dest / "results").mkdir()
    (dest / "results" / "reference").symlink_to(REPO / "results" / "reference")
    return dest


class TreeSnapshot:
    """A folder's state kept aside once and put back, at the SAME absolute path, before each test
    that starts from it: how one expensive set-up (a finished Snakemake run, whose metadata, config
    and custody files name absolute paths) is shared by several tests without one test's writes
    reaching another. `cp -a` keeps hard links (a cell's files and its attempt's), modes and
    mtimes (Snakemake compares them), so the restored folder is the kept one, file for file."""

    def __init__(self, live: Path) -> None:
        self.live = live
        self.kept = live.with_name(live.name + ".kept")

    def keep(self) -> None:
        """Copy the live folder aside (once, after the set-up)."""
        subprocess.run(["cp", "-a", str(self.live), str(self.kept)], check=True)

    def restore(self) -> Path:
        """The live folder replaced by the kept state; the live folder's path."""
        shutil.rmtree(self.live)
        subprocess.run(["cp", "-a", str(self.kept), str(self.live)], check=True)
        return self.live


@pytest.fixture(scope="session")
def workflow_dir(tmp_path_factory) -> Path:
    """The workflow's copy the Snakemake-running tests use as their working directory."""
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


def has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if not has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU here")
        for it in items:
            if "gpu" in it.keywords:
                it.add_marker(skip)
    if not slurm_opted_in():
        skip = pytest.mark.skip(reason=f"{SLURM_OPT_IN}=1 not set (.ci/run sets it once its "
                                       "own Slurm is up): the suite submits to no Slurm it did "
                                       "not start")
        for it in items:
            if "slurm" in it.keywords:
                it.add_marker(skip)


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first, process group third);
    None once the process has gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes whose process group is `pgid` (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and (fields := _stat_fields(d)) and fields[0] != "Z" \
                and int(fields[2]) == pgid:
            out.append(int(d))
    return out


def alive(pid: int) -> bool:
    """Whether process `pid` runs now (a /proc entry that is not a zombie)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether process `pid` has ended (no /proc entry, or a zombie) within `timeout` s (polled)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


class Children:
    """Processes a test starts: each in its own process group, all ended when the test ends.

    `spawn(cmd, **popen_kwargs)` is `subprocess.Popen` with `process_group=0`. At teardown, whatever
    the test's outcome, every group with a live member gets SIGTERM, then SIGKILL after `grace_s`,
    then its leader is reaped. Groups are signalled by id, never by a name pattern; a group whose
    leader is reaped is signalled only while /proc shows live members, so the id is still theirs.
    """

    def __init__(self, grace_s: float = 5.0) -> None:
        self.procs: list = []
        self.groups: list[int] = []  # groups the test learnt of (e.g. a grandchild's) to end too
        self.grace_s = grace_s

    def adopt_group(self, pgid: int) -> None:
        """Also end process group `pgid` at teardown (only while /proc shows live members)."""
        self.groups.append(pgid)

    def spawn(self, cmd, **kw):
        import subprocess

        kw.setdefault("process_group", 0)
        p = subprocess.Popen(cmd, **kw)
        self.procs.append(p)
        return p

    def run(self, cmd, timeout: float, **kw):
        """`subprocess.run(cmd, timeout=...)` with the child in its own group: on timeout the whole
        group is ended (not only the direct child) and TimeoutExpired is raised."""
        import subprocess

        p = self.spawn(cmd, **kw)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.end_all()
            raise
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def end_all(self) -> None:
        import signal
        import time

        groups = [p.pid for p in self.procs] + self.groups
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for g in groups:
                if group_members(g):
                    try:
                        os.killpg(g, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            deadline = time.monotonic() + self.grace_s
            while any(group_members(g) for g in groups) and time.monotonic() < deadline:
                time.sleep(0.05)
        for p in self.procs:
            for stream in (p.stdin, p.stdout, p.stderr):
                if stream is not None:
                    stream.close()
            p.wait()
        self.procs.clear()
        self.groups.clear()


@pytest.fixture
def children():
    """Start subprocesses with `children.spawn(...)`; all of them are ended after the test."""
    c = Children()
    try:
        yield c
    finally:
        c.end_all()


@pytest.fixture(scope="session")
def finished_demo(tmp_path_factory):
    """The embedded demo's pipeline, run once per test session on a smaller copy of the demo config
    (`snakemake --profile profiles/local`): tests/workflow/test_pipeline.py checks its tables and
    figures, tests/workflow/test_workflow.py what config edits rerun and that one cell reruns
    alone."""
    import subprocess

    import yaml

    tmp = tmp_path_factory.mktemp("demo")
    wf = copy_workflow(tmp / "workflow")
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["results_dir"] = str(tmp / "res")
    cfg["storage"] = {"shared": str(tmp / "shared"), "local": str(tmp / "local")}
    cfg["data"]["images"].update(classes=3, train_per_class=8, val_per_class=2)
    cfg["workloads"]["resnet"].update(steps=4, val_every=2, ckpt_every=2, image_size=32)
    cfg["workloads"]["qwen"].update(steps=4, val_every=2, ckpt_every=2)
    cfg["data"]["text"]["words"] = 10_000
    cfg["analysis"].update(allocation_workloads=5, allocation_jobs=6, pfi_mc=50)
    cfg["sampler"]["idle_baseline_s"] = 0.3
    for e, size in zip(cfg["prepare"]["catalogue"], (1e6, 3e6, 6e6, 2e6, 4e6), strict=True):
        e["size_bytes"] = int(size)
    conf = tmp / "config.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    out = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local",
                          "--configfile", str(conf)], cwd=wf, env=env, capture_output=True,
                         text=True, timeout=1700)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return {"tmp": tmp, "cfg": cfg, "conf": conf, "env": env, "res": tmp / "res", "wf": wf}


def train_tiny_image_cell(tmp_path: Path, **keys) -> dict:
    """Train a ResNet-18 image cell on the CPU (2 classes of 4 tiny JPEGs, 16 px, batch 4, 2
    steps, workload keys overridden by `keys`) in `tmp_path`; its summary.json."""
    import json

    from wattlife.config import settings
    from wattlife.workloads import train_cell
    from wattlife.workloads.datagen import make_image_tree

    make_image_tree(tmp_path / "shared" / "imgs", n_classes=2, train_per_class=4,
                    val_per_class=1, size=24)
    w = {"kind": "image_classification", "dataset": "imgs", "model": "resnet18", "device": "cpu",
         "precision": "fp32", "image_size": 16, "batch_size": 4, "steps": 2, "workers": 0,
         "lr": 0.05, **keys}
    cfg = {"storage": {"shared": str(tmp_path / "shared"), "local": str(tmp_path / "local")},
           "workloads": {"r": w}}
    assert train_cell(settings(cfg), "r", "shared", False, tmp_path / "work") == 0
    return json.loads((tmp_path / "work" / "summary.json").read_text())


@pytest.fixture(scope="session")
def wattlife_wheel(tmp_path_factory) -> Path:
    """The package's wheel, built once per session (setuptools, no build isolation, no deps) from a
    copy of what the sdist holds, so the build leaves nothing in the checkout; the folder holding
    it. tests/project/test_packaging.py installs it non-editable, tests/test_condaenv.py's
    post-deploy script installs it from this folder."""
    import subprocess

    source = tmp_path_factory.mktemp("wheel-source")
    shutil.copytree(REPO / "src", source / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "-w", str(dist), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    assert len(list(dist.glob("wattlife-*.whl"))) == 1, sorted(dist.iterdir())
    return dist
