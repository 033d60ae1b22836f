"""Node sources read from this host: HPE/Cray pm_counters, IPMI DCMI (ipmitool) and Slurm's sstat.

Each is a `devices.node.NodeReader`: one bounded read per call, run in the node poller's thread.

- pm_counters (`/sys/cray/pm_counters/`, Cray EX): `power` ("<W> W <us> us") and `energy`
  ("<J> J <us> us") of the whole node, updated at about 10 Hz. As HPE documents, a set of values
  is consistent only when `freshness` (and `generation`) read the same before and after the values;
  a read that straddles an update is retried once, then skipped. A changed `startup` counter
  means the energy counter restarted. A tree holding `EMULATOR_MARKER` is an emulator's
  (`devices.node_emulator`): its readings are `pm_counters_emulated`, class simulated.
- IPMI DCMI (`ipmitool dcmi power reading`): the BMC's instantaneous node power; DCMI has no
  energy counter. Over `lanplus` to host:port, or in-band (/dev/ipmi0) with no host. The password
  goes to ipmitool in its environment (`-E`), never on its command line.
- Slurm (`sstat -P -n --format=JobID,ConsumedEnergyRaw -j <job.step>`): the step's energy as the
  site's acct_gather_energy plugin counts it (J): an energy counter only, updated at the plugin's
  period (often 30 s). It covers every node of the step: a one-node reading.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import SensorError
from .base import SensorUnavailable
from .node import NodeReader, NodeReading

PM_COUNTERS_ROOT = "/sys/cray/pm_counters"
#: a tree holding this file was written by `wattlife node-emulator` (devices.node_emulator): its
#: readings are labelled EMULATED_SOURCE (class simulated), never `pm_counters`
EMULATOR_MARKER = "wattlife_emulator"
EMULATED_SOURCE = "pm_counters_emulated"


class PmCountersReader(NodeReader):
    """/sys/cray/pm_counters: node power and energy, read consistently (freshness, generation)."""

    source = "pm_counters"
    metrics = ("power_w", "energy_j")

    def __init__(self, root: str | Path = PM_COUNTERS_ROOT, period_s: float = 0.1) -> None:
        self.root = Path(root)
        self.period_s = period_s
        self.timeout_s = period_s  # a sysfs read does not block
        missing = [f for f in ("power", "energy", "freshness") if not (self.root / f).is_file()]
        if missing:
            raise SensorUnavailable(f"pm_counters: no {', '.join(missing)} under {self.root} "
                                    "(not an HPE/Cray node)")
        self._startup: str | None = None
        self.emulator: str | None = None  # the marker's text, read once (meta.json)
        if (self.root / EMULATOR_MARKER).is_file():
            self.source = EMULATED_SOURCE
            self.emulator = self._text(EMULATOR_MARKER)

    def _text(self, name: str) -> str:
        return (self.root / name).read_text().strip()

    def _optional(self, name: str) -> str | None:
        try:
            return self._text(name)
        except FileNotFoundError:
            return None

    @staticmethod
    def _value(text: str, unit: str, name: str) -> float:
        parts = text.split()
        if len(parts) < 2 or parts[1] != unit:
            raise SensorError(f"pm_counters {name}: {text!r} is not '<value> {unit} <time> us'")
        return float(parts[0])

    def _attempt(self) -> NodeReading | None:
        fresh, gen = self._text("freshness"), self._optional("generation")
        power = self._value(self._text("power"), "W", "power")
        energy = self._value(self._text("energy"), "J", "energy")
        if self._text("freshness") != fresh or self._optional("generation") != gen:
            return None  # the values straddle an update
        startup = self._optional("startup")
        restarted = self._startup is not None and startup != self._startup
        self._startup = startup
        return NodeReading(power_w=power, energy_j=energy, counter_restarted=restarted)

    def read(self) -> NodeReading | None:
        return self._attempt() or self._attempt()

    def describe(self) -> dict[str, Any]:
        if self.emulator is not None:
            return {"root": str(self.root), "emulator": self.emulator}
        return {"root": str(self.root)}


def run_bounded(argv: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    """A command's stdout; its failure or a time-out (it is killed) raises with the reason."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{argv[0]} gave no answer within {timeout_s:g} s") from None
    if done.returncode != 0:
        why = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise SensorError(f"{argv[0]} exited with {done.returncode}: "
                           f"{why[-1] if why else 'no message'}")
    return done.stdout


