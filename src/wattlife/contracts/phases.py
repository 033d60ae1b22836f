"""The phase registry: one table (`PHASES`) of every phase name the suite knows, in the figures'
order, with what each one is. Every list of phase names elsewhere derives from it
(`LIFECYCLE_PHASES`, `WAITING_PHASES`, the figures' order and colours, ...), and markers name
phases by the constants below. To add a phase: one `PhaseSpec` row in `PHASES` (and a constant).

A `phase` cell may hold any name (`names.phase_name_problem`); a name the table lacks is a user's
own phase: attributed like any other, drawn after the known ones in grey, no flag set.
"""

from __future__ import annotations

from dataclasses import dataclass

# ----------------------------------------------------------------------------- the names
IDLE_BASELINE = "idle_baseline"  # the idle window before the command (`wattlife run`)
PROCESS_STARTUP = "process_startup"  # command start to its first marked phase
SETUP = "setup"  # a workload's own setup (imports, choosing the decode path)
DOWNLOAD_DATASET = "download_dataset"
DOWNLOAD_MODEL = "download_model"
STAGE_COPY = "stage_copy"  # the dataset copied to node-local storage
TOKENIZE = "tokenize"  # load or train the tokenizer, tokenise and pack the corpus
MODEL_LOAD = "model_load"
DATA_LOAD = "data_load"
H2D = "h2d"  # host-to-device copy of a batch
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
GRAD_SYNC = "grad_sync"
VALIDATION = "validation"
CHECKPOINT = "checkpoint"  # a synchronous save
CHECKPOINT_STAGE = "checkpoint_stage"  # an asynchronous save's copy to CPU memory
CHECKPOINT_WAIT = "checkpoint_wait"  # waiting for the previous asynchronous save's write
UPLOAD = "upload"
COMPILE = "compile"  # first-call compilation (torch.compile) inside a step's forward / backward
WARMUP = "warmup"  # what the warm-up steps did (attribution's name for their rows)
STEP = "step"  # a training step; carries `items`
FINALIZE = "finalize"
PROCESS_EXIT = "process_exit"  # last marked phase to command end
UNATTRIBUTED = "unattributed"  # device time covered by no phase
CHECKPOINT_WRITE = "checkpoint_write"  # an asynchronous save's write, in a background thread
CHECKPOINT_SAVED = "checkpoint_saved"  # the instant a Trainer's save ended (zero length)
IDLE = "idle"  # the phase of a GPU that no rank uses
RESIDUAL = "deconvolution_residual"  # deconvolved sum minus the measured total


@dataclass(frozen=True)
class PhaseSpec:
    """What one phase name is. Its place in `PHASES` is its place in the figures' order."""

    name: str
    #: a stage of a model's life the lifecycle study reports (`LIFECYCLE_PHASES`)
    lifecycle: bool = False
    #: marked inside every training step: per-item energy (`analysis.aggregate`, fig. 1)
    per_step: bool = False
    #: > 0: the GPU waits through the whole phase (`analysis.waiting`); the number is its place in
    #: the waiting order (fig. 9 stacks and colours its phases in that order)
    waiting: int = 0
    #: the training loop pauses for it (trace segmentation, the end of the timed loop)
    pause: bool = False
    #: runs beside its rank's phases (a background thread): out of the nesting rule, the phase
    #: tree and its energy (`attribution.tree`, `check.events`)
    concurrent: bool = False
    #: an interval `wattlife run` itself knows, added by attribution from meta.json
    wrapper: bool = False
    #: one data transfer measured as one phase (`prepare.transfer`, the downloads table)
    transfer: bool = False
    #: counted in the training shares of the lifecycle study (`analysis.shares`)
    training: bool = True
    #: has its own place and colour in the figures' order (else drawn after them in grey)
    drawn: bool = True
    #: a matplotlib colour for the figures; None: the figures' palette at its place
    colour: str | None = None


