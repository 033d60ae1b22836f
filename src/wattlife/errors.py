"""The errors wattlife reports to its user: one hierarchy under `WattlifeError`.

The `wattlife` command turns a `WattlifeError` into one line naming the file/option/key and the
rule it breaks (exit 2); any other exception is a bug in wattlife and gets a bug report (exit
`EXIT_BUG`). So raise one of these for the user's mistake or the site's state, never a bare
builtin: a bare `ValueError` from our code would read as a bug. (The CLI also says in one line
what the OS and the parsers of the user's files raise: `OSError`, JSON/CSV/YAML errors.) Each
class keeps the builtin base its callers caught before the hierarchy existed (`except ValueError`
still catches an `InputError`), and the classes defined elsewhere (`ConfigError`, `PathBusy`,
`SensorUnavailable`, ...) derive from these, so their names stay importable where they were.

    WattlifeError
    +-- InputError (ValueError)      bad config, option, or file content
    +-- ContractError (ValueError)   a table breaks its file contract
    +-- SetupError (RuntimeError)    the environment: a missing tool, a busy path, Slurm, network
        +-- SensorError              a sensor or device control cannot be used here
"""

from __future__ import annotations

#: the exit code of a bad input or environment (one line on stderr), as before the hierarchy
EXIT_USER = 2
#: the exit code of a bug in wattlife (sysexits.h EX_SOFTWARE: internal software error)
EXIT_BUG = 70


class WattlifeError(Exception):
    """An error the user can act on; its message is the one line the command prints."""


class InputError(WattlifeError, ValueError):
    """The user's input (config, option, file content) breaks a rule; the message names it."""


class ContractError(WattlifeError, ValueError):
    """A table does not follow its contract; the message names the file, line and column."""


class SetupError(WattlifeError, RuntimeError):
    """Something around wattlife is not as needed: a missing tool, a busy path, a Slurm or site
    problem, a network failure; the message says what and, where known, how to fix it."""


class SensorError(SetupError):
    """A sensor or a device control (a power cap) cannot be used here; the message says why."""
