"""FreeIPMI's DCMI node power: `ipmi-dcmi --get-system-power-statistics` (Debian freeipmi-tools).

The BMC's DCMI Get Power Reading, as FreeIPMI prints it:

    Current Power                        : 412 Watts
    Minimum Power over sampling duration : 98 watts
    Maximum Power over sampling duration : 530 watts
    Average Power over sampling duration : 377 watts
    Time Stamp                           : 12/05/2026 - 22:04:03
    Statistics reporting time period     : 1000 milliseconds
    Power Measurement                    : Active

The reading is `Current Power` (W); DCMI has no energy counter. `Power Measurement` other than
`Active` (FreeIPMI prints `Not Available`) means the BMC measures nothing now: no reading (a gap,
said in meta.json), never 0 W. Over the network to `host:port` (`driver` LAN_2_0 or LAN) or
in-band with no host (FreeIPMI finds the driver). The credentials (`credentials_file`
"USER:PASSWORD" or the environment variables the config names, as for `ipmi` and `redfish`) go to
ipmi-dcmi in a private config file (`--config-file`, mode 0600, removed when the reader closes),
never on its command line. A backend of the `node` role beside ipmitool's `ipmi`, added by the
recipe of CONTRIBUTING.md: this module, its row in `contracts.sources` and its schema block
(`sampler.node_sources.freeipmi`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, SensorError
from .base import SensorBackend, SensorUnavailable
from .node import NodeReader, NodeReading
from .node_redfish import load_credentials
from .node_select import KEY, first_reading, per_host, polled
from .node_sources import run_bounded

SOURCE = "freeipmi"
_CURRENT = re.compile(r"^\s*Current Power\s*:\s*([0-9]+(?:\.[0-9]*)?)\s*watts\s*$", re.I | re.M)
_STATE = re.compile(r"^\s*Power Measurement\s*:\s*(.*?)\s*$", re.I | re.M)


@dataclass(frozen=True)
class FreeIpmiSettings:
    """`sampler.node_sources.freeipmi` (every key of the schema's block, defaults filled)."""

    host: str | None
    port: int
    driver: str
    command: str
    credentials_file: str | None
    username_env: str | None
    password_env: str | None
    timeout_ms: float
    period_ms: float


def parse_freeipmi_power(text: str) -> float | None:
    """`Current Power` (W) of `ipmi-dcmi --get-system-power-statistics`' output; None when the
    BMC says its power measurement is not active. Output without that line raises, naming it."""
    state = _STATE.search(text)
    if state is not None and state.group(1).lower() != "active":
        return None
    m = _CURRENT.search(text)
    if m is None:
        raise SensorError("ipmi-dcmi --get-system-power-statistics: no 'Current Power : <W> "
                          f"Watts' line in its output {text.strip()[:200]!r}")
    return float(m.group(1))


class FreeIpmiReader(NodeReader):
    """The BMC's DCMI power reading through FreeIPMI's ipmi-dcmi."""

    source = SOURCE
    metrics = ("power_w",)

    def __init__(self, host: str | None, port: int, user: str | None, password: str | None,
                 period_s: float = 1.0, timeout_s: float = 2.0, command: str = "ipmi-dcmi",
                 driver: str = "LAN_2_0") -> None:
        self.host, self.port, self.driver = host, port, driver
        self.period_s, self.timeout_s = period_s, timeout_s
        self.argv = [command]
        self._private: str | None = None
        if host:
            self.argv += ["-h", f"{host}:{port}", "-D", driver]
        if user is not None or password is not None:
            self.argv += ["--config-file", self._config_file(user, password)]
        self.argv += [f"--session-timeout={max(1, round(timeout_s * 1000))}",
                      "--get-system-power-statistics"]

    def _config_file(self, user: str | None, password: str | None) -> str:
        """A FreeIPMI config file holding the credentials, readable by this user only."""
        if any(c in v for v in (user or "", password or "") for c in '"\n\r'):
            raise InputError(f"{KEY}.freeipmi: a user or password holding a double quote or a "
                             "line break cannot go to ipmi-dcmi (its config file has no escape)")
        self._private = tempfile.mkdtemp(prefix="wattlife-freeipmi-")
        path = Path(self._private) / "freeipmi.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:  # quoted: a value may hold spaces
            f.writelines([f'username "{user}"\n' if user is not None else "",
                          f'password "{password}"\n' if password is not None else ""])
        return str(path)

    def read(self) -> NodeReading | None:
        power = parse_freeipmi_power(run_bounded(self.argv, self.timeout_s))
        return None if power is None else NodeReading(power_w=power)

    def describe(self) -> dict[str, Any]:
        where = f"{self.driver} {self.host}:{self.port}" if self.host else "in-band"
        return {"endpoint": where, "command": self.argv[0] + " --get-system-power-statistics"}

    def close(self) -> None:
        if self._private:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None


def freeipmi_reader(c: FreeIpmiSettings) -> FreeIpmiReader:
    """The reader of `c` (without a host: in-band); it answers one reading before it is used.
    `sampler.node: auto` does not try it (auto's order and notes stay as they were)."""
    if shutil.which(c.command) is None:
        raise SensorUnavailable(f"{SOURCE}: {c.command} not found (Debian: freeipmi-tools)")
    creds = load_credentials(c.credentials_file, c.username_env, c.password_env,
                             f"{KEY}.freeipmi")
    reader = FreeIpmiReader(c.host and per_host(c.host), c.port, creds.user, creds.password,
                            c.period_ms / 1000.0, c.timeout_ms / 1000.0, c.command, c.driver)
    first_reading(reader)
    return reader


def freeipmi_backends(s: Any, interval_s: float) -> tuple[list[SensorBackend], list[str]]:
    """The registry's factory: `sampler.node_sources.freeipmi`'s reader in its own thread."""
    settings = FreeIpmiSettings(**s.node_sources.block(SOURCE))
    return polled(freeipmi_reader(settings), interval_s)
