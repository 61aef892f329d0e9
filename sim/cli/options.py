"""Options several ``dspsim`` commands share."""

from __future__ import annotations

import argparse

from sim.config.user_kernels import ALLOW_ENV_VAR, ALLOW_FLAG

#: What ``--allow-kernels`` says in the help of a command that loads one run-config.
ALLOW_HELP = (f"import the Python files and modules the run-config's kernels: list names, which runs their code "
              f"(refused without this flag or {ALLOW_ENV_VAR}=1): only for configs you trust")


def add_allow_kernels(parser: argparse.ArgumentParser, help: str = ALLOW_HELP) -> None:
    """Add ``--allow-kernels`` to a command that loads run-configs."""
    parser.add_argument(ALLOW_FLAG, dest="allow_kernels", action="store_true", help=help)


def allow_kernels(args: argparse.Namespace) -> bool | None:
    """``--allow-kernels``: True when given; None leaves it to ``$DSPSIM_ALLOW_KERNELS``."""
    return True if getattr(args, "allow_kernels", False) else None
