"""`python -m wattlife.cli ...`: the `wattlife` command (used under torchrun and in tests)."""

import sys

from . import main

sys.exit(main())
