"""The whole-node power sources' reader builders (issue 45), from `sampler.node_sources`.

Which source the sampler reads (`sampler.node`) is the `node` role of the sensor-backend
registry (`devices.registry`): its factories call the builders here and wrap the reader with
`polled` (a `devices.node.NodePoller` and its note). A source that cannot be read raises
`SensorUnavailable` with the reason (under `auto` the registry makes it a note); one that is not
configured (no Redfish endpoint; under `auto`, no IPMI host) raises it too. A source added later
(`devices.node_freeipmi`) builds its reader in its own module from `NodeSources.block` and uses
`polled`, `first_reading` and `per_host` from here.
"""

from __future__ import annotations

import socket
import urllib.parse

from ..contracts.node_settings import NodeSources
from ..contracts.sources import MEASURED, source_spec
from ..errors import InputError
from .base import SensorBackend, SensorUnavailable
from .node import NodePoller, NodeReader
from .node_emulator_launch import EmulatorTerms
from .node_redfish import RedfishReader, load_credentials
from .node_sources import IpmiReader, PmCountersReader, SstatReader

KEY = "sampler.node_sources"


def _seconds(ms: float) -> float:
    return float(ms) / 1000.0


def per_host(text: str) -> str:
    """`text` with `{host}` replaced by this host's short name: one config names every node's own
    BMC in a multi-node run (e.g. `https://{host}-bmc`)."""
    return text.replace("{host}", socket.gethostname().split(".")[0])


def pm_counters_reader(n: NodeSources, emulate: EmulatorTerms | None = None) -> NodeReader:
    """The pm_counters tree's reader; with `pm_counters.emulator` set, of the tree of an
    emulator started now (`node_emulator_launch`; closing the reader ends it)."""
    pm = n.pm_counters
    if pm.emulator is not None:
        from .node_emulator_launch import start_emulator

        e = pm.emulator
        return start_emulator(_seconds(pm.period_ms), e.base_w, e.disk_w_per_mbps,
                              e.net_w_per_mbps, emulate or EmulatorTerms())
    return PmCountersReader(pm.root, _seconds(pm.period_ms))


def redfish_reader(n: NodeSources) -> NodeReader:
    """The Redfish reader; it answers one reading before it is used (bounded by its time-out)."""
    r = n.redfish
    if not r.endpoint:
        raise SensorUnavailable(f"redfish: {KEY}.redfish.endpoint is not set")
    parts = urllib.parse.urlsplit(r.endpoint)
    if parts.username or parts.password:  # the message leaves them out
        raise InputError(f"{KEY}.redfish.endpoint holds a user or password (user:password@); "
                         "credentials come from credentials_file or username_env/password_env")
    creds = load_credentials(r.credentials_file, r.username_env, r.password_env,
                             f"{KEY}.redfish")
    reader = RedfishReader(per_host(r.endpoint), r.chassis, creds, _seconds(r.period_ms),
                           _seconds(r.timeout_ms), r.verify_tls)
    first_reading(reader)
    return reader


def ipmi_reader(n: NodeSources, in_band: bool = True) -> NodeReader:
    """The IPMI DCMI reader; it answers one reading before it is used. Without a host it reads
    in-band (/dev/ipmi0), unless `in_band` is False (`auto` tries a configured BMC only)."""
    i = n.ipmi
    if not (i.host or in_band):
        raise SensorUnavailable(f"ipmi: {KEY}.ipmi.host is not set")
    creds = load_credentials(i.credentials_file, i.username_env, i.password_env, f"{KEY}.ipmi")
    reader = IpmiReader(i.host and per_host(i.host), i.port, creds.user, creds.password,
                        _seconds(i.period_ms), _seconds(i.timeout_ms), i.command, i.interface)
    first_reading(reader)
    return reader


def slurm_reader(n: NodeSources) -> NodeReader:
    """The sstat reader of this job step (or the configured one)."""
    s = n.slurm
    return SstatReader(s.step, _seconds(s.period_ms), _seconds(s.timeout_ms), s.command)


def first_reading(reader: NodeReader) -> None:
    """One read now, so that a source that does not answer is said at start, not after the run;
    a reader that fails it is closed (what it holds released) before that is said."""
    try:
        reader.read()
    except BaseException as exc:
        reader.close()
        if not isinstance(exc, Exception):
            raise
        raise SensorUnavailable(f"{reader.source}: {type(exc).__name__}: {exc}") from None


def polled(reader: NodeReader, interval_s: float) -> tuple[list[SensorBackend], list[str]]:
    """The node backend reading `reader` in its own thread (the sampler collects its rows every
    `interval_s`) and the note saying what it measures (or that it is not measured: a source of
    another class than measured in `contracts.sources`, an emulator's)."""
    spec = source_spec(reader.source)
    if spec is not None and spec.cls != MEASURED:
        return [WatchingPoller(reader, interval_s)], [
            f"node power is {spec.words}, NOT MEASURED (source={reader.source}), read every "
            f"{reader.period_s:g} s in its own thread"]
    return [NodePoller(reader, interval_s)], [
        f"node power is MEASURED by {reader.source} (source={reader.source}), read every "
        f"{reader.period_s:g} s in its own thread"]


class WatchingPoller(NodePoller):
    """A node poller whose reader follows CMD's process tree (an emulator's: `wattlife run`
    sets `watch_pid` on every backend that has one, as on the CPU estimate)."""

    @property
    def watch_pid(self) -> int | None:
        return getattr(self.reader, "watch_pid", None)

    @watch_pid.setter
    def watch_pid(self, pid: int | None) -> None:
        watch = getattr(self.reader, "watch", None)
        if watch is not None and pid is not None:
            watch(pid)
