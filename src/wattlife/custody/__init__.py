"""Custody of a measurement: once taken, it is never lost, counted twice, silently stale or used
damaged, whatever happens to the controller.

Each measuring job (`wattlife measure`) writes an attempt folder of its own under
`<results>/attempts/<cell>/` (never a Snakemake output), seals it when complete (`seal`: every
file's size, rows and sha256, the cell's config slice and its hash, the code's version, host,
start/end, Slurm ids) and publishes it as the cell's result (`publish`: hard links in
`<results>/runs/<cell>/` and the pointer `sealed-<slice hash>.json`, written last). One attempt
measures a cell at a time (`measure`: the cell's run lock; a later job waits, then adopts).
Readers verify before use (`verify`); `cells` lists each cell's state; `controller` is the
results folder's controller lock.

PFI cap jobs and transfers are attempts too (`others`: `wattlife attempt`, published in their
own folders, `pfi/<cell>/cap-<W>/`, `transfers/<artefact>/`).

Modules: `seal`, `attempts`, `publish`, `verify`, `measure`, `others`, `cells`, `controller`.
"""

from .attempts import attempts_dir, attempts_of, cell_dir, folders_of
from .cells import cell_states, format_states, retire
from .controller import release as release_controller
from .controller import take as take_controller
from .measure import measure_cell
from .others import attempt_job
from .publish import pointer_name, publish, published, relink, seal_derived, wanted
from .seal import slice_hash
from .verify import cell_problems, is_sealed_cell, require_sound

__all__ = ["attempt_job", "attempts_dir", "attempts_of", "cell_dir", "cell_problems",
           "cell_states", "folders_of", "format_states", "is_sealed_cell", "measure_cell",
           "pointer_name", "publish", "published", "release_controller", "relink",
           "require_sound", "retire", "seal_derived", "slice_hash", "take_controller", "wanted"]
