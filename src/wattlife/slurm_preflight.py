"""Site values checked before anything is submitted (issue 40).

A partition, account or node feature the cluster does not know, or a path of the shipped
`config/site.yaml` left as it is (`my-account`, `/lustre/...`), used to pass the dry run without a
word and, for a partition, to give measuring jobs the profile's default of 1 CPU and 4 GB. Each
problem here is one line naming the config key, the value and what `sinfo` / `sacctmgr` know.
The rules (rules/common.smk) print them when the Snakefile is read (a dry run or a local run says
them) and stop a Slurm run at its start, before the first `sbatch`.

`site_problems` is pure (the cluster's facts in, lines out); `query_facts` asks `sinfo` and
`sacctmgr` (given `run`, for tests).
"""

from __future__ import annotations

import getpass
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Runner = Callable[..., subprocess.CompletedProcess[str]]

#: config/site.yaml's placeholder account (tests/test_slurm_user.py keeps the two the same)
PLACEHOLDER_ACCOUNT = "my-account"
SINFO_FEATURES = ["sinfo", "-h", "-o", "%R|%f"]


@dataclass(frozen=True)
class SiteFacts:
    """What the cluster says: each partition's node features (None: `sinfo` did not answer) and
    this user's accounts (None: `sacctmgr` did not answer or lists none, e.g. no accounting)."""

    partitions: Mapping[str, frozenset[str]] | None
    accounts: frozenset[str] | None


