"""FakeNvml: a FAKE of the pynvml module (nvidia-ml-py) for tests on machines without a GPU.

It exposes, with pynvml's names, signatures and error classes, the functions wattlife calls, over a
few simulated GPUs whose state the test sets (`gpus[i].power_mw`, `.limit_mw`, ...). A test injects
it with `monkeypatch.setitem(sys.modules, "pynvml", fake)`; the backends import `pynvml` and get
it. `fail(name, index, times, error)` makes a call raise, to exercise error handling. Nothing here
is a measurement.
"""

from __future__ import annotations

import types
from types import SimpleNamespace


class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return type(self).__name__.replace("NVMLError_", "")


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_Unknown(NVMLError):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


class FakeGpu:
    def __init__(self, index: int, uuid: str, mig: list[str] | None = None) -> None:
        self.index, self.uuid, self.mig = index, uuid, mig or []
        self.name = "Fake H200"
        self.power_mw = 100_000
        self.energy_mj = 1_000_000
        self.limit_mw = self.default_mw = 700_000
        self.min_mw, self.max_mw = 200_000, 700_000
        self.samples: list[tuple[int, int]] = []  # (timestamp us, mW) in the driver's buffer


class FakeNvml(types.ModuleType):
    """The fake module. `FakeNvml(n=2)`; GPU i has UUID `GPU-fake<i>…`."""

    NVMLError = NVMLError
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Unknown = NVMLError_Unknown
    NVMLError_NoPermission = NVMLError_NoPermission
    NVML_TOTAL_POWER_SAMPLES = 0
    NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT = 0, 1
    NVML_VALUE_TYPE_UNSIGNED_LONG, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 2, 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_INT = 4, 5
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_SUCCESS = 0

    def __init__(self, n: int = 2, uuids: list[str] | None = None,
                 mig: dict[int, list[str]] | None = None) -> None:
        super().__init__("pynvml")
        uuids = uuids or [f"GPU-fake{i}-0000-1111-2222-{i:012d}" for i in range(n)]
        self.gpus = [FakeGpu(i, u, (mig or {}).get(i)) for i, u in enumerate(uuids)]
        self.initialised = 0
        self.calls: list[str] = []
        self._fail: dict[tuple[str, int | None], list] = {}

    # fault injection -------------------------------------------------------------------------
    def fail(self, name: str, index: int | None = None, times: int = 10**9,
             error: type[NVMLError] = NVMLError_Unknown) -> None:
        """Make `name` raise `error` for GPU `index` (None: any) the next `times` calls."""
        self._fail[(name, index)] = [times, error]

    def _check(self, name: str, index: int | None) -> None:
        self.calls.append(name)
        for key in ((name, index), (name, None)):
            f = self._fail.get(key)
            if f and f[0] > 0:
                f[0] -= 1
                raise f[1]()

    def _gpu(self, name: str, h) -> FakeGpu:
        self._check(name, h.index)
        return h

    # pynvml functions ------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._check("nvmlInit", None)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown", None)
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "fake-550.00"

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount", None)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        self._check("nvmlDeviceGetHandleByIndex", i)
        if not 0 <= i < len(self.gpus):
            raise NVMLError(2)
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str):
        for g in self.gpus:
            if g.uuid == uuid:
                return g
            if uuid in g.mig:
                return SimpleNamespace(parent=g, mig_uuid=uuid)
        raise NVMLError_NotFound(6)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h):
        if not hasattr(h, "parent"):
            raise NVMLError(2)
        return h.parent

    def nvmlDeviceGetIndex(self, h) -> int:
        return h.index

    def nvmlDeviceGetName(self, h) -> str:
        return self._gpu("nvmlDeviceGetName", h).name

    def nvmlDeviceGetUUID(self, h) -> str:
        return self._gpu("nvmlDeviceGetUUID", h).uuid

    def nvmlDeviceGetPciInfo(self, h):
        g = self._gpu("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=f"00000000:{0x18 + g.index:02X}:00.0")

    def nvmlDeviceGetSamples(self, h, kind: int, last_ts_us: int):
        g = self._gpu("nvmlDeviceGetSamples", h)
        new = [(t, v) for t, v in g.samples if t > last_ts_us]
        if not new:
            raise NVMLError_NotFound(6)
        return self.NVML_VALUE_TYPE_UNSIGNED_INT, [
            SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v)) for t, v in new]

    def nvmlDeviceGetPowerUsage(self, h) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", h).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", h).energy_mj

    def nvmlGpmQueryDeviceSupport(self, h):
        self._gpu("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(isSupportedDevice=0)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        g = self._gpu("nvmlDeviceGetPowerManagementLimitConstraints", h)
        return g.min_mw, g.max_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementDefaultLimit", h).default_mw

    def nvmlDeviceGetPowerManagementLimit(self, h) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementLimit", h).limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", h).limit_mw

    def nvmlDeviceSetPowerManagementLimit(self, h, mw: int) -> None:
        g = self._gpu("nvmlDeviceSetPowerManagementLimit", h)
        if not g.min_mw <= mw <= g.max_mw:
            raise NVMLError(2)
        g.limit_mw = mw

    def nvmlDeviceGetUtilizationRates(self, h):
        self._gpu("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=50, memory=20)

    def nvmlDeviceGetClockInfo(self, h, kind: int) -> int:
        self._gpu("nvmlDeviceGetClockInfo", h)
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMemoryInfo(self, h):
        self._gpu("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(used=1 << 30, total=141 << 30)

    def nvmlDeviceGetTemperature(self, h, kind: int) -> int:
        self._gpu("nvmlDeviceGetTemperature", h)
        return 40
