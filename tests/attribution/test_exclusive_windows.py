"""`exclusive_windows.ExclusiveWindows`: windows fed out of their order are refused (its sums
are checked bit for bit against the whole tree's by `test_integrate_windows`, through
`window_checks.check_coverage_and_gaps`)."""

from __future__ import annotations

import numpy as np
import pytest

from synth import nested_steps
from wattlife.attribution.exclusive_windows import ExclusiveWindows
from window_checks import rank_windows


def test_a_window_not_following_the_carried_rows_is_refused():
    """Windows fed out of their order: the carried rows are not the next window's first."""
    ev = nested_steps(6, 0, scale_ms=7, every=4, lead_ms=40)
    wins = list(rank_windows(ev, 2))
    ex = ExclusiveWindows(1)
    ex.feed(wins[1], np.zeros((len(wins[1].tree.start), 1)))
    with pytest.raises(ValueError, match="carried from the window before"):
        ex.feed(wins[0], np.zeros((max(len(wins[0].tree.start) - ex.carried(), 0), 1)))
