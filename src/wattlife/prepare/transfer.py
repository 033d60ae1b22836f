"""One transfer (download or upload) measured as one marked phase, and its JSON record.

`measure_transfer` runs the transfer inside `markers.phase(<phase name>)` (so `wattlife run`
attributes its energy), reads the psutil network counters around it and returns the record
`transfer_record` builds: the client's result plus the transfer's window (epoch ns), its name,
kind, network bytes and whether the server was the loopback one. Overlaps between transfers are
counted later (`analysis.downloads`), from the windows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..contracts import write_text
from ..contracts.clock import now_ns

log = logging.getLogger(__name__)


def transfer_record(result: dict[str, Any], start_ns: int, end_ns: int,
                    net_before: dict[str, int], net_after: dict[str, int], name: str, kind: str,
                    loopback: bool, transfers_at_once: int | None = None) -> dict[str, Any]:
    """The record of one transfer: the client's `result` plus its window, name, kind, network
    bytes over the window and server (`loopback` or `remote`); `transfers_at_once` as the
    workflow allowed (0: no limit, recorded as null; None: not recorded)."""
    r = dict(result)
    r.update(start_ns=start_ns, end_ns=end_ns)
    r.update(name=name, kind=kind, net_recv_bytes=net_after["recv"] - net_before["recv"],
             net_sent_bytes=net_after["sent"] - net_before["sent"],
             server="loopback" if loopback else "remote")
    if transfers_at_once is not None:
        r["transfers_at_once"] = transfers_at_once or None
    return r


def measure_transfer(phase_name: str, do: Callable[[], dict[str, Any]], name: str, kind: str,
                     loopback: bool, transfers_at_once: int | None = None) -> dict[str, Any]:
    """Run `do()` (a client call returning its result dict) as one marked phase and return its
    record (`transfer_record`)."""
    from ..markers import phase
    from .fetch import network_bytes

    before = network_bytes()
    t0 = now_ns()
    with phase(phase_name):
        result = do()
    t1 = now_ns()
    after = network_bytes()
    return transfer_record(result, t0, t1, before, after, name, kind, loopback, transfers_at_once)


def report_transfer(record: dict[str, Any], record_path: str | Path | None = None) -> None:
    """Print the record as one JSON line (a skipped transfer also says so on stderr) and write it
    to `record_path` when given."""
    print(json.dumps(record))
    if record.get("skipped"):
        how = ("verified by its sha256" if record.get("verified")
               else "kept existing file, not verified (no --sha256)")
        log.info(f"wattlife: {record.get('dest', '')} is already there ({how}): nothing "
                 "transferred; --force fetches again")
    if record_path:
        write_text(record_path, json.dumps(record, indent=1))
