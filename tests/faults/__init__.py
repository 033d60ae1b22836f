"""Fault and bad-input cases (issue #18): one test per case of the issue's table.

A package, so that pytest puts tests/ on sys.path (synth, loopback) and no second `conftest`
module shadows tests/conftest.py."""
