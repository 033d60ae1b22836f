"""A GPU's identity in meta.json, vendor-neutral: `GpuIdentity`, its JSON layout and its reader.

`wattlife run` writes one entry per sampled GPU under meta.json's `gpus` (`GpuIdentity.to_dict`);
attribution reads them back (`RunMeta.gpu_identities`, `GpuIdentity.from_json`) to know which
rank drives which trace device. The JSON keys are the layout written since the first version
(`device`, `cuda_ordinal`, `nvml_index`, `uuid`, `pci_bus_id`, `name`, `local_rank`), so files
already written read unchanged; `memory_total_b` and `power_limits_w` were added later and are
written only when known. A vendor other than NVIDIA fills the same fields (`vendor_index` is its
own index; the JSON key keeps its first name).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NotRequired, TypedDict, cast

from ..errors import ContractError
from .kinds import GPU


class PowerLimitsDict(TypedDict, total=False):
    """A GPU's power-limit range as JSON (W)."""

    default: float
    min: float
    max: float


class GpuIdentityDict(TypedDict):
    """One entry of meta.json's `gpus` as JSON (the layout `GpuIdentity.to_dict` writes)."""

    device: str
    cuda_ordinal: int
    nvml_index: int | None
    uuid: str | None
    pci_bus_id: str | None
    name: str | None
    local_rank: int | None
    memory_total_b: NotRequired[int]
    power_limits_w: NotRequired[PowerLimitsDict]


#: JSON key -> GpuIdentity field (the JSON keys keep their first, NVIDIA-worded names)
JSON_KEYS = {"device": "device", "cuda_ordinal": "ordinal", "nvml_index": "vendor_index",
             "uuid": "uuid", "pci_bus_id": "bus_id", "name": "model", "local_rank": "local_rank",
             "memory_total_b": "memory_total_b", "power_limits_w": "power_limits_w"}
_OPTIONAL_KEYS = ("memory_total_b", "power_limits_w")  # written only when known
_INT_FIELDS = ("ordinal", "vendor_index", "local_rank", "memory_total_b")
_STR_FIELDS = ("device", "uuid", "bus_id", "model")


@dataclasses.dataclass(frozen=True)
class GpuIdentity:
    """One sampled GPU: its trace device name `gpu<N>` (N = `ordinal`, the sampler's order = the
    job's visible ordinal), the vendor's own index (NVML index), UUID, model, PCI bus id, memory
    and power-limit range where known, and the local rank that drives it. Fields a hand-written
    or older file lacks are None; `extra` keeps keys this version does not know."""

    device: str | None = None
    ordinal: int | None = None
    vendor_index: int | None = None
    uuid: str | None = None
    model: str | None = None
    bus_id: str | None = None
    local_rank: int | None = None
    memory_total_b: int | None = None
    power_limits_w: dict[str, float] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def number(self) -> int | None:
        """N of the device name `gpu<N>`; None when the name is not of that form."""
        return GPU.index(self.device or "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON entry: the first layout's keys in their order, then the later ones where
        known, then the extras."""
        doc = {k: getattr(self, f) for k, f in JSON_KEYS.items()}
        for k in _OPTIONAL_KEYS:
            if doc[k] is None:
                del doc[k]
        return {**doc, **{k: v for k, v in self.extra.items() if k not in doc}}

    def to_json(self) -> GpuIdentityDict:
        """`to_dict` typed as the JSON layout (for a backend's typed `info()`)."""
        return cast(GpuIdentityDict, self.to_dict())

    @classmethod
    def from_json(cls, entry: Any, where: str = "meta.json: gpus[0]") -> GpuIdentity:
        """Read one entry (any layout written so far); a value of the wrong type is a
        ContractError naming `where` and the key."""
        if not isinstance(entry, dict):
            raise ContractError(f"{where}: expected an object, got {entry!r}")
        values: dict[str, Any] = {}
        for key, field in JSON_KEYS.items():
            v = entry.get(key)
            if v is None:
                continue
            if field in _INT_FIELDS and (isinstance(v, bool) or not isinstance(v, int)):
                raise ContractError(f"{where}: key '{key}' expects an integer, got {v!r}")
            if field in _STR_FIELDS and not isinstance(v, str):
                raise ContractError(f"{where}: key '{key}' expects a string, got {v!r}")
            if field == "power_limits_w" and not _limits_ok(v):
                raise ContractError(f"{where}: key '{key}' expects an object of watts "
                                    f"(default, min, max), got {v!r}")
            values[field] = v
        return cls(**values, extra={k: v for k, v in entry.items() if k not in JSON_KEYS})


def _limits_ok(v: Any) -> bool:
    return isinstance(v, dict) and all(
        k in ("default", "min", "max") and isinstance(w, (int, float)) and not isinstance(w, bool)
        for k, w in v.items())


def gpu_identities(gpus: Any) -> list[GpuIdentity]:
    """meta.json's `gpus` list as identities; ContractError naming the entry and key."""
    if not isinstance(gpus, list):
        raise ContractError(f"meta.json: key 'gpus' expects a list, got {gpus!r}")
    return [GpuIdentity.from_json(g, f"meta.json: gpus[{i}]") for i, g in enumerate(gpus)]
