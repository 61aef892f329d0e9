"""On/off switches read from environment variables, spelled as people spell them.

``1``, ``true``, ``yes`` and ``on`` turn a switch on; unset, empty, ``0``, ``false``, ``no`` and ``off`` leave it off
(any case, spaces around ignored).  Any other value is refused, naming the variable, rather than guessed at: a
switch such as ``DSPSIM_ALLOW_KERNELS`` guards against running code from a file someone sent, and reading
``false`` as set would turn it on.
"""

from __future__ import annotations

import os

from sim.errors import ConfigError

#: Values that turn a switch on, and those that leave it off (compared in lower case, stripped).
ON = ("1", "true", "yes", "on")
OFF = ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` turns its switch on; a :class:`~sim.errors.ConfigError` naming it
    for a value that is neither on nor off."""
    value = os.environ.get(name, "").strip().lower()
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ConfigError(f"environment variable {name}={os.environ[name]!r}: expected one of "
                      f"{', '.join(v for v in ON)} (on) or {', '.join(repr(v) if not v else v for v in OFF)} (off)")


#: The switches dspsim reads (their modules say what each does); ``DSPSIM_NO_STEADY`` is read at import, where a
#: refusal could not be reported, and turns the steady state off for any value that is not off.
SWITCHES = ("DSPSIM_ALLOW_KERNELS", "DSPSIM_NO_CACHE", "DSPSIM_NO_STEADY")


def check_switches() -> None:
    """A :class:`~sim.errors.ConfigError` naming the first switch of :data:`SWITCHES` set to neither on nor off:
    what a command checks before any work (a sweep's workers would otherwise each fail on it)."""
    for name in SWITCHES:
        env_flag(name)
