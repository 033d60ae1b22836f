"""Fault and bad-input cases (issue #18): each test is one case of the table in the issue."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/synth.py, tests/loopback.py
