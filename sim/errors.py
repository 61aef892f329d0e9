"""The exceptions of dspsim.  Every refusal the simulator makes derives from :class:`SimError`."""

from __future__ import annotations


class SimError(Exception):
    """Base of every error dspsim raises on bad input or an illegal run."""


class TargetError(SimError):
    """A target (chip description) file is malformed; the message names the file and key path."""


class KernelArgError(SimError):
    """A kernel call's symbol or arguments are wrong; the message names the argument."""


class LayoutError(SimError):
    """A buffer of a call is unmapped, in the wrong memory, misaligned or overlapping."""


class MemoryFault(SimError):
    """An access outside the memory map (or to private memory without a core)."""


class ConfigError(SimError):
    """A run-config file is malformed; the message names the file and key path."""
