"""The exceptions of dspsim.  Every refusal the simulator makes derives from :class:`SimError`.

Also :func:`brief`, the one way a message shows a value the user gave: a message must stay one short line
whatever the value is (a 400-digit number, a megabyte string, a list built from YAML aliases).
"""

from __future__ import annotations

import itertools
import math
import reprlib
from collections.abc import Callable
from typing import Any, TypeVar

#: An exception type (what :func:`detached` returns is what it was given).
E = TypeVar("E", bound=BaseException)
#: What a kernel's method returns.
R = TypeVar("R")


class SimError(Exception):
    """Base of every error dspsim raises on bad input or an illegal run."""


class TargetError(SimError):
    """A target (chip description) file is malformed; the message names the file and key path."""


class KernelArgError(SimError):
    """A kernel call's symbol or arguments are wrong; the message names the argument."""


class LayoutError(SimError):
    """A buffer of a call is unmapped, in the wrong memory, misaligned or overlapping.

    ``violations`` lists the broken rules (``sim.model.layout.Violation``) when the layout check raised it.
    """

    violations: tuple = ()


class MemoryFault(SimError):
    """An access outside the memory map (or to private memory without a core).

    Raised while a tile runs, it names the kernel, core, tile and phase (and the cycle): ``core``, ``tile``
    and ``cycle`` are attributes then (None otherwise).
    """

    core: int | None = None
    tile: int | None = None
    cycle: int | None = None
    #: The message after the tile's coordinates (empty when the fault is not a tile's).
    detail: str = ""
    #: The Tile object whose transfer or operand faulted (the facade finds its phase by it); None when unknown.
    tile_object: object = None

    @classmethod
    def in_tile(cls, fault: MemoryFault, core: int, tile: Any, cycle: int, label: str = "") -> MemoryFault:
        """``fault`` as raised while ``core`` ran ``tile`` (a Tile) at ``cycle``: the engine knows these, and the
        facade adds the kernel and the phase with :meth:`located`."""
        what = f"{label}: " if label else ""
        err = cls(f"core {core}, tile {tile.tile_id}, cycle {cycle}: {what}{fault}")
        err.core, err.tile, err.cycle, err.tile_object = core, int(tile.tile_id), cycle, tile
        err.detail = f"cycle {cycle}: {what}{fault}"
        return err

    def located(self, kernel: str | None, phase: str | None) -> MemoryFault:
        """The same fault naming ``kernel`` and ``phase`` too, in the order a PlanError names them."""
        where = [f"kernel {kernel!r}"] if kernel is not None else []
        where += [f"core {self.core}", f"tile {self.tile}"] + ([f"phase {brief(phase, 40)}"] if phase else [])
        err = MemoryFault(f"{', '.join(where)}, {self.detail}")
        err.core, err.tile, err.cycle, err.tile_object = self.core, self.tile, self.cycle, self.tile_object
        err.detail = self.detail
        return err


class ConfigError(SimError):
    """A run-config file is malformed; the message names the file and key path."""


class KernelDefinitionError(SimError):
    """A kernel object cannot be registered: it breaks the Kernel protocol (a name that is not an identifier,
    arguments that are not ArgSpecs or use reserved names, no ``bind``/``plan``, an unknown precision or
    variant), or its name is already taken; the message names the kernel and where it came from."""


class PlanError(SimError):
    """A kernel's plan breaks a rule of the plan IR (:mod:`sim.model.plan_check`); the plan never ran.

    The message names the kernel, the core, the tile and the rule; the same facts are attributes (``kernel``,
    ``core``, ``tile``, ``phase``, ``rule``; None where the rule concerns the whole plan).
    """

    def __init__(self, rule: str, detail: str, *, kernel: str | None = None, core: int | None = None,
                 tile: int | None = None, phase: str | None = None):
        self.rule, self.detail = rule, detail
        self.kernel, self.core, self.tile, self.phase = kernel, core, tile, phase
        where = [f"kernel {kernel!r}" if kernel is not None else "plan"]
        if core is not None:
            where.append(f"core {core}")
        if tile is not None:
            where.append(f"tile {tile}")
        if phase is not None:
            where.append(f"phase {brief(phase, 40)}")
        super().__init__(f"{', '.join(where)}: breaks the plan rule '{rule}': {detail}")



