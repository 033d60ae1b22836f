"""meta.json of a run: what ran, where, with which libraries and sensors, how it ended and how
its recording went; written atomically, and to a fallback file if its own path fails."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import signal
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, cast

from .. import slurm_job
from ..contracts import ContractError, GpuIdentity, RunMeta, meta_text
from ..contracts.sources import GPU_ROLE
from ..devices.base import BackendInfo, GpuBackendInfo, SensorBackend
from ..nodename import node_name
from .state import RunState

log = logging.getLogger(__name__)

LIBRARIES = ["wattlife", "torch", "torchvision", "transformers", "nvidia-ml-py", "numpy", "pandas",
             "snakemake", "psutil"]

#: commands that start several ranks (one GPU each); any other command is one process
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate",
             "deepspeed", "mpirun", "mpiexec", "srun")


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def single_process_gpus(cmd: list[str], gpus: list[GpuIdentity]) -> list[GpuIdentity]:
    """meta.json's `gpus`: a command that is one process (no launcher among its words) drives
    every GPU it can see, so each visible GPU's entry gets `local_rank` 0; a launcher's ranks
    keep one GPU each (local rank = CUDA ordinal)."""
    words = {t for w in cmd for tok in w.split() for t in (tok, Path(tok).name)}
    if words & set(LAUNCHERS):
        return gpus
    return [dataclasses.replace(g, local_rank=0) for g in gpus]


def _backend_infos(st: RunState) -> list[tuple[SensorBackend, BackendInfo]]:
    """Each backend with its `info()` (one that fails: its name and the error)."""
    info: list[tuple[SensorBackend, BackendInfo]] = []
    for b in st.backends:
        try:
            info.append((b, b.info()))
        except Exception as exc:
            info.append((b, {"backend": b.name, "error": f"{type(exc).__name__}: {exc}"}))
    return info


def gpu_facts(infos: list[tuple[SensorBackend, BackendInfo]]
              ) -> tuple[str | None, str | None, list[GpuIdentity]]:
    """(model, driver, identities) from the first backend whose declared role is "gpu"."""
    for b, i in infos:
        if b.role == GPU_ROLE and "error" not in i:
            g = cast(GpuBackendInfo, i)
            try:
                ids = [GpuIdentity.from_json(e, f"{b.name} info: gpus[{k}]")
                       for k, e in enumerate(g.get("gpus", []))]
            except ContractError as exc:  # a backend's bug must not lose the run's record
                log.warning(f"wattlife run: {exc}; meta.json's gpus left empty (its "
                            "sampler.backends keeps the backend's own list)")
                ids = []
            return g.get("gpu_model"), g.get("driver"), ids
    return None, None, []


def run_meta(st: RunState, markers_reports: list[dict[str, Any]]) -> RunMeta:
    """The run's record, once CMD has ended and the sampler has stopped."""
    sampler, proc = st.sampler, st.relay.proc
    infos = _backend_infos(st)
    gpu_model, driver, gpus = gpu_facts(infos)
    trace_rec = sampler.write_summary()
    recording = {
        "trace": trace_rec,
        "events": markers_reports,
        "complete": (not trace_rec.get("write_errors") and not markers_reports
                     and not sampler.errors),
    }
    return RunMeta(
        run_id=st.run_id, host=node_name(), cmd=list(st.cmd),
        cell=st.cell or {}, start_ns=sampler.start_ns, end_ns=sampler.end_ns,
        workload_start_ns=st.t_start, workload_end_ns=st.t_end,
        idle_baseline={"start_ns": sampler.start_ns, "end_ns": st.idle_end},
        exit_code=st.rc,
        exit_signal=(signal.Signals(-proc.returncode).name
                     if proc is not None and proc.returncode < 0 else None),
        start_error=st.start_error,
        signals={"received": st.relay.received, "forwarded_to_cmd_group": st.relay.forwarded,
                 "leftover_processes_ended": st.leftovers,
                 "workload_cgroup": str(st.cgroup.path) if st.cgroup else None,
                 "workload_cgroup_note": st.cgroup_note or None},
        gpu_model=gpu_model, driver=driver,
        gpus=[g.to_dict() for g in single_process_gpus(list(st.cmd), gpus)],
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        sampler={"settings": st.settings.as_dict(), "backends": [i for _, i in infos],
                 "sensors": sampler.sensors(), "rows": sampler.rows_written,
                 "cpu_time_s": sampler.cpu_time_s, "errors": sampler.errors,
                 "stalls": sampler.stalls},
        recording=recording,
        sensor_notes=st.notes, platform=platform.platform(),
        python=sys.version.split()[0], libraries=library_versions(),
        clock=sampler.wall_steps.record() if sampler.wall_steps is not None else None,
        slurm=slurm_job.current(),
    )


def write_meta(meta: Path, doc: RunMeta) -> str:
    """Write meta.json atomically (`contracts.meta_text`: validated, with its schema version);
    if its path fails, to the temporary folder. Returns the path."""
    try:
        text = meta_text(doc)
    except ContractError as exc:  # a bug here must not lose the record: write it as it is
        log.warning(f"wattlife run: {exc}; written anyway")
        text = json.dumps(doc.to_dict(), indent=2, default=str)
    try:
        meta.parent.mkdir(parents=True, exist_ok=True)
        tmp = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(meta)
        return str(meta)
    except OSError as exc:
        try:
            tmp.unlink()
        except (OSError, UnboundLocalError):
            pass
        try:
            fd, name = tempfile.mkstemp(prefix="wattlife-meta-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
        except OSError as exc2:
            log.error(f"wattlife run: cannot write {meta} ({exc.strerror or exc}) nor a fallback "
                      f"({exc2.strerror or exc2}); meta.json follows on stderr")
            log.error(text)
            return "<stderr>"
        log.warning(f"wattlife run: cannot write {meta} ({exc.strerror or exc}); meta.json is in "
                    f"{name}")
        return name
