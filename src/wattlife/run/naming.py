"""Where `wattlife run -- CMD` writes when no `--trace`/`--events` is given: a run folder of its
own under `runs/` (`--runs-dir`), named after the script and the UTC time it started, e.g.
`runs/train-20261205T143012Z/` for `python train.py` (a second run in the same second gets `-2`).
The name is the run id too (meta.json, events), and the workload's name in `wattlife aggregate`'s
tables: one's own script needs no matrix keys (`--cell`)."""

from __future__ import annotations

import re
import time
from pathlib import Path

_LAUNCHERS = {"python", "python3", "torchrun", "accelerate", "deepspeed", "srun", "mpirun",
              "uv", "env", "bash", "sh"}


def script_name(cmd: list[str]) -> str:
    """The name a command is known by: the first `*.py` / `*.sh` argument's stem, a `-m`
    module's last part, else the program's own name (`python train.py` -> `train`, `python -m
    pkg.train` -> `train`, `./bench` -> `bench`)."""
    for i, arg in enumerate(cmd):
        if arg == "-m" and i + 1 < len(cmd):
            return cmd[i + 1].rsplit(".", 1)[-1]
        if arg.endswith((".py", ".sh")):
            return Path(arg).stem
    for arg in cmd:
        name = Path(arg).name
        if not arg.startswith("-") and not re.fullmatch(r"python[\d.]*", name) \
                and name not in _LAUNCHERS:
            return name
    return Path(cmd[0]).name if cmd else "run"


def default_run_dir(cmd: list[str], runs_dir: str | Path = "runs",
                    now: float | None = None) -> Path:
    """`<runs_dir>/<script>-<UTC yyyymmddThhmmssZ>` (module docstring), not yet existing."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", script_name(cmd)) or "run"
    base = Path(runs_dir) / f"{name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path
