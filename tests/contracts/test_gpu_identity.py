"""The GPU identity contract (contracts.gpus): meta.json's writer and reader share `GpuIdentity`,
files of the old layout read, the GPU backend is found by its declared role, and sensing and
capping number the GPUs the same way (the NVIDIA vendor class, on the fake pynvml)."""

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fake_nvml import FakeNvml
from wattlife.contracts import ContractError, GpuIdentity, RunMeta, read_meta, write_meta
from wattlife.devices.base import SensorBackend
from wattlife.devices.nvidia import NvidiaGpus
from wattlife.devices.nvml import NvmlBackend
from wattlife.devices.powercap import PowerCapController
from wattlife.run.meta import gpu_facts

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference"
OLD_KEYS = ["device", "cuda_ordinal", "nvml_index", "uuid", "pci_bus_id", "name", "local_rank"]

_opt_int = st.none() | st.integers(0, 1 << 40)
_opt_str = st.none() | st.text(max_size=12)
_limits = st.none() | st.dictionaries(st.sampled_from(["default", "min", "max"]),
                                      st.floats(1, 2000, allow_nan=False), min_size=1)


@pytest.fixture
def fake(monkeypatch):
    nv = FakeNvml(n=4)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


@given(st.builds(GpuIdentity, device=st.integers(0, 64).map(lambda k: f"gpu{k}"),
                 ordinal=_opt_int, vendor_index=_opt_int, uuid=_opt_str, model=_opt_str,
                 bus_id=_opt_str, local_rank=_opt_int, memory_total_b=_opt_int,
                 power_limits_w=_limits))
def test_an_identity_written_to_meta_json_reads_back_the_same(tmp_path_factory, gpu):
    path = tmp_path_factory.mktemp("m") / "meta.json"
    write_meta(path, RunMeta(run_id="r", gpus=[gpu.to_dict()]))
    assert read_meta(path).gpu_identities == [gpu]
    assert list(gpu.to_dict())[:7] == OLD_KEYS  # the first layout's keys, in their order


def test_every_committed_reference_meta_json_reads_as_identities():
    """The old layout (no schema_version, no memory or limits in `gpus`) reads; written back, each
    entry is the same JSON object, keys in the same order."""
    metas = sorted(REFERENCE.rglob("meta.json"))
    assert len(metas) > 50
    with_gpus = 0
    for m in metas:
        doc = json.loads(m.read_text())
        ids = read_meta(m).gpu_identities
        assert [g.to_dict() for g in ids] == doc.get("gpus", []), m
        assert [list(g.to_dict()) for g in ids] == [list(e) for e in doc.get("gpus", [])], m
        for g in ids:
            with_gpus += 1
            assert g.number == g.ordinal and g.vendor_index is not None and g.model, m
    assert with_gpus > 50


def test_a_malformed_entry_names_the_entry_and_the_key():
    meta = RunMeta.from_dict({"gpus": [{"device": "gpu0"}, {"device": "gpu1", "nvml_index": "2"}]})
    with pytest.raises(ContractError, match=r"gpus\[1\]: key 'nvml_index' expects an integer"):
        _ = meta.gpu_identities


def test_the_writer_takes_the_gpu_facts_from_the_backend_whose_role_is_gpu(fake):
    """Before: the backend was found by sniffing a `gpu_model` key in its info()."""

    class Other(SensorBackend):
        name = "other-with-a-gpu_model-key"

        def info(self):
            return {"backend": self.name, "gpu_model": "not a GPU", "driver": "x"}

    nvml = NvmlBackend(visible=None, gpm=False)
    try:
        model, driver, ids = gpu_facts([(Other(), Other().info()), (nvml, nvml.info())])
    finally:
        nvml.close()
    assert (model, driver) == ("Fake H200", "fake-550.00")
    assert [(g.device, g.vendor_index, g.memory_total_b) for g in ids] == [
        (f"gpu{k}", k, 141 << 30) for k in range(4)]
    assert ids[0].power_limits_w == {"default": 700.0, "min": 200.0, "max": 700.0}


def test_sensing_and_capping_number_the_gpus_alike(fake, tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES=2,0: the vendor class, the sensor's identities and the cap backend
    agree that the workload's cuda:0 (trace gpu0) is NVML GPU 2."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    gpus, notes = NvidiaGpus().visible("2,0")
    assert [(g.device, g.index) for g in gpus] == [("gpu0", 2), ("gpu1", 0)] and notes == []
    b = NvmlBackend(interval_s=0.01, telemetry_s=0.01, gpm=False)
    ids = [GpuIdentity.from_json(e) for e in b.info()["gpus"]]
    assert [(g.device, g.ordinal, g.vendor_index, g.uuid) for g in ids] == [
        ("gpu0", 0, 2, fake.gpus[2].uuid), ("gpu1", 1, 0, fake.gpus[0].uuid)]
    with PowerCapController("nvml", state_file=tmp_path / "s.json", allow_real=True,
                            gpus=[ids[0].vendor_index]) as ctl:
        ctl.set_cap(400)
        limits = {r[1]: r[3] for r in b.poll(10**18) if r[2] == "power_limit_w"}
        assert limits == {"gpu0": 400.0, "gpu1": 700.0}
    b.close()
    assert [g.limit_mw for g in fake.gpus] == [700_000] * 4


def test_a_backend_with_malformed_gpus_leaves_meta_json_without_them(capsys):
    class Bad(SensorBackend):
        name, role = "bad-gpu", "gpu"

    info = {"backend": "bad-gpu", "gpu_model": "M", "driver": "d", "gpus": [{"device": 3}]}
    assert gpu_facts([(Bad(), info)]) == ("M", "d", [])
    assert "bad-gpu info: gpus[0]: key 'device' expects a string" in capsys.readouterr().err


@pytest.mark.parametrize("device, number", [("gpu7", 7), ("gpu", None), ("cpu0", None),
                                            ("gpu²", None), (None, None)])
def test_the_device_number_is_that_of_gpu_n_only(device, number):
    assert GpuIdentity(device=device).number == number
