"""Each measuring job's energy as the suite measured it beside Slurm's own accounting (issue 40).

A site with an `acct_gather_energy` plugin (RAPL, IPMI, GPU, pm_counters) has Slurm account the
energy of every job: `sacct`'s ConsumedEnergyRaw (joules) once it ended, `sstat`'s while it runs.
`energy_table` joins it with the suite's energy of the same job (the GPU, CPU and DRAM energy of
the run's phases.csv, every phase summed) and shows both side by side and their difference. The
two do not cover the same thing: Slurm's covers the whole job (start-up and staging included)
with the plugin's sensors (a node's RAPL or IPMI reading, or its GPUs only), the suite's the
sampler's window with its own. Each energy column has a `source` column beside it; a job Slurm
has no energy for says why in `slurm_source` and leaves the number empty.

Which of Slurm's numbers: the step the run measured in (meta.json's `slurm.step_id`: the
`srun --whole` step of `wattlife run` / `launch-node`, on all the job's nodes) where sacct has
it, else the job line, else the largest step. Slurm 22.05's job line is the sum of the job's
srun steps (not the batch step), which overlap on a node (the executor's step holds the one
the measurement runs in), so it can count a node twice (docs/slurm-evidence.md, recorded).

Functions are pure (tables and texts in, table out) apart from `query_accounting`, which asks
`sacct` / `sstat` unless given their recorded answers.
"""

from __future__ import annotations

import io
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from .contracts import node_part_kinds
from .errors import InputError

SACCT_FIELDS = "JobID,State,Elapsed,NodeList,ConsumedEnergyRaw"
SSTAT_FIELDS = "JobID,ConsumedEnergyRaw"
SLURM_COLUMNS = ["job_id", "slurm_energy_j", "slurm_source", "slurm_state", "slurm_elapsed"]
#: how `slurm_source` names the energy of the step the run measured in
MEASURING_STEP = "the measuring step"


def _run_dirs(results: Path) -> list[Path]:
    """The run folders of measuring jobs: each meta.json under runs/ and pfi/ (not the per-node
    copies of a multi-node run, nor the attempts the cells link to: each run counted once)."""
    metas = [*results.glob("runs/**/meta.json"), *results.glob("pfi/**/meta.json")]
    return sorted(m.parent for m in metas if "nodes" not in m.relative_to(results).parts[:-2])


def run_energy(run: Path, results: Path) -> dict[str, object] | None:
    """One run's Slurm job, cell (its folder under `results`: runs/<cell>/r<repeat> or
    pfi/<cell>/cap-<W>) and GPU+CPU(+DRAM) energy from its meta.json and phases.csv (None: no
    Slurm job in its meta.json)."""
    meta = json.loads((run / "meta.json").read_text())
    slurm = meta.get("slurm") or {}
    if not slurm.get("job_id"):
        return None
    rel = run.relative_to(results).as_posix()
    step = slurm.get("step_id")
    row: dict[str, object] = {"job_id": str(slurm["job_id"]), "run_dir": str(run),
                              "cell": rel.removeprefix("runs/"),
                              "slurm_step": f"{slurm['job_id']}.{step}" if step else ""}
    phases = run / "phases.csv"
    if not phases.exists():
        return {**row, "suite_energy_j": float("nan"),
                "suite_source": "none: no phases.csv (run `wattlife attribute` first)"}
    ph = pd.read_csv(phases)
    parts = node_part_kinds()  # the kinds whose energies add up (contracts.kinds)
    ph = ph[ph["device_kind"].isin(parts)]
    kinds = "+".join(k for k in parts if k in set(ph["device_kind"]))
    sources = "+".join(sorted(set(ph["source"].astype(str))))
    return {**row, "suite_energy_j": float(ph["energy_j"].sum()),
            "suite_source": f"{sources} ({kinds}, phases.csv)"}


def suite_energy(results: Path) -> pd.DataFrame:
    """The suite's energy of every measuring run of `results` that ran in a Slurm job."""
    rows = [r for r in (run_energy(d, results) for d in _run_dirs(results)) if r is not None]
    return pd.DataFrame(rows, columns=["job_id", "run_dir", "cell", "slurm_step",
                                       "suite_energy_j", "suite_source"])


def measuring_steps(ours: pd.DataFrame) -> dict[str, str]:
    """Each job's measuring step (`<job>.<step>`) from `suite_energy`'s table, where known."""
    return {j: s for j, s in zip(ours["job_id"], ours["slurm_step"], strict=True) if s}


def _energy(raw: object) -> float | None:
    """Joules of a ConsumedEnergyRaw field; None for empty or 0 (no energy plugin: Slurm
    reports 0, and a node never uses 0 J)."""
    try:
        v = float(str(raw).strip())
    except ValueError:
        return None
    return v if v > 0 else None


def _pick(job: str, g: pd.DataFrame, tool: str, step: str | None) -> tuple[float | None, str]:
    """The energy of one job's lines and its source: the measuring step `step`'s, else the job
    line's, else the largest step's (steps overlap on a node: never summed)."""
    mine = g[g["JobID"] == step] if step else g.iloc[:0]
    e = _energy(mine["ConsumedEnergyRaw"].iloc[0]) if len(mine) else None
    if e is not None:
        return e, f"{tool} ConsumedEnergyRaw (step {step}, {MEASURING_STEP})"
    head = g[g["JobID"] == job]
    e = _energy(head["ConsumedEnergyRaw"].iloc[0]) if len(head) else None
    if e is not None:
        return e, f"{tool} ConsumedEnergyRaw (job {job}: the sum of its srun steps)"
    steps = g[g["JobID"] != job]
    es = [(v, s) for s, r in zip(steps["JobID"], steps["ConsumedEnergyRaw"], strict=True)
          if (v := _energy(r)) is not None]
    if es:
        e, largest = max(es)
        return e, f"{tool} ConsumedEnergyRaw (step {largest}, the largest)"
    return None, (f"none: {tool} reports no energy for job {job} (no acct_gather_energy "
                  "plugin on its nodes?)")


