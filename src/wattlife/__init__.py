"""wattlife: where the energy of AI training goes, and how flexible its power is."""

__version__ = "0.1.0"
