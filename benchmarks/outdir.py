"""The output folder of a benchmark script, made before any GPU work (issue 30): a script that
cannot write its results refuses at start with one line instead of after minutes of device time.
"""

import sys
from pathlib import Path


def out_dir(path: str | Path, option: str = "--out") -> Path:
    """Create `path` (and its parents); on failure exit 2 with one line naming the option."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        sys.exit(f"{option} {p}: cannot write there ({exc.strerror or exc}); nothing was run")
    return p
