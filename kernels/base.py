"""The kernel protocol and the plan types a kernel hands to the engine.

A kernel never touches time or SimPy.  It binds the user's arguments into a
:class:`BoundCall` (buffers with addresses, shapes and dtypes, plus attributes),
and lowers that call into a :class:`Plan`: phases separated by barriers, each a
list of :class:`Tile` per core.  A tile is DMA-in transfers into the core's
scratchpad, one :class:`Compute` on scratchpad operands, and DMA-out transfers.
The engine executes plans; kernels describe them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from sim.errors import KernelArgError
from sim.messages import shown
from sim.model.memory import block_span
from sim.model.target import Target

#: Precision name -> numpy dtype of the big tensors of a kernel.
PRECISION_DTYPES: dict[str, np.dtype] = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16)}
#: Symbol prefix -> precision name.
PREFIX_PRECISION: dict[str, str] = {"fp": "fp32", "hp": "fp16"}


def c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-ordered array of ``shape`` with ``itemsize`` bytes per element."""
    strides: list[int] = []
    step = itemsize
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Transfer:
    """One DMA descriptor: an n-d block of elements copied from ``src`` to ``dst``.

    Addresses are raw chip addresses; private regions resolve to the issuing core's
    own memory.  ``shape`` counts elements per dimension; the strides are in bytes
    and may differ on each side (a strided gather of a channel slice into a
    contiguous scratchpad buffer, for instance).
    """

    src: int
    dst: int
    shape: tuple[int, ...]
    itemsize: int
    src_strides: tuple[int, ...]
    dst_strides: tuple[int, ...]

    @property
    def size_bytes(self) -> int:
        """Bytes moved by this descriptor."""
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n

    @staticmethod
    def contiguous(src: int, dst: int, size_bytes: int) -> "Transfer":
        """A plain copy of ``size_bytes`` contiguous bytes."""
        return Transfer(src, dst, (int(size_bytes),), 1, (1,), (1,))

    @staticmethod
    def block(src: int, dst: int, shape: Sequence[int], itemsize: int,
              src_strides: Sequence[int], dst_strides: Sequence[int] | None = None) -> "Transfer":
        """A strided block; ``dst_strides`` defaults to a dense C-ordered destination."""
        shape = tuple(int(s) for s in shape)
        dst_s = tuple(dst_strides) if dst_strides is not None else c_strides(shape, itemsize)
        return Transfer(src, dst, shape, int(itemsize), tuple(int(s) for s in src_strides),
                        tuple(int(s) for s in dst_s))

    def runs(self, side: str) -> tuple[int, int]:
        """``(number of contiguous runs, bytes per run)`` of ``side`` ('src' or 'dst').

        The run grows from the innermost dimension outwards while each stride
        continues the bytes before it; size-1 dimensions never break a run.
        """
        strides = self.src_strides if side == "src" else self.dst_strides
        run = self.itemsize
        for n, st in zip(reversed(self.shape), reversed(strides)):
            if n == 1:
                continue
            if st != run:
                break
            run *= n
        total = self.size_bytes
        return (total // run if run else 0), run

    def span(self, side: str) -> tuple[int, int]:
        """``(lowest address, one past the highest byte)`` touched on ``side`` ('src' or 'dst')."""
        if side == "src":
            return block_span(self.src, self.shape, self.itemsize, self.src_strides)
        return block_span(self.dst, self.shape, self.itemsize, self.dst_strides)


@dataclass(frozen=True)
class Operand:
    """A dense C-ordered array at ``addr`` in the issuing core's view of memory."""

    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size_bytes(self) -> int:
        """Bytes the operand occupies."""
        return math.prod(int(d) for d in self.shape) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Compute:
    """The vector work of one tile.

    ``fn`` receives the input operands as numpy arrays (read from simulated
    memory) and returns one array per output operand, which the engine writes
    back.  ``flops`` counts the math's own element operations on this tile's
    elements (a fused multiply-add is two): summed over a plan they are the
    operation's flops, whatever the tiling or the storage precision.
    ``extra_ops`` counts the other vector element operations the tile issues:
    fp16 <-> fp32 conversions, layout transpositions, the empty lanes of
    part-filled vectors, zero-fills and casts, and work a tiling repeats
    (partial sums exchanged between cores, values recomputed in a second pass).
    The engine prices ``flops + extra_ops`` alike and ``reductions`` (cross-lane
    vector reductions) apart, from the target file for ``precision``; runs
    report ``flops`` only as FLOP.
    """

    fn: Callable[..., Sequence[np.ndarray]]
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    flops: int
    reductions: int
    precision: str
    extra_ops: int = 0

    @property
    def vector_ops(self) -> int:
        """Every vector element operation the tile issues: the math's and the extra ones (what time is priced on)."""
        return self.flops + self.extra_ops


@dataclass(frozen=True)
class Tile:
    """DMA in, compute, DMA out: the unit the engine double-buffers.

    ``slot`` names the scratchpad buffer set the tile uses; the engine does not
    start a tile's loads before the previous tile of the same slot has finished
    its stores, so a kernel that alternates two slots gets a double-buffered
    pipeline and one that uses a single slot gets a serial one.
    """

    tile_id: int
    loads: tuple[Transfer, ...]
    compute: Compute | None
    stores: tuple[Transfer, ...]
    slot: int = 0


@dataclass(frozen=True)
class Phase:
    """Work of every participating core until the next barrier."""

    name: str
    tiles: Mapping[int, tuple[Tile, ...]]
    barrier_after: bool = True


@dataclass(frozen=True)
class Plan:
    """A lowered kernel call: the cores it runs on and its phases."""

    cores: tuple[int, ...]
    phases: tuple[Phase, ...]
    precision: str

    @property
    def tile_count(self) -> int:
        """Tiles of every core in every phase."""
        return sum(len(tiles) for phase in self.phases for tiles in phase.tiles.values())


@dataclass(frozen=True)
class Buffer:
    """One buffer of a call, as the layout check sees it."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str  # "input" or "output"

    @property
    def size_bytes(self) -> int:
        """Bytes the buffer occupies."""
        return math.prod(int(d) for d in self.shape) * np.dtype(self.dtype).itemsize

    @property
    def end(self) -> int:
        """One past the buffer's last byte."""
        return self.addr + self.size_bytes


@dataclass(frozen=True)
class BoundCall:
    """A kernel call with its arguments checked: buffers, attributes, precision."""

    symbol: str
    precision: str
    variant: str  # "s" (shared memory) or "p" (private memory of one core)
    cores: tuple[int, ...]
    buffers: tuple[Buffer, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def buffer(self, name: str) -> Buffer:
        """The buffer called ``name``."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


@dataclass(frozen=True)
class ArgSpec:
    """One argument of a kernel symbol, for binding and for ``dspsim kernels``."""

    name: str
    kind: str  # "in_ptr", "out_ptr", "ints", "int", "float", "str", "bool", "params"
    doc: str
    default: Any = None
    required: bool = True


class MemoryReader(Protocol):
    """Reads values a kernel needs at bind time (the ``params`` array of BatchNormGrad)."""

    def __call__(self, addr: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...


@dataclass(frozen=True)
class PlanContext:
    """What a kernel may know of the chip when it plans: target, cores, staging areas.

    ``scratch_base``/``scratch_size_bytes`` is the per-core scratchpad region
    where tiles are staged (the same local addresses on every core);
    ``workspace_base``/``workspace_size_bytes`` is a shared region the cores may
    use to exchange partial results behind a barrier.  ``tiling``, when given,
    names the partition and tile sizes the kernel must use (its keys are the
    kernel's own, see ``Kernel.tilings``); None lets the kernel choose.
    """

    target: Target
    cores: tuple[int, ...]
    precision: str
    variant: str
    scratch_base: int
    scratch_size_bytes: int
    workspace_base: int
    workspace_size_bytes: int
    alignment_bytes: int
    tiling: Mapping[str, Any] | None = None

    @property
    def peak_flops_per_cycle(self) -> int:
        """Vector element operations per cycle of one core at this precision."""
        return self.target.core.precisions[self.precision].peak_flops_per_cycle


class Kernel(Protocol):
    """What every kernel module provides to the registry.

    A kernel may also say what its ``hp_`` symbols store and compute in which
    precision (see :func:`precision_note`): ``tensors_in_precision`` names the
    buffers stored in the symbol's precision, ``fp32_tensors`` those always in
    fp32, and ``fp16_arithmetic`` says how an ``hp_`` call computes and what
    its conversions cost.
    """

    name: str
    args: tuple[ArgSpec, ...]

    def bind(self, symbol: str, precision: str, variant: str, cores: tuple[int, ...],
             args: Mapping[str, Any], read: MemoryReader) -> BoundCall:
        """Check ``args`` and describe the call's buffers; raise KernelArgError on bad input."""
        ...

    def plan(self, call: BoundCall, ctx: PlanContext) -> Plan:
        """Lower the bound call into per-core tiles that fit the scratchpad (honouring ``ctx.tiling``)."""
        ...

    def tilings(self, call: BoundCall, ctx: PlanContext) -> list[dict[str, Any]]:
        """Candidate tilings (each a valid ``ctx.tiling``) the simulator compares with the cost model."""
        ...


def precision_note(kernel: Any, precision: str) -> str:
    """One plain line: which buffers of ``kernel`` a ``precision`` symbol stores in fp16 and which in fp32, and in
    which precision it computes (for ``dspsim kernels``, run summaries and docs)."""
    if precision == "fp32":
        return "fp32 storage and fp32 arithmetic throughout"
    pointers = [a.name for a in kernel.args if a.kind in ("in_ptr", "out_ptr")]
    narrow = list(getattr(kernel, "tensors_in_precision", pointers))
    wide = list(getattr(kernel, "fp32_tensors", [n for n in pointers if n not in narrow]))
    how = getattr(kernel, "fp16_arithmetic", None)
    parts = [f"stored in {precision}: {', '.join(narrow)}"]
    if wide:
        parts.append(f"stored in fp32: {', '.join(wide)}")
    if how:
        parts.append(how)
    return "; ".join(parts)


def tiling_options(ctx: PlanContext, allowed: Mapping[str, Callable[[Any], bool]]) -> dict[str, Any]:
    """The call's ``tiling`` checked against the kernel's ``allowed`` keys (key -> validity test)."""
    given = dict(ctx.tiling or {})
    for key, value in given.items():
        if key not in allowed:
            raise KernelArgError(f"argument 'tiling': unknown key '{key}' (this kernel takes: "
                                 f"{', '.join(sorted(allowed))})")
        if not allowed[key](value):
            raise KernelArgError(f"argument 'tiling.{key}': invalid value {shown(value)}")
    return given


# --- argument helpers shared by the kernels -------------------------------------------------

#: Integer arguments are C ``long long`` values: anything outside int64 is refused as absurd.
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Most integers a sequence argument (a shape, strides, paddings) may hold.
MAX_SEQUENCE_LENGTH = 32
#: Largest magnitude of a float argument: a C double's (a larger int cannot even be converted).
FLOAT_MAX = float(np.finfo(np.float64).max)


def require_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int (bools refused) within int64 and ``minimum``..``maximum``; else KernelArgError
    naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KernelArgError(f"argument '{name}': expected an integer, got {shown(value)}")
    value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise KernelArgError(f"argument '{name}': {shown(value)} is outside the int64 range the C library takes")
    if minimum is not None and value < minimum:
        raise KernelArgError(f"argument '{name}': expected an integer >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise KernelArgError(f"argument '{name}': expected an integer <= {maximum}, got {value}")
    return value


def require_ints(name: str, value: Any, length: int | None = None, *,
                 minimum: int | None = None) -> tuple[int, ...]:
    """A sequence of ints of ``length`` (if given; at most MAX_SEQUENCE_LENGTH), each at least ``minimum``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise KernelArgError(f"argument '{name}': expected a sequence of integers, got {shown(value)}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise KernelArgError(f"argument '{name}': expected a sequence of integers, got an array of shape "
                             f"{value.shape}")
    n = len(value)  # before materialising it: a huge sequence is refused by its length alone
    if length is not None and n != length:
        raise KernelArgError(f"argument '{name}': expected {length} integers, got {n}")
    if n > MAX_SEQUENCE_LENGTH:
        raise KernelArgError(f"argument '{name}': expected at most {MAX_SEQUENCE_LENGTH} integers, got {n}")
    return tuple(require_int(f"{name}[{i}]", v, minimum=minimum) for i, v in enumerate(value))


def require_float(name: str, value: Any) -> float:
    """A finite real number (an int too large for a double is refused, never an OverflowError)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise KernelArgError(f"argument '{name}': expected a number, got {shown(value)}")
    if isinstance(value, (int, np.integer)) and abs(int(value)) > FLOAT_MAX:
        raise KernelArgError(f"argument '{name}': {shown(int(value))} is beyond any float (at most about 1.8e308)")
    value = float(value)
    if not np.isfinite(value):
        raise KernelArgError(f"argument '{name}': expected a finite number, got {value}")
    return value


def require_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (exact string)."""
    if not isinstance(value, str) or value not in choices:
        raise KernelArgError(f"argument '{name}': expected one of {', '.join(choices)}, got {shown(value)}")
    return value


def require_bool(name: str, value: Any) -> bool:
    """A bool, or the ints 0/1 as C callers pass them."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise KernelArgError(f"argument '{name}': expected a boolean (true/false or 0/1), got {shown(value)}")


def require_address(name: str, value: Any) -> int:
    """A pointer argument: a non-negative int address."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KernelArgError(f"argument '{name}': expected an address (int), got {shown(value)}")
    value = int(value)
    if value < 0 or value >= 1 << 64:
        shown_value = f"address {value:#x}" if -(1 << 80) < value < 1 << 80 else shown(value)
        raise KernelArgError(f"argument '{name}': {shown_value} is outside the 64-bit address range")
    return value


#: Names a kernel argument may not have: ``Simulator.call()``'s own parameters (``self``, the positional
#: ``symbol``, and the keywords ``numerics``, ``progress``, ``tiling``), with where each belongs instead.
RESERVED_ARGUMENT_NAMES: dict[str, str] = {
    "symbol": "the symbol is the call's first, positional argument (a run-config's top-level 'symbol:')",
    "self": "no kernel takes it",
    "numerics": "it is call(numerics=...) (a run-config's top-level 'numerics:')",
    "progress": "it is call(progress=...)",
    "tiling": "it is call(tiling=...) (a run-config's top-level 'tiling:')",
}


def check_argument_names(args: Mapping[str, Any], where: str = "argument") -> None:
    """Refuse a kernel argument named like one of ``Simulator.call()``'s own parameters, naming the key
    (``where`` prefixes it: ``argument`` for the API, ``<file>: args`` for a run-config)."""
    for key in args:
        if key in RESERVED_ARGUMENT_NAMES:
            sep = "." if where.endswith("args") else " "
            raise KernelArgError(f"{where}{sep}'{key}': '{key}' is a parameter of Simulator.call() itself, not a "
                                 f"kernel argument: {RESERVED_ARGUMENT_NAMES[key]} (reserved names: "
                                 f"{', '.join(RESERVED_ARGUMENT_NAMES)})")


def check_args(symbol: str, specs: Sequence[ArgSpec], args: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse extra and missing arguments; fill defaults.  Returns the completed mapping."""
    known = {s.name for s in specs}
    extra = sorted(set(args) - known)
    if extra:
        raise KernelArgError(f"{symbol}: unexpected argument '{extra[0]}' "
                             f"(expected: {', '.join(s.name for s in specs)})")
    out: dict[str, Any] = {}
    for s in specs:
        if s.name in args:
            out[s.name] = args[s.name]
        elif s.required:
            raise KernelArgError(f"{symbol}: missing argument '{s.name}' ({s.doc})")
        else:
            out[s.name] = s.default
    return out


def align_up(value: int, alignment: int) -> int:
    """``value`` rounded up to a multiple of ``alignment``."""
    return -(-value // alignment) * alignment


def split_even(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous ``(start, stop)`` ranges, sizes differing by one at most.

    Empty ranges are dropped, so fewer than ``parts`` ranges come back when
    ``total < parts``.
    """
    base, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        if n:
            out.append((start, start + n))
        start += n
    return out