class DeadlockError(PlanError):
    """A plan whose run stalls (rule ``deadlock``): some cores never finish, each waiting for what another cannot
    give, such as synchronised transfers whose members hold every DMA engine of a core while they wait for cores
    that wait on that core.  Found while the plan runs (whether the engines run out depends on timing), so the call
    rolls memory back; the search drops such a candidate, as one that breaks a rule of the check."""

    def __init__(self, detail: str, *, kernel: str | None = None):
        super().__init__("deadlock", detail, kernel=kernel)


class ComputeOutputError(PlanError):
    """A tile's compute returned what its output operands cannot hold (rule ``compute-output``): not one array
    per output operand, an array of another number of elements, a dtype that is not a number (objects, text,
    complex), or a masked array (whose mask would be dropped, as :meth:`sim.Simulator.write` refuses).

    Found while the plan runs (the plan check cannot call the compute), so the call rolls memory back; the
    message and attributes name the kernel, core, tile and phase as any PlanError's do.
    """

    #: The Tile object whose compute failed (the facade finds its phase by it); None when unknown.
    tile_object: object = None

    def __init__(self, detail: str, *, kernel: str | None = None, core: int | None = None, tile: int | None = None,
                 phase: str | None = None):
        super().__init__("compute-output", detail, kernel=kernel, core=core, tile=tile, phase=phase)

    def located(self, kernel: str | None, phase: str | None) -> ComputeOutputError:
        """The same refusal naming ``kernel`` and ``phase`` too (the engine knows only the core and the tile)."""
        located = ComputeOutputError(self.detail, kernel=kernel, core=self.core, tile=self.tile, phase=phase)
        located.tile_object = self.tile_object
        return located


class NestedCallError(SimError):
    """``Simulator.call`` was called while another call on the same Simulator runs (from that call's
    ``progress`` callback, on the calling thread): refused, since the outer call's rollback must cover every
    byte written during it, and a call inside it would commit or roll back on its own."""


class TimeLimitError(SimError):
    """A call ran longer than its wall-clock limit (``Simulator.call(..., time_limit_seconds=...)``, a
    run-config's ``time_limit_seconds``, ``dspsim run --time-limit``) and was interrupted; memory is as it was
    before the call."""

class KernelCodeError(SimError):
    """A kernel's own code raised an exception that is not dspsim's: its ``bind``, ``tiling_space``, ``plan``, or a
    tile's compute function.  The message names the kernel, what of it ran (``stage``: ``"bind"``,
    ``"tiling_space"``, ``"plan"`` or ``"compute"``; for a compute its core, tile and phase) and the exception, with
    the file and line of the innermost frame that raised it; ``__cause__`` is the exception itself, its traceback
    whole.  The call leaves memory as it was."""

    def __init__(self, kernel: str | None, stage: str = "", error: BaseException | None = None, where: str = ""):
        self.kernel, self.stage, self.error, self.where = kernel, stage, error, where
        #: Where a compute ran (None for the other stages); the Tile object, for the facade to find its phase.
        self.core: int | None = None
        self.tile: int | None = None
        self.phase: str | None = None
        self.tile_object: object = None
        if error is None:  # (a copy from its message alone: SimPy re-raises a failed process's exception so, the
            # original as its cause, which the facade looks through)
            self.kernel = None
            super().__init__(kernel)
            return
        frame = error.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        at = "" if frame is None else (f" at {frame.tb_frame.f_code.co_filename}:{frame.tb_lineno} in "
                                       f"{frame.tb_frame.f_code.co_name}")
        try:
            what = one_line(str(error), 300)
        except Exception:  # noqa: BLE001 (an exception whose own str() fails: its type says what it can)
            what = "(its message cannot be shown)"
        who = f"kernel {kernel!r}" if kernel is not None else "the kernel"
        super().__init__(f"{who}{where}: its {stage} raised {type(error).__name__}{': ' + what if what else ''}{at}")

    def named(self, kernel: str | None) -> KernelCodeError:
        """The same error naming ``kernel`` (code that cannot know its kernel raises it with none: a tiling
        space's functions)."""
        assert self.error is not None
        out = KernelCodeError(kernel, self.stage, self.error, self.where)
        out.core, out.tile, out.phase = self.core, self.tile, self.phase
        return out