#: every known phase, in the figures' order
PHASES: tuple[PhaseSpec, ...] = (
    PhaseSpec(IDLE_BASELINE, wrapper=True, training=False),
    PhaseSpec(PROCESS_STARTUP, wrapper=True, training=False, waiting=1),
    PhaseSpec(SETUP, waiting=2),
    PhaseSpec(DOWNLOAD_DATASET, lifecycle=True, transfer=True),
    PhaseSpec(DOWNLOAD_MODEL, lifecycle=True, transfer=True),
    PhaseSpec(STAGE_COPY, lifecycle=True, waiting=5),
    PhaseSpec(TOKENIZE, waiting=3),
    PhaseSpec(MODEL_LOAD, lifecycle=True, waiting=4),
    PhaseSpec(DATA_LOAD, lifecycle=True, per_step=True, waiting=6),
    PhaseSpec(H2D, lifecycle=True, per_step=True),
    PhaseSpec(FORWARD, lifecycle=True, per_step=True),
    PhaseSpec(BACKWARD, lifecycle=True, per_step=True),
    PhaseSpec(OPTIMIZER, lifecycle=True, per_step=True),
    # waiting only on the ranks that wait for the slowest one (analysis.waiting.grad_sync_waits)
    PhaseSpec(GRAD_SYNC, lifecycle=True, per_step=True),
    PhaseSpec(VALIDATION, lifecycle=True, pause=True),
    PhaseSpec(CHECKPOINT, lifecycle=True, pause=True, waiting=7),
    PhaseSpec(CHECKPOINT_STAGE, lifecycle=True, pause=True, waiting=8),
    PhaseSpec(CHECKPOINT_WAIT, lifecycle=True, pause=True, waiting=9),
    PhaseSpec(UPLOAD, lifecycle=True, transfer=True),
    PhaseSpec(COMPILE, training=False, waiting=10),
    PhaseSpec(WARMUP, training=False),
    PhaseSpec(STEP, training=False),
    PhaseSpec(FINALIZE, waiting=11),
    PhaseSpec(PROCESS_EXIT, wrapper=True, training=False, waiting=12),
    PhaseSpec(UNATTRIBUTED, training=False, waiting=13),
    PhaseSpec(CHECKPOINT_WRITE, concurrent=True, drawn=False),
    PhaseSpec(CHECKPOINT_SAVED, drawn=False),  # instrument.WattlifeCallback.on_save
    PhaseSpec(IDLE, waiting=14, drawn=False),
    PhaseSpec(RESIDUAL, training=False, drawn=False),
)


def phase_spec(name: str) -> PhaseSpec | None:
    """The table's row for `name`; None for a name it lacks (a user's own phase)."""
    return next((s for s in PHASES if s.name == name), None)


def _names(flag: str) -> tuple[str, ...]:
    """The names of the phases whose `flag` is set, in the table's order."""
    return tuple(s.name for s in PHASES if getattr(s, flag))


# ----------------------------------------------------------------------------- derived lists
#: the lifecycle study's phases (a list, as it always was)
LIFECYCLE_PHASES: list[str] = list(_names("lifecycle"))
#: phases that run beside a rank's timeline (a background thread) and overlap its phases: kept
#: out of the nesting rule, the phase tree and its energy (workloads.checkpointing)
CONCURRENT_PHASES = _names("concurrent")
#: intervals `wattlife run` itself knows (added by attribution from meta.json)
WRAPPER_PHASES = _names("wrapper")
#: the phases marked inside every training step (per-item energy: `analysis.repeats`, fig. 1)
PER_STEP_PHASES = _names("per_step")
#: phases during which the GPU waits (for data, the disk, the interpreter, the compiler, the
#: network, or nothing; `idle`: a GPU no rank drove): the whole phase is waiting
#: (`analysis.waiting`, fig. 9), in the waiting order. `grad_sync` is waiting only on the ranks
#: that wait for the slowest one (`analysis.waiting.grad_sync_waits`).
WAITING_PHASES = tuple(s.name for s in sorted((s for s in PHASES if s.waiting > 0),
                                              key=lambda s: s.waiting))
#: phases the training loop pauses for (validation, checkpoints)
PAUSE_PHASES = _names("pause")
#: phases that are one measured data transfer each (`prepare.transfer`)
TRANSFER_PHASES = _names("transfer")
#: phases left out of the lifecycle study's training shares (`analysis.shares`)
NOT_TRAINING_PHASES = tuple(s.name for s in PHASES if not s.training)
#: the phases with their own place and colour in the figures, in order
DRAWN_PHASES = _names("drawn")
