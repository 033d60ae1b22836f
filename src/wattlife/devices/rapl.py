"""CPU package and DRAM energy from Linux powercap sysfs (Intel RAPL; AMD exposes the same tree).

Counters are cumulative microjoules that wrap at `max_energy_range_uj`; readings are turned into
joules since the sampler started, monotone across wraps. Since Linux 5.10 `energy_uj` is root-only:
that, and the absence of the tree, raise `SensorUnavailable` with the reason.

RAPL reads the whole package: every process on the machine, not only the run's. The run's own
process tree's CPU share and the rest of the machine's are recorded beside it (meta.json,
`devices.cpu_load`), and a run during which other processes used more than
`cpu_load.OTHERS_WARN_SHARE` of the machine is flagged in meta.json's sensor_notes.
"""

from __future__ import annotations

from pathlib import Path

from ..contracts.kinds import CPU, DRAM
from .base import CpuBackendInfo, Row, SensorBackend, SensorUnavailable
from .cpu_load import TreeLoad, WatchesTree

DEFAULT_ROOT = "/sys/class/powercap"


class RaplBackend(WatchesTree, SensorBackend):
    name = "rapl"
    role = "cpu"
    load_warning = "RAPL measures the whole package, so the run's CPU energy includes theirs"

    def __init__(self, root: str | Path = DEFAULT_ROOT, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        root = Path(root)
        zones = sorted(p for p in root.glob("intel-rapl:*") if p.is_dir()) if root.is_dir() else []
        if not zones:
            raise SensorUnavailable(f"RAPL: no powercap zones under {root} (no RAPL on this host)")
        self.zones: list[tuple[str, Path, int]] = []  # device, energy_uj path, wrap range
        for z in zones:
            parts = z.name.split(":")
            name = (z / "name").read_text().strip() if (z / "name").exists() else ""
            if len(parts) == 2 and name.startswith("package"):
                dev = CPU.device(int(parts[1]))
            elif len(parts) == 3 and name == "dram":
                dev = DRAM.device(int(parts[1]))
            else:
                continue  # core/uncore/psys subzones are inside the package; not double counted
            rng_path = z / "max_energy_range_uj"
            rng = int(rng_path.read_text()) if rng_path.exists() else 2**32
            self.zones.append((dev, z / "energy_uj", rng))
        if not self.zones:
            raise SensorUnavailable(f"RAPL: no package or dram zones under {root}")
        try:
            self._last = [self._read(p) for _, p, _ in self.zones]
        except PermissionError as exc:
            raise SensorUnavailable(
                f"RAPL: {exc.filename} is not readable by this user (root-only since Linux 5.10; "
                "ask for read access, e.g. a udev rule or `chmod o+r` in a Slurm prolog)") from exc
        self._total_uj = [0] * len(self.zones)
        self.load = TreeLoad()

    @staticmethod
    def _read(path: Path) -> int:
        return int(path.read_text())

    def poll(self, now_ns: int) -> list[Row]:
        self.load.sample()  # the run's tree and the rest of the machine (info, end_notes)
        rows: list[Row] = []
        for i, (dev, path, rng) in enumerate(self.zones):
            cur = self._read(path)
            delta = cur - self._last[i]
            if delta < 0:  # the counter wrapped
                delta += rng
            self._last[i] = cur
            self._total_uj[i] += delta
            rows.append((now_ns, dev, "energy_j", self._total_uj[i] / 1e6, "rapl"))
        return rows

    def info(self) -> CpuBackendInfo:
        return {"backend": self.name, "devices": [d for d, _, _ in self.zones], "source": "rapl",
                "energy_scope": "the whole CPU package: every process on this machine",
                "load": self.load.summary()}
