"""A single file asked for below a transfer or a PFI cap run (a table of the downloads, a
transfer's phases.csv; the curves, the PFI table) on results without Snakemake's metadata
remakes the transfer or cap whose config slice changed, never one whose slice did not (issue 39,
as test_custody_single_target for a training cell). Local profile, on a copy of the workflow in
a temporary folder: a one-artefact loopback download beside one tiny CPU cell, and a one-cell
PFI matrix on the simulated cap backend (test_custody_others_workflow.setup); each measured once,
then dry runs."""

from __future__ import annotations

import re

import pytest
import test_custody_others_workflow as O
from test_custody_single_target import forget_metadata, snake

from wattlife import custody as C

pytestmark = pytest.mark.slow

CASES = {
    # kind: (the measuring rule, the rule reading its pointer, the targets asked for alone)
    "transfer": ("download", "link_transfer",
                 ("tables/downloads.csv", "transfers/gen-s/phases.csv",
                  "transfers/gen-s/check.txt")),
    "pfi": ("pfi_cap", "link_pfi_cap", ("tables/pfi.csv", "tables/curves.csv",
                                        "pfi/tiny-1g/curves.csv")),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_single_target_remakes_a_stale_transfer_or_cap_without_metadata(tmp_path, kind):
    rule, link, targets = CASES[kind]
    w = O.setup(tmp_path, kind)
    snake(w, targets[0])  # measured once (a transfer: the cell too, the downloads table needs it)
    assert len(O.measured(w)) == 1
    forget_metadata(w)
    for target in targets:  # unchanged: never measured again, whichever file is asked for
        assert "Nothing to be done" in snake(w, target, "-n"), target
    conf = O.changed(w, kind)
    for target in targets:  # changed: the measurement and what follows it, for each target
        dry = snake(w, target, "-n", conf=conf)
        assert re.search(rf"^rule {rule}:", dry, re.M), f"{target}: {dry[-3000:]}"
        assert re.search(rf"^rule {link}:", dry, re.M), f"{target}: {dry[-3000:]}"
        assert not re.search(r"^rule execute:", dry, re.M), f"{target}: {dry[-3000:]}"
    (request,) = C.attempts_dir(w["res"], w["ident"]).glob("wanted-*.json")  # the dry runs'
    assert len(O.measured(w)) == 1  # a request is no attempt
    if kind == "transfer":  # cheap: measured again for real, then current, metadata or not
        snake(w, targets[0], conf=conf)
        assert len(O.measured(w)) == 2
        forget_metadata(w)
        for target in targets:
            assert "Nothing to be done" in snake(w, target, "-n", conf=conf), target