_DCMI_POWER = re.compile(r"Instantaneous power reading\s*:\s*([0-9.]+)\s*Watts", re.I)


def parse_dcmi_power(text: str) -> float:
    """The instantaneous power (W) of `ipmitool dcmi power reading`'s output."""
    m = _DCMI_POWER.search(text)
    if m is None:
        raise SensorError("ipmitool dcmi power reading: no 'Instantaneous power reading: <W> "
                         f"Watts' line in its output {text.strip()[:200]!r}")
    return float(m.group(1))


class IpmiReader(NodeReader):
    """The BMC's DCMI power reading through ipmitool."""

    source = "ipmi"
    metrics = ("power_w",)

    def __init__(self, host: str | None, port: int, user: str | None, password: str | None,
                 period_s: float = 1.0, timeout_s: float = 2.0, command: str = "ipmitool",
                 interface: str = "lanplus") -> None:
        self.host, self.port, self.interface = host, port, interface
        self.period_s, self.timeout_s = period_s, timeout_s
        self.argv = [command]
        self.env = dict(os.environ)
        if host:
            # cipher suite 3 (RAKP-HMAC-SHA1, AES-CBC-128): skips ipmitool's slow cipher probe
            self.argv += ["-I", interface, "-H", host, "-p", str(port), "-C", "3"]
            if user:
                self.argv += ["-U", user]
            if password is not None:
                self.argv += ["-E"]
                self.env["IPMI_PASSWORD"] = password
        else:
            self.argv += ["-I", "open"]
        self.argv += ["dcmi", "power", "reading"]

    def read(self) -> NodeReading | None:
        return NodeReading(power_w=parse_dcmi_power(run_bounded(self.argv, self.timeout_s,
                                                                self.env)))

    def describe(self) -> dict[str, Any]:
        where = f"{self.interface} {self.host}:{self.port}" if self.host else "in-band /dev/ipmi0"
        return {"endpoint": where, "command": self.argv[0] + " dcmi power reading"}


def parse_sstat_energy(text: str, step: str) -> float | None:
    """ConsumedEnergyRaw (J) of `step` in `sstat -P -n --format=JobID,ConsumedEnergyRaw` output
    (None: the step has no energy yet; Slurm leaves it empty or 0 until the plugin's first
    reading). A line it cannot read raises, naming it."""
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) < 2:
            raise SensorError(f"sstat: {line!r} is not 'JobID|ConsumedEnergyRaw'")
        if fields[0] != step:
            continue
        raw = fields[1].strip()
        if raw in ("", "0"):
            return None
        try:
            return float(raw)
        except ValueError:
            raise SensorError(f"sstat: ConsumedEnergyRaw {raw!r} of {step} is not a number of "
                             "joules") from None
    return None


def current_step() -> str | None:
    """This process's Slurm job step (`<job>.<step>`), None outside a job."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    return f"{job}.{os.environ.get('SLURM_STEP_ID', 'batch')}"


class SstatReader(NodeReader):
    """Slurm's ConsumedEnergyRaw of a running job step, through sstat."""

    source = "sstat"
    metrics = ("energy_j",)

    def __init__(self, step: str | None, period_s: float = 10.0, timeout_s: float = 5.0,
                 command: str = "sstat") -> None:
        step = step or current_step()
        if not step:
            raise SensorUnavailable("slurm: not inside a Slurm job (no SLURM_JOB_ID) and no "
                                    "sampler.node_sources.slurm.step given")
        self.step, self.period_s, self.timeout_s, self.command = step, period_s, timeout_s, command
        self.argv = [command, "-P", "-n", "--format=JobID,ConsumedEnergyRaw", "-j", step]

    def read(self) -> NodeReading | None:
        energy = parse_sstat_energy(run_bounded(self.argv, self.timeout_s), self.step)
        return None if energy is None else NodeReading(energy_j=energy)

    def describe(self) -> dict[str, Any]:
        return {"step": self.step, "command": " ".join(self.argv),
                "scope": "the whole job step (every node of it), as acct_gather_energy counts it"}