def in_kernel_code(kernel: str | None, stage: str, fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)``, a kernel's own method (``stage`` names it): a SimError it raises passes as it is, any other
    exception becomes a :class:`KernelCodeError` whose cause it is."""
    try:
        return fn(*args)
    except SimError:
        raise
    except Exception as e:
        raise KernelCodeError(kernel, stage, e) from e


def renamed(error: E, message: str) -> E:
    """A copy of ``error`` (the same type, attributes and cause) whose message is ``message``, made without calling
    its ``__init__`` (whose parameters differ from class to class)."""
    copy = type(error).__new__(type(error))
    copy.__dict__.update(error.__dict__)
    copy.args = (message,)
    copy.__cause__ = error.__cause__
    return copy


#: Integers below this are shown digit by digit (head and tail); larger ones only by their length, since
#: Python refuses to print an integer of more than 4300 digits and takes quadratic time to do so.
_PRINTABLE_INT = 10 ** 1000


class _BriefRepr(reprlib.Repr):
    """reprlib with small limits: the work done is bounded whatever the size of the value."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = self.maxarray = 6
        self.maxdict = 4
        self.maxstring = self.maxother = 60
        self.maxlong = 24

    def repr_int(self, x: int, level: int) -> str:
        """An integer: head, tail and digit count when long; only its size when huge."""
        if -_PRINTABLE_INT < x < _PRINTABLE_INT:
            s = repr(x)
            if len(s) <= self.maxlong:
                return s
            digits = len(s.lstrip("-"))
            return f"{s[:10]}...{s[-4:]} ({digits} digits)"
        return f"<an integer of about {int(x.bit_length() * math.log10(2)) + 1} digits>"

    def repr_dict(self, x: dict, level: int) -> str:
        """The first keys of a mapping in their own order."""
        # reprlib sorts every key first (n log n on a huge mapping): show the first keys in their order.
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [f"{self.repr1(k, level - 1)}: {self.repr1(x[k], level - 1)}"
                 for k in itertools.islice(x, self.maxdict)]
        return "{" + ", ".join(items) + (", ..." if len(x) > self.maxdict else "") + "}"


_BRIEF = _BriefRepr()


def brief(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message: at most ``limit`` characters, one line, in bounded time and memory.

    Long strings, huge integers and big or deeply nested containers are cut (``...``); a value that
    cannot be shown at all is named by its type.
    """
    try:
        text = _BRIEF.repr(value)
    except Exception:  # noqa: BLE001 (a value whose repr fails must not replace the error being reported)
        text = f"<{type(value).__name__}>"
    text = " ".join(text.splitlines())  # repr of a str escapes newlines; a foreign __repr__ may not
    return text if len(text) <= limit else text[: max(limit - 3, 1)] + "..."


def one_line(text: str, limit: int = 300) -> str:
    """``text`` (a message from code outside dspsim: an exception of a user's kernel) on one line of at most
    ``limit`` characters, whitespace runs joined."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 1)] + "..."


def detached(error: E) -> E:
    """``error`` without the tracebacks of it and of the exceptions it was raised from, to be kept for a report.

    A traceback holds its frames, and each frame its caller (``f_back``): an exception kept in a list of the
    frame that caught it is a reference cycle through every frame between, alive until the cyclic collector's
    next full pass, and with those frames everything they hold (a search's planned candidates: hundreds of
    thousands of objects).  Without its traceback it is freed as soon as it is no longer needed."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return error
