"""The name of the node a process runs on, as every per-node record names it.

Inside a Slurm job step it is Slurm's node name (`SLURMD_NODENAME`): several `slurmd` may share
one host (each its own node, as on the CI cluster), and a node's name is what the job's node list
and `scontrol` know. Elsewhere it is the host name. A trace's and an event's `host`, meta.json's
`host` and a multi-node run's per-node folder all use it, so two nodes' files never share a name.
Host-level facts (the clock mapping, a process's pid) keep the host name.
"""

from __future__ import annotations

import os
import socket


def node_name() -> str:
    """Slurm's name of this node inside a job, else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def short_node_name() -> str:
    """`node_name()` without a domain (a folder name)."""
    return node_name().split(".")[0]
