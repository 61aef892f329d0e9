"""``python -m sim.cli``: the ``dspsim`` command."""

import sys

from sim.cli import main

sys.exit(main())
