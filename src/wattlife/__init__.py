"""wattlife: where the energy of AI training goes, and how flexible its power is."""

from .diagnostics import install as _install_diagnostics

__version__ = "0.1.0"

_install_diagnostics()
