"""Which whole-node power sources this host exposes (issue 45), found without changing anything.

    python3 benchmarks/node_probe.py [--json FILE]     (standard library only: runs anywhere)

Looks at, and only reads:
- HPE/Cray pm_counters: /sys/cray/pm_counters (one consistent reading through the suite's reader);
- IPMI in-band: /dev/ipmi0 (or /dev/ipmi/0, /dev/ipmidev/0), and where it opens, one
  `ipmitool -I open dcmi power reading` (a read: DCMI's Get Power Reading);
- a Redfish host interface: SMBIOS type 42 (`dmidecode -t 42`, root only) and the link-local
  addresses of this host's interfaces; where a host interface is found, one unauthenticated GET of
  its service root /redfish/v1 (no credentials are tried);
- Slurm: sstat / sacct on PATH, this job's id, and the site's `AcctGatherEnergyType`
  (`scontrol show config`).
Prints one line per source ("found" / "absent", and why) and writes the same as JSON with --json.
Every command is bounded by a time-out; a missing tool is said, not an error.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

TIMEOUT_S = 10.0


def run(argv: list[str]) -> tuple[int, str]:
    """A read-only command's exit code and output (127: not installed, 124: timed out)."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]}: not installed"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer within {TIMEOUT_S:g} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def pm_counters() -> dict[str, Any]:
    """/sys/cray/pm_counters and one consistent reading of it."""
    root = Path("/sys/cray/pm_counters")
    if not root.is_dir():
        return {"found": False, "why": f"{root} does not exist"}
    out: dict[str, Any] = {"files": sorted(p.name for p in root.iterdir())}
    values = {}
    for name in ("freshness", "generation", "startup", "power", "energy", "raw_scan_hz"):
        try:
            values[name] = (root / name).read_text().strip()
        except OSError as exc:
            values[name] = f"unreadable: {exc.strerror or exc}"
    found = values["power"].endswith(" us") and " W " in values["power"]
    return {**out, "values": values, "found": found,
            "why": "" if found else "power is not '<W> W <us> us'"}


def ipmi_in_band() -> dict[str, Any]:
    """An in-band IPMI device and its DCMI power reading."""
    devs = [d for d in ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0") if os.path.exists(d)]
    if not devs:
        return {"found": False, "why": "no /dev/ipmi0 (ipmi_si / ipmi_devintf not loaded, or "
                                       "no BMC)"}
    out: dict[str, Any] = {"devices": devs, "readable": os.access(devs[0], os.R_OK | os.W_OK)}
    if not out["readable"]:
        return {**out, "found": False, "why": f"{devs[0]} is not readable by this user"}
    rc, text = run(["ipmitool", "-I", "open", "dcmi", "power", "reading"])
    m = re.search(r"Instantaneous power reading\s*:\s*([0-9.]+)\s*Watts", text)
    if m:
        return {**out, "found": True, "power_w": float(m.group(1))}
    return {**out, "found": False, "why": f"rc {rc}: {text[-300:]}"}


def redfish_host_interface() -> dict[str, Any]:
    """SMBIOS type 42 and link-local addresses; one GET of /redfish/v1 at a host interface."""
    rc, smbios = run(["dmidecode", "-t", "42"])
    described = rc == 0 and "Management Controller Host Interface" in smbios
    rc_ip, addrs = run(["ip", "-4", "-o", "addr", "show"])
    link_local = [line.split()[1] + " " + line.split()[3] for line in addrs.splitlines()
                  if " 169.254." in line] if rc_ip == 0 else []
    out: dict[str, Any] = {"smbios_type_42": described if rc == 0 else f"unknown: {smbios[:200]}",
                           "link_local": link_local}
    ips = [a for a in smbios.split() if a.count(".") == 3 and a.startswith("169.254.")]
    for ip in ips[:2]:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(f"https://{ip}/redfish/v1", timeout=5, context=ctx) as r:
                root = json.loads(r.read())
            return {**out, "found": True, "service_root": f"https://{ip}/redfish/v1",
                    "redfish_version": root.get("RedfishVersion")}
        except Exception as exc:
            out.setdefault("tried", []).append(f"https://{ip}/redfish/v1: {exc}")
    return {**out, "found": False, "why": "no Redfish host interface answered" if ips
            else "no host interface address in SMBIOS type 42 (or dmidecode not readable)"}


def slurm() -> dict[str, Any]:
    """sstat/sacct, this job, and the site's energy plugin."""
    out: dict[str, Any] = {"sstat": shutil.which("sstat"), "sacct": shutil.which("sacct"),
                           "job_id": os.environ.get("SLURM_JOB_ID")}
    rc, conf = run(["scontrol", "show", "config"])
    energy = [line.split("=", 1)[1].strip() for line in conf.splitlines()
              if line.strip().startswith("AcctGatherEnergyType")] if rc == 0 else []
    out["acct_gather_energy"] = energy[0] if energy else f"unknown: {conf[:200]}"
    usable = bool(out["sstat"]) and bool(energy) and energy[0] not in ("", "(null)",
                                                                       "acct_gather_energy/none")
    return {**out, "found": usable,
            "why": "" if usable else "no sstat, or no acct_gather_energy plugin configured"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the findings to this JSON file")
    args = ap.parse_args()
    found: dict[str, Any] = {"pm_counters": pm_counters(), "ipmi_in_band": ipmi_in_band(),
             "redfish_host_interface": redfish_host_interface(), "slurm": slurm(),
             "host": os.uname().nodename,
             "gpus": sorted(glob.glob("/dev/nvidia[0-9]*"))}
    for name in ("pm_counters", "ipmi_in_band", "redfish_host_interface", "slurm"):
        f = found[name]
        print(f"{name}: {'found' if f['found'] else 'absent'}"
              + ("" if f["found"] else f" ({f.get('why', '')})"))
    print(json.dumps(found, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
