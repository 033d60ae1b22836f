"""config/gpu1.yaml: the demo's pipeline on one GPU (validated, measured GPU, same stages)."""

import yaml

from conftest import REPO
from wattlife.config import load_config


def test_gpu1_preset_is_the_demo_on_one_gpu():
    gpu1 = load_config(REPO / "config/gpu1.yaml")  # validated against config/schema.yaml
    demo = yaml.safe_load((REPO / "config/config.yaml").read_text())
    assert set(gpu1) >= set(demo)  # the same stages
    assert gpu1["sampler"]["gpu"] == "nvml" and demo["sampler"]["gpu"] == "sim"
    assert {w["device"] for w in gpu1["workloads"].values()} == {"cuda"}
    assert {w["precision"] for w in gpu1["workloads"].values()} == {"bf16"}
    ex = gpu1["execution"]
    assert ex["launcher"].split()[0] == "torchrun" and "--nproc-per-node 1" in ex["launcher"]
    assert ex["gpus_per_node"] == 1 and ex["nodes"] == 1
    for k in ("workloads", "storage", "checkpoint"):
        assert ex[k] == demo["execution"][k]
    assert gpu1["powercap"]["backend"] == "simulated"  # no GPU setting is changed
    assert gpu1["results_dir"] != demo["results_dir"]