def parse_sacct(text: str, tool: str = "sacct",
                measuring: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per job from `sacct -P -o SACCT_FIELDS` (header line first): the energy of the
    job's measuring step (`measuring`: job -> `<job>.<step>`), else of the job line, else the
    largest of its steps' (the batch or extern step spans the allocation; steps overlap on a
    node, so they are never summed), saying which in `slurm_source`."""
    tab = pd.read_csv(io.StringIO(text), sep="|", dtype=str, keep_default_na=False)
    if "JobID" not in tab or "ConsumedEnergyRaw" not in tab:
        raise InputError(f"{tool} output: expected the columns JobID and ConsumedEnergyRaw "
                         f"(-P -o {SACCT_FIELDS}), got {list(tab.columns)}")
    tab["job"] = tab["JobID"].str.split(".").str[0]
    out = []
    for job, g in tab.groupby("job", sort=True):
        e, src = _pick(str(job), g, tool, (measuring or {}).get(str(job)))
        head = g[g["JobID"] == job]
        first = head.iloc[0] if len(head) else g.iloc[0]
        out.append({"job_id": job, "slurm_energy_j": e, "slurm_source": src,
                    "slurm_state": first.get("State", ""),
                    "slurm_elapsed": first.get("Elapsed", "")})
    return pd.DataFrame(out, columns=SLURM_COLUMNS)


def energy_table(ours: pd.DataFrame, slurm: pd.DataFrame) -> pd.DataFrame:
    """Each run's suite energy beside Slurm's for its job, and their difference (Slurm − suite,
    in J and in % of Slurm's): the table `wattlife slurm-energy` writes."""
    t = ours.merge(slurm, on="job_id", how="left")
    t["slurm_source"] = t["slurm_source"].fillna("none: Slurm has no record of this job")
    t["slurm_energy_j"] = pd.to_numeric(t["slurm_energy_j"], errors="coerce")
    t["difference_j"] = t["slurm_energy_j"] - t["suite_energy_j"]
    t["difference_pct"] = 100 * t["difference_j"] / t["slurm_energy_j"]
    t["difference_source"] = "derived: slurm_energy_j - suite_energy_j"
    return t


def _ask(args: Sequence[str]) -> tuple[str | None, str]:
    """stdout of a Slurm command, or None and the first line of why not."""
    try:
        p = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[0]
    return p.stdout, ""


def _so_far(tab: pd.DataFrame, running: Sequence[str], sstat_file: str | None,
            measuring: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`tab` with sstat's energy so far for the jobs of `running` that sstat answers for (a
    job with no step running is left as it was: sstat names it on stderr only)."""
    st, _ = ((Path(sstat_file).read_text(), "") if sstat_file else
             _ask(["sstat", "-P", "-a", "-j", ",".join(running), "-o", SSTAT_FIELDS]))
    if not st:
        return tab
    now = parse_sacct(st, "sstat (running: so far)", measuring).set_index("job_id")
    for col in ("slurm_energy_j", "slurm_source"):
        tab[col] = [now[col].get(j, v) if j in now.index else v
                    for j, v in zip(tab["job_id"], tab[col], strict=True)]
    tab["slurm_state"] = ["RUNNING" if j in now.index and not s else s
                          for j, s in zip(tab["job_id"], tab["slurm_state"], strict=True)]
    return tab


def query_accounting(job_ids: Sequence[str], sacct_file: str | None = None,
                     sstat_file: str | None = None,
                     measuring: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Slurm's energy of `job_ids` (of each one's measuring step where `measuring` names it,
    see `parse_sacct`): sacct's (or `sacct_file`'s), and for a job still running sstat's (or
    `sstat_file`'s) so far, unless sacct has its measuring step's (ended: final); a tool that
    does not answer is named in `slurm_source`. Where sacct
    does not answer (no accounting storage), every job is asked of sstat, which reads the
    running steps from the nodes without it."""
    text, why = ((Path(sacct_file).read_text(), "") if sacct_file else
                 _ask(["sacct", "-P", "-j", ",".join(job_ids), "-o", SACCT_FIELDS]))
    if text is None:
        tab = pd.DataFrame({"job_id": list(job_ids), "slurm_energy_j": None,
                            "slurm_source": f"none: sacct failed ({why})", "slurm_state": "",
                            "slurm_elapsed": ""}, columns=SLURM_COLUMNS)
        return _so_far(tab, list(job_ids), sstat_file, measuring)
    tab = parse_sacct(text, "sacct", measuring)
    # a running job whose measuring step has ended keeps sacct's energy of that step (final)
    running = [j for j, s, src in zip(tab["job_id"], tab["slurm_state"], tab["slurm_source"],
                                      strict=True)
               if s == "RUNNING" and not src.endswith(f"{MEASURING_STEP})")]
    return _so_far(tab, running, sstat_file, measuring) if running else tab
