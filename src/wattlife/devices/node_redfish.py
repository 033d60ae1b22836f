"""Node power from the BMC's Redfish service, and the credentials of a BMC.

The chassis' `EnvironmentMetrics` (Redfish 2020.4+: `PowerWatts.Reading`, and the energy counter
`EnergyJoules.Reading` or `EnergykWh.Reading` where offered) is read where the service has it,
else the classic `Chassis/<id>/Power` resource's `PowerControl[0].PowerConsumedWatts`; which one is
decided at the first reading and recorded in meta.json. Every request is bounded by the time-out
(connect and read), with HTTP basic authentication when credentials are configured.

Credentials come from a file (`credentials_file`: "USER:PASSWORD" on its first line, as curl's
`-u`) or from environment variables whose NAMES the config gives (`username_env`,
`password_env`); never from the config itself, and never written to the logs or meta.json.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, SensorError
from .node import NodeReader, NodeReading

KWH_J = 3.6e6


@dataclass(frozen=True)
class Credentials:
    """A BMC user and password (repr hides the password)."""

    user: str | None
    password: str | None

    def __repr__(self) -> str:
        return f"Credentials(user={'set' if self.user else None}, password=<hidden>)"


def load_credentials(file: str | None, user_env: str | None, password_env: str | None,
                     key: str) -> Credentials:
    """The credentials of config block `key` (e.g. "sampler.node_sources.redfish"): the file's
    first line "USER:PASSWORD", else the named environment variables; none configured: no
    credentials. A named but missing file or variable is an error naming the key."""
    if file:
        path = Path(os.path.expandvars(os.path.expanduser(file)))
        try:
            first = (path.read_text().splitlines() or [""])[0]
        except OSError as exc:
            raise InputError(f"{key}.credentials_file {file}: cannot read it: "
                             f"{exc.strerror or exc}") from None
        user, sep, password = first.partition(":")
        if not sep:
            raise InputError(f"{key}.credentials_file {file}: its first line must be "
                             "USER:PASSWORD")
        return Credentials(user or None, password)
    values: list[str | None] = []
    for name, var in (("username_env", user_env), ("password_env", password_env)):
        if var and var not in os.environ:
            raise InputError(f"{key}.{name}: the environment variable {var} is not set")
        values.append(os.environ[var] if var else None)
    return Credentials(values[0], values[1])


def public_url(url: str) -> str:
    """`url` without any user:password@ part (what meta.json and messages may show)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RedfishReader(NodeReader):
    """Chassis power (and energy where offered) from a Redfish service."""

    source = "redfish"
    metrics = ("power_w", "energy_j")

    def __init__(self, endpoint: str, chassis: str | None, creds: Credentials,
                 period_s: float = 1.0, timeout_s: float = 2.0, verify_tls: bool = True) -> None:
        self.base = public_url(endpoint).rstrip("/")
        self.chassis = chassis
        self.period_s, self.timeout_s = period_s, timeout_s
        self._headers = {"Accept": "application/json"}
        if creds.user is not None or creds.password is not None:
            token = f"{creds.user or ''}:{creds.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        self._ctx = ssl.create_default_context()
        if not verify_tls:  # a BMC's self-signed certificate (sampler.node_sources.redfish)
            self._ctx.check_hostname = False
            self._ctx.verify_mode = ssl.CERT_NONE
        self.resource: str | None = None  # the resource read, decided at the first reading

    def get(self, path: str) -> dict[str, Any]:
        """One GET of a Redfish path, bounded by the time-out; an HTTP error raises with its
        status (never the credentials)."""
        url = path if path.startswith("http") else self.base + path
        req = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ctx) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the response's socket
            raise SensorError(f"GET {path}: HTTP {exc.code} {exc.reason}") from None
        if not isinstance(doc, dict):
            raise SensorError(f"GET {path}: not a JSON object")
        return doc

    def _chassis_path(self) -> str:
        if self.chassis is None:
            members = self.get("/redfish/v1/Chassis").get("Members") or []
            if not members:
                raise SensorError("GET /redfish/v1/Chassis: no chassis listed")
            self.chassis = str(members[0]["@odata.id"]).rstrip("/").rsplit("/", 1)[-1]
        return f"/redfish/v1/Chassis/{self.chassis}"

    def _decide(self) -> str:
        """EnvironmentMetrics where the chassis has it, else Power."""
        chassis = self.get(self._chassis_path())
        env = (chassis.get("EnvironmentMetrics") or {}).get("@odata.id")
        if env:
            return str(env)
        power = (chassis.get("Power") or {}).get("@odata.id")
        return str(power) if power else self._chassis_path() + "/Power"

    def read(self) -> NodeReading | None:
        if self.resource is None:
            self.resource = self._decide()
        return self.parse(self.get(self.resource))

    @staticmethod
    def parse(doc: dict[str, Any]) -> NodeReading | None:
        """Power and energy of an EnvironmentMetrics or Power resource (None: it holds none)."""
        if "PowerControl" in doc:
            ctl = doc.get("PowerControl") or [{}]
            watts = ctl[0].get("PowerConsumedWatts")
            return None if watts is None else NodeReading(power_w=float(watts))
        watts = (doc.get("PowerWatts") or {}).get("Reading")
        joules = (doc.get("EnergyJoules") or {}).get("Reading")
        kwh = (doc.get("EnergykWh") or {}).get("Reading")
        energy = float(joules) if joules is not None else (
            float(kwh) * KWH_J if kwh is not None else None)
        if watts is None and energy is None:
            return None
        return NodeReading(power_w=None if watts is None else float(watts), energy_j=energy)

    def describe(self) -> dict[str, Any]:
        return {"endpoint": self.base, "chassis": self.chassis, "resource": self.resource,
                "auth": "basic" if "Authorization" in self._headers else "none"}
