"""The power-cap backend registry (devices.powercap): the CLI's choices, the state files' check
and the simulated label derive from it; a backend registered there appears everywhere."""

import json

import pytest

from wattlife.cli import build_parser, main
from wattlife.config import ConfigError, validate_config
from wattlife.config.loading import schema
from wattlife.devices import powercap
from wattlife.devices.powercap import (
    CAP_BACKENDS,
    CapBackend,
    PowerCapController,
    cap_backend_choices,
    read_state,
    register_cap_backend,
    unregister_cap_backend,
)


class _FakeCaps:
    """A FAKE cap device (no hardware): three GPUs, limits in memory."""

    def __init__(self, n: int) -> None:
        self.limits = [500.0, 500.0, 500.0]

    def count(self) -> int:
        return len(self.limits)

    def get(self, i: int) -> float:
        return self.limits[i]

    def constraints(self, i: int) -> tuple[float, float, float]:
        return 100.0, 500.0, 500.0

    def set(self, i: int, watts: float) -> None:
        self.limits[i] = watts


@pytest.fixture
def fake_backend():
    register_cap_backend(CapBackend("fake-caps", _FakeCaps, simulated=True, source="fake"))
    yield "fake-caps"
    unregister_cap_backend("fake-caps")


def _choices(argv_prefix: list[str], option: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and argv_prefix[0] in a.choices)
    cmd = sub.choices[argv_prefix[0]]
    return list(next(a for a in cmd._actions if option in a.option_strings).choices)


def test_a_registered_backend_appears_in_every_commands_choices(fake_backend, capsys):
    for cmd, opt in (("powercap", "--backend"), ("pfi-sweep", "--backend"),
                     ("launch-node", "--powercap-backend")):
        assert fake_backend in _choices([cmd], opt), cmd
    assert main(["powercap", "show", "--backend", fake_backend]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["source"] == "fake" and shown["gpus"]["2"]["limit_w"] == 500.0


def test_a_registered_backend_is_a_valid_config_and_an_unknown_one_is_one_line(fake_backend):
    validate_config({"slice": "t", "powercap": {"backend": fake_backend}})
    unregister_cap_backend(fake_backend)
    try:
        with pytest.raises(ConfigError) as err:
            validate_config({"slice": "t", "powercap": {"backend": fake_backend}})
        assert str(err.value) == ("invalid config: powercap.backend: expected one of "
                                  "['simulated', 'nvml', 'nvidia-smi'], got 'fake-caps'")
    finally:
        register_cap_backend(CapBackend("fake-caps", _FakeCaps, simulated=True, source="fake"))


def test_the_registry_order_gives_the_choices_help_shows():
    """`--help` lists a command's default first, then the registry's order: unchanged texts; the
    config schema's enum is the same list."""
    assert list(CAP_BACKENDS) == ["nvml", "nvidia-smi", "simulated"]
    assert _choices(["powercap"], "--backend") == ["nvml", "nvidia-smi", "simulated"]
    assert _choices(["launch-node"], "--powercap-backend") == ["simulated", "nvml", "nvidia-smi"]
    enum = schema()["properties"]["powercap"]["properties"]["backend"]
    assert enum["enum"] == cap_backend_choices(enum["default"])


def test_a_state_file_of_a_registered_backend_reads_and_its_caps_restore(fake_backend,
                                                                          tmp_path):
    state = tmp_path / "s.json"
    with PowerCapController(fake_backend, state_file=state) as ctl:  # simulated: no opt-in
        ctl.set_cap(200)
        assert read_state(state) == (fake_backend, {0: 500.0, 1: 500.0, 2: 500.0})
        assert ctl.dev.get(1) == 200
    assert ctl.dev.get(1) == 500 and not state.exists()
    assert '"simulated"|"fake-caps", "limits_w"' in powercap.state_form()


def test_an_unknown_backend_names_the_registry():
    with pytest.raises(ValueError, match=r"powercap.backend must be one of \('nvml', "
                                         r"'nvidia-smi', 'simulated'\), got 'amd'"):
        PowerCapController("amd")