def _stdout(args: Sequence[str], run: Runner | None) -> str | None:
    """stdout of a Slurm client command; None where it is absent or fails."""
    try:
        p = (run or subprocess.run)(list(args), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def parse_features(text: str) -> dict[str, frozenset[str]]:
    """Partition -> the features of its nodes, from `sinfo -h -o '%R|%f'` lines (one line per
    partition and node group; `(null)`: no feature)."""
    out: dict[str, set[str]] = {}
    for line in text.split("\n"):  # lines as Slurm ends them (not NEL, U+2028)
        fields = line.strip().split("|")
        if len(fields) != 2 or not fields[0]:
            continue
        part, feats = fields
        names = {f.strip() for f in feats.split(",") if f.strip() and f.strip() != "(null)"}
        out.setdefault(part, set()).update(names)
    return {p: frozenset(f) for p, f in out.items()}


def query_facts(run: Runner | None = None, user: str | None = None) -> SiteFacts:
    """The cluster's partitions with their features (`sinfo`) and this user's accounts
    (`sacctmgr show associations`)."""
    text = _stdout(SINFO_FEATURES, run)
    parts = parse_features(text) if text else None
    acc = _stdout(["sacctmgr", "-n", "-P", "show", "associations",
                   f"user={user or getpass.getuser()}", "format=Account"], run)
    accounts = frozenset(a.strip().lower() for a in (acc or "").splitlines() if a.strip())
    return SiteFacts(parts or None, accounts or None)


def constraint_features(expr: str) -> list[str]:
    """The feature names of an `sbatch --constraint` expression (`a&b`, `a|b`, `[a*2&b]`)."""
    return [w for w in re.split(r"[&|,\[\]()]|\*\d+", expr) if w.strip()]


def _partition_keys(slurm: Any, prepare: Any) -> list[tuple[str, str]]:
    """(config key, partition name) of every partition the config names."""
    keys = [("slurm.gpu_partition", slurm.gpu_partition), ("slurm.cpu_partition",
                                                             slurm.cpu_partition)]
    keys += [(f"slurm.partitions.{hw}", p) for hw, p in (slurm.partitions or {}).items()]
    if prepare is not None:
        keys += [(f"prepare.{k}", getattr(prepare, k)) for k in ("download_on", "upload_on")
                 if getattr(prepare, k) not in (None, "login")]
    return [(k, str(v)) for k, v in keys if v]


def slurm_problems(slurm: Any, prepare: Any, facts: SiteFacts | None) -> list[str]:
    """Lines naming each partition, feature or account of the config the cluster does not know
    (a fact the cluster did not give is not checked here: `unchecked_notes` says so), and the
    shipped placeholder account wherever `sacctmgr` cannot tell (no Slurm here too)."""
    out: list[str] = []
    parts = facts.partitions if facts is not None else None
    if parts is not None:
        known = ", ".join(sorted(parts)) or "none"
        for key, name in _partition_keys(slurm, prepare):
            if name not in parts:
                out.append(f"config {key}: {name!r} is not a partition of this cluster "
                           f"(sinfo knows: {known})")
        for hw, expr in (slurm.constraints or {}).items():
            part = (slurm.partitions or {}).get(hw) or slurm.gpu_partition
            if part and part not in parts:
                continue  # the partition itself is named above
            have = parts.get(part, frozenset()) if part else frozenset().union(*parts.values())
            for feat in constraint_features(str(expr)):
                if feat not in have:
                    out.append(f"config slurm.constraints.{hw}: feature {feat!r} is on no node of "
                               f"{'partition ' + repr(part) if part else 'this cluster'} (sinfo "
                               f"knows: {', '.join(sorted(have)) or 'no feature'})")
    if slurm.account:
        acc, known_acc = str(slurm.account), facts.accounts if facts is not None else None
        if known_acc is not None and acc.lower() not in known_acc:
            out.append(f"config slurm.account: {acc!r} is not one of your Slurm accounts "
                       f"(sacctmgr knows: {', '.join(sorted(known_acc))})")
        elif known_acc is None and acc == PLACEHOLDER_ACCOUNT:
            out.append(f"config slurm.account: {acc!r} is config/site.yaml's placeholder: give "
                       "your account, or leave the key out")
    return out


def path_problem(key: str, path: str | None) -> str | None:
    """Why `path` cannot be made by this user (its top folder does not exist: e.g. the shipped
    `/lustre/project/wattlife` on a site without /lustre); None: it can, or no path."""
    if not path or not path.startswith("/") or "$" in path:
        return None
    top = Path("/", *Path(path).parts[1:2])
    if top.exists():
        return None
    return (f"config {key}: {path} cannot exist here: {top} does not (config/site.yaml's "
            "placeholder? give your site's path)")


def path_problems(prepare: Any, storage: Mapping[str, str]) -> list[str]:
    """The config's paths that cannot exist here (`storage.shared`, a copy upload's target)."""
    target = (prepare.upload_target if prepare is not None and prepare.upload_to == "copy"
              else None)
    return [p for p in (path_problem("storage.shared", storage.get("shared")),
                        path_problem("prepare.upload.target", target)) if p]


def site_problems(slurm: Any, prepare: Any, storage: Mapping[str, str],
                  facts: SiteFacts | None) -> list[str]:
    """Every site value that would fail the run, one line each: `path_problems`, and with the
    cluster's `facts` its unknown partitions, features and accounts."""
    return path_problems(prepare, storage) + slurm_problems(slurm, prepare, facts)


def names_slurm_values(slurm: Any, prepare: Any) -> bool:
    """Whether the config names any Slurm value (then the cluster is asked about them)."""
    return bool(slurm.account or slurm.constraints or _partition_keys(slurm, prepare))


NO_SINFO = ("sinfo does not answer: the partitions, features and node sizes of the config's "
            "`slurm` section cannot be checked, and measuring jobs would get the profile's "
            "default of 1 CPU (is this a Slurm submit host?)")


def start_problems(slurm: Any, prepare: Any, storage: Mapping[str, str],
                   facts: SiteFacts) -> list[str]:
    """What stops a Slurm run at its start: `site_problems`, and a cluster whose `sinfo` does
    not answer."""
    out = site_problems(slurm, prepare, storage, facts)
    return out + ([NO_SINFO] if facts.partitions is None else [])


def stop_message(problems: Sequence[str]) -> str:
    """The one line a stopped run ends with: the first problem, and how many more were said."""
    more = f" (and {len(problems) - 1} more, above)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}; nothing was submitted"


def unchecked_notes(slurm: Any, facts: SiteFacts | None) -> list[str]:
    """What could not be checked, and why."""
    if facts is None or facts.partitions is None:
        return []
    if slurm.account and facts.accounts is None:
        return [f"slurm.account {slurm.account!r} not checked: sacctmgr lists no account of "
                "yours (a cluster without accounting?); the executor plugin then warns \"Both "
                "'sacctmgr' and 'sshare' returned empty results\" at each submission (harmless; "
                "leave slurm.account out on such a cluster to avoid it)"]
    return []
