"""The kernel registry: symbol -> (kernel, precision, variant), for the shipped kernels and those users write.

Each shipped kernel module defines ``KERNEL``; :data:`KERNEL_MODULES` lists them.  A user's kernel joins
through :func:`register_kernel` (from Python, or a run-config's ``kernels:`` list), or through an installed
package declaring it in the ``dspsim.kernels`` entry-point group, loaded on the first lookup or listing (a
broken entry point is reported naming its distribution and never breaks the shipped kernels).

Symbols are ``<fp|hp>_<kernel>_<s|p>``: ``fp`` takes fp32 tensors, ``hp`` fp16 ones (only on chips listing
fp16; what each stores and computes in which precision is :attr:`Symbol.precision_note`); ``_s`` takes
buffers in shared memory and a ``core_mask``, ``_p`` in one core's private memory and a ``core``.  A kernel
offering fewer precisions or variants (its ``precisions`` and ``variants`` attributes) has fewer symbols.
Dispatch goes through :func:`lookup`, never through chains of names.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import inspect
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels.base import (
    PREFIX_PRECISION,
    RESERVED_ARGUMENT_NAMES,
    Kernel,
    precision_note,
)
from sim.errors import KernelArgError, KernelDefinitionError, brief, one_line
from sim.model.call import ARG_KINDS, ArgSpec
from sim.model.call_key import exact_text

#: Modules under ``kernels/`` that each define a ``KERNEL``.
KERNEL_MODULES: tuple[str, ...] = (
    "depthwise_conv2d_backprop_input",
    "batch_norm_grad",
    "fused_batch_norm_grad",
    "fake_quant_with_min_max_vars_gradient",
    "conv2d_backprop_filter",
    "gemm",
)

VARIANTS = ("s", "p")
#: The entry-point group installed packages declare their kernels in (each a Kernel object, or a module
#: defining ``KERNEL``).
ENTRY_POINT_GROUP = "dspsim.kernels"
#: Argument names a kernel may not declare: ``Simulator.call()``'s own parameters, and the core selection the
#: simulator takes off before a kernel binds (``core_mask`` of ``_s`` symbols, ``core`` of ``_p`` symbols).
RESERVED_KERNEL_ARGUMENTS: dict[str, str] = {
    **RESERVED_ARGUMENT_NAMES,
    "core_mask": "the simulator selects an _s symbol's cores from it before the kernel binds",
    "core": "the simulator selects a _p symbol's core from it before the kernel binds",
}
SHIPPED = "shipped with dspsim"
#: Longest kernel or argument name (characters): a name is part of every symbol, message and trace.
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Symbol:
    """One callable symbol of the kernel library; ``origin`` says where its kernel came from."""

    name: str
    kernel: Kernel
    precision: str
    variant: str
    origin: str = SHIPPED

    @property
    def precision_note(self) -> str:
        """What the symbol stores in fp16 and in fp32 and in which precision it computes, in one plain line."""
        return precision_note(self.kernel, self.precision)


@dataclass(frozen=True)
class KernelInfo:
    """A registered kernel, the symbols it has and where it came from (for ``dspsim kernels``)."""

    kernel: Kernel
    origin: str
    precisions: tuple[str, ...]
    variants: tuple[str, ...]

    @property
    def shipped(self) -> bool:
        """Whether the kernel ships with dspsim."""
        return self.origin == SHIPPED

    def symbol_names(self) -> list[str]:
        """The kernel's symbols, ``fp`` before ``hp``, ``_s`` before ``_p``."""
        return [f"{_prefix(p)}_{self.kernel.name}_{v}" for p in self.precisions for v in self.variants]


def _prefix(precision: str) -> str:
    return next(k for k, v in PREFIX_PRECISION.items() if v == precision)


def _kernel_words(kernel: Any, origin: str) -> str:
    name = getattr(kernel, "name", None)
    shown = repr(name) if isinstance(name, str) and len(name) <= 80 else brief(kernel)
    return f"kernel {shown} ({origin})"


def _names(value: Any, what: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        raise KernelDefinitionError(f"{where}: '{what}' must be a tuple of strings, got {brief(value)}")
    return tuple(value)


def check_kernel(kernel: Any, origin: str) -> KernelInfo:
    """The kernel's :class:`KernelInfo` once it meets the Kernel protocol; KernelDefinitionError naming the
    kernel, where it came from and what is wrong otherwise.

    The protocol: ``name`` an ASCII identifier of at most :data:`MAX_NAME_CHARS` characters; ``args`` a tuple
    of ArgSpec (identifier names of at most as many characters, each once, none
    reserved, kinds from ``ARG_KINDS``); ``bind`` and ``plan`` callable; ``tilings`` callable when present;
    ``precisions`` (default fp32 and fp16) and ``variants`` (default s and p) non-empty tuples of known
    names; ``tensors_in_precision``/``fp32_tensors`` are tuples of tensor names, ``fp16_arithmetic`` is text.
    """
    where = _kernel_words(kernel, origin)
    if isinstance(kernel, (type, types.ModuleType)):
        raise KernelDefinitionError(f"{where}: expected a kernel object (an instance), got the "
                                    f"{'class' if isinstance(kernel, type) else 'module'} {brief(kernel)}"
                                    + (": register its KERNEL" if isinstance(kernel, types.ModuleType) else
                                       ": register an instance of it"))
    name = getattr(kernel, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii() or len(name) > MAX_NAME_CHARS:
        got = f"a name of {len(name)} characters" if isinstance(name, str) and len(name) > MAX_NAME_CHARS \
            else brief(name)
        raise KernelDefinitionError(f"{where}: 'name' must be an ASCII identifier of at most {MAX_NAME_CHARS} "
                                    f"characters (symbols are <fp|hp>_<name>_<s|p>), got {got}")
    args = getattr(kernel, "args", None)
    if not isinstance(args, (tuple, list)) or not all(isinstance(a, ArgSpec) for a in args):
        raise KernelDefinitionError(f"{where}: 'args' must be a tuple of sim.model.call.ArgSpec, got "
                                    f"{brief(args)}")
    seen: set[str] = set()
    for i, a in enumerate(args):
        if not isinstance(a.name, str) or not a.name.isidentifier() or len(a.name) > MAX_NAME_CHARS:
            raise KernelDefinitionError(f"{where}: args[{i}]: the name must be an identifier of at most "
                                        f"{MAX_NAME_CHARS} characters, got {brief(a.name)}")
        if a.name in seen:
            raise KernelDefinitionError(f"{where}: args[{i}]: argument '{a.name}' is declared twice")
        seen.add(a.name)
        if a.name in RESERVED_KERNEL_ARGUMENTS:
            raise KernelDefinitionError(f"{where}: args[{i}]: argument name '{a.name}' is reserved: "
                                        f"{RESERVED_KERNEL_ARGUMENTS[a.name]}")
        if a.kind not in ARG_KINDS:
            raise KernelDefinitionError(f"{where}: args[{i}] '{a.name}': kind {brief(a.kind)} is not one of "
                                        f"{', '.join(ARG_KINDS)}")
        if not isinstance(a.doc, str):
            raise KernelDefinitionError(f"{where}: args[{i}] '{a.name}': doc must be text, got {brief(a.doc)}")
    for method in ("bind", "plan"):
        if not callable(getattr(kernel, method, None)):
            raise KernelDefinitionError(f"{where}: it has no '{method}' method (the Kernel protocol of "
                                        f"kernels.base: bind(...) -> BoundCall, plan(call, ctx) -> Plan)")
    if getattr(kernel, "tilings", None) is not None and not callable(kernel.tilings):
        raise KernelDefinitionError(f"{where}: 'tilings' must be a method tilings(call, ctx) -> list of dicts, got "
                                    f"{brief(kernel.tilings)}")
    precisions = _names(getattr(kernel, "precisions", ("fp32", "fp16")), "precisions", where)
    known = tuple(PREFIX_PRECISION.values())
    bad = [p for p in precisions if p not in known]
    if not precisions or bad or len(set(precisions)) != len(precisions):
        raise KernelDefinitionError(f"{where}: 'precisions' must list some of {', '.join(known)}, each once, got "
                                    f"{brief(precisions)}")
    variants = _names(getattr(kernel, "variants", VARIANTS), "variants", where)
    if not variants or any(v not in VARIANTS for v in variants) or len(set(variants)) != len(variants):
        raise KernelDefinitionError(f"{where}: 'variants' must list some of {', '.join(VARIANTS)} (shared-memory "
                                    f"_s, private-memory _p), each once, got {brief(variants)}")
    for attr in ("tensors_in_precision", "fp32_tensors"):
        if hasattr(kernel, attr):
            _names(getattr(kernel, attr), attr, where)
    if getattr(kernel, "fp16_arithmetic", None) is not None and not isinstance(kernel.fp16_arithmetic, str):
        raise KernelDefinitionError(f"{where}: 'fp16_arithmetic' must be text, got {brief(kernel.fp16_arithmetic)}")
    return KernelInfo(kernel, origin, tuple(p for p in known if p in precisions),
                      tuple(v for v in VARIANTS if v in variants))


class _Registry:
    """The kernels by name: shipped ones, then those registered since (which may replace a shipped one)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.shipped: dict[str, KernelInfo] = {}
        self.user: dict[str, KernelInfo] = {}
        self.symbols: dict[str, Symbol] = {}  # the live symbol table (REGISTRY)
        self.generation = 0
        self.shipped_loaded = False  # every shipped module imported (one may be, alone: :func:`_load_shipped`)
        self.entry_points_loaded = False
        self.entry_point_errors: list[str] = []

    def active(self, name: str) -> KernelInfo | None:
        return self.user.get(name) or self.shipped.get(name)

    def rebuild(self, changed: bool = True) -> None:
        """The symbol table from the active kernels (shipped ones first, then users', sorted by name); ``changed``
        False when it only gains a shipped kernel's symbols (no symbol the table had changes: the generation
        stays, so a simulator keeps its plans)."""
        table: dict[str, Symbol] = {}
        for name in sorted(set(self.shipped) | set(self.user)):
            info = self.active(name)
            assert info is not None
            for precision in info.precisions:
                for variant in info.variants:
                    sym = f"{_prefix(precision)}_{name}_{variant}"
                    table[sym] = Symbol(sym, info.kernel, precision, variant, info.origin)
        # Updated in place, never emptied: lookups take no lock, and one in another thread between a clear and
        # the refill would miss every symbol (a shipped kernel's call failing while a user kernel registers).
        self.symbols.update(table)
        for stale in [sym for sym in self.symbols if sym not in table]:
            del self.symbols[stale]
        if changed:
            self.generation += 1


_STATE = _Registry()
#: The live symbol table (name -> Symbol).  The shipped kernels and the entry points' join it on the first lookup
#: or listing: use :func:`lookup` and :func:`symbols`, which load them, rather than reading this directly.
REGISTRY: dict[str, Symbol] = _STATE.symbols


def _build_shipped() -> None:
    _STATE.shipped_loaded = True
    for mod_name in KERNEL_MODULES:
        _load_shipped(mod_name, rebuild=False)
    _STATE.rebuild(changed=False)  # (only symbols joined: none that a simulator planned with changed)


def _load_shipped(mod_name: str, rebuild: bool = True) -> None:
    """Import one shipped kernel module and add its kernel (each module's kernel is named as the module); with
    ``rebuild``, its symbols join the table at once (no other symbol changes: the registry's generation stays)."""
    if mod_name in _STATE.shipped:
        return
    info = check_kernel(importlib.import_module(f"kernels.{mod_name}").KERNEL, SHIPPED)
    _STATE.shipped[info.kernel.name] = info
    if rebuild:
        _STATE.rebuild(changed=False)


def _shipped_module_of(symbol: str) -> str | None:
    """The shipped kernel module that would provide ``symbol`` (``fp_gemm_s``: ``gemm``), if any."""
    parts = symbol.split("_")
    if len(parts) < 3 or parts[0] not in PREFIX_PRECISION or parts[-1] not in VARIANTS:
        return None
    name = "_".join(parts[1:-1])
    return name if name in KERNEL_MODULES else None


def _caller_origin(kernel: Any) -> str:
    """Where a kernel registered from Python comes from: its class's module (and file)."""
    module = sys.modules.get(type(kernel).__module__)
    path = getattr(module, "__file__", None)
    return f"registered from module {type(kernel).__module__}" + (f" ({path})" if path else "")


def _same_code(a: Any, b: Any) -> bool:
    """Whether kernels ``a`` and ``b`` are one kernel imported twice: classes of the same qualified name from two
    imports of files of the same bytes (once from an installed package, once from the file a config names), defined
    at a module's top level, and instances of attributes equal bit for bit (``sim.model.call_key.exact_text``).
    (Two objects of one class are two kernels, as the registry always took them.)"""
    ta, tb = type(a), type(b)
    if ta is tb or ta.__qualname__ != tb.__qualname__ or "<locals>" in ta.__qualname__:
        return False  # (a class made inside a function may differ by what it closes over)
    try:
        fa, fb = _class_file(ta), _class_file(tb)
        if fa is None or fb is None or Path(fa).read_bytes() != Path(fb).read_bytes():
            return False
        return exact_text(vars(a)) == exact_text(vars(b))
    except Exception:  # noqa: BLE001 (no file; attributes that cannot be written down exactly: two kernels)
        return False


def _class_file(cls: type) -> str | None:
    """The file a class was defined in: its methods' code says so even when its module is not in ``sys.modules``
    (a file a config names is imported under a name of its own)."""
    for value in vars(cls).values():
        code = getattr(value, "__code__", None)
        if code is not None:
            return str(code.co_filename)
    return inspect.getsourcefile(cls)


def register_kernel(kernel: Kernel, *, replace: bool = False, origin: str | None = None) -> Kernel:
    """Register a kernel written against the public plan IR; returns it.

    ``kernel`` must meet the Kernel protocol (:class:`kernels.base.Kernel`; see :func:`check_kernel`): its
    symbols ``{fp,hp}_<name>_{s,p}`` (for the precisions and variants it offers) then work wherever a shipped
    kernel's do.  A name already taken by another kernel is refused naming both, unless ``replace`` (then
    the new kernel shadows the old one until :func:`unregister_kernel`).  Registering the same object again
    changes nothing, and so does registering the same kernel imported twice (a class of the same name from a file
    of the same bytes, with equal attributes: a config naming the file that an installed package also provides);
    the kernel already registered is returned.
    ``origin`` says where it came from in ``dspsim kernels`` (default: its module and file).
    """
    with _STATE.lock:
        _load_entry_points()
        info = check_kernel(kernel, origin or _caller_origin(kernel))
        name = info.kernel.name
        old = _STATE.active(name)
        if old is not None and old.kernel is kernel:
            if origin is not None and origin != old.origin and name in _STATE.user:
                _STATE.user[name] = info
                _STATE.rebuild()
            return kernel
        if old is not None and not replace and _same_code(kernel, old.kernel):
            return old.kernel  # the same code imported twice (a config naming the file an installed package holds)
        if old is not None and not replace:
            raise KernelDefinitionError(
                f"{_kernel_words(kernel, info.origin)}: the name is taken by {_kernel_words(old.kernel, old.origin)}"
                f"; choose another name, or pass replace=True to shadow it")
        _STATE.user[name] = info
        _STATE.rebuild()
        return kernel


def unregister_kernel(kernel: Kernel | str) -> None:
    """Forget a kernel registered with :func:`register_kernel` (by object or name); a shipped kernel it replaced
    comes back.  KernelDefinitionError when no such kernel was registered (shipped kernels stay)."""
    _load_entry_points()
    with _STATE.lock:
        name = kernel if isinstance(kernel, str) else getattr(kernel, "name", None)
        info = _STATE.user.get(name) if isinstance(name, str) else None
        if not isinstance(name, str) or info is None or (not isinstance(kernel, str) and info.kernel is not kernel):
            shipped = " (shipped kernels cannot be unregistered)" if name in _STATE.shipped else ""
            raise KernelDefinitionError(f"unregister_kernel: no kernel {brief(name)} was registered{shipped}")
        del _STATE.user[name]
        _STATE.rebuild()


@contextlib.contextmanager
def registered_kernel(kernel: Kernel, *, replace: bool = False, origin: str | None = None) -> Iterator[Kernel]:
    """``with registered_kernel(k):`` registers ``k`` for the block and restores the registry after it (the
    kernel it replaced, if any, comes back): the way tests register kernels."""
    with _STATE.lock:
        name = getattr(kernel, "name", None)
        before = _STATE.user.get(name) if isinstance(name, str) else None
        already = before is not None and before.kernel is kernel
        register_kernel(kernel, replace=replace, origin=origin)
    try:
        yield kernel
    finally:
        with _STATE.lock:
            if not already and isinstance(name, str):
                if before is not None:
                    _STATE.user[name] = before
                else:
                    _STATE.user.pop(name, None)
                _STATE.rebuild()


@contextlib.contextmanager
def registry_restored() -> Iterator[None]:
    """Undo, after the block, every registration made inside it, and what a test did to the entry-point state (it
    may mark them unloaded to install fake ones): the test suite wraps each test in it."""
    with _STATE.lock:
        _load_entry_points()  # before saving: the installed ones are loaded once, not again after every block
        saved = (dict(_STATE.user), _STATE.entry_points_loaded, list(_STATE.entry_point_errors))
    try:
        yield
    finally:
        with _STATE.lock:
            changed = _STATE.user != saved[0]
            _STATE.user.clear()
            _STATE.user.update(saved[0])
            _STATE.entry_points_loaded, _STATE.entry_point_errors[:] = saved[1], saved[2]
            if changed:
                _STATE.rebuild()


def _entry_point_words(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    dist_words = f"distribution '{dist.metadata['Name']} {dist.version}'" if dist is not None else "a distribution"
    return f"entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}) of {dist_words}"


def _load_entry_points(every_shipped: bool = True) -> None:
    """Register the shipped kernels, then those installed packages declare (once per process, on first use); a
    broken package's kernel is recorded, not raised, so that the shipped kernels and the other packages' keep
    working.  ``every_shipped`` False (a lookup): the shipped modules are imported only if a package declares
    kernels (each is checked against every shipped name); the lookup imports the one module it needs."""
    with _STATE.lock:
        if every_shipped and not _STATE.shipped_loaded:  # on first use, not on import: ``import sim`` stays quick
            _build_shipped()
        if _STATE.entry_points_loaded:
            return
        _STATE.entry_points_loaded = True  # first: a package registering itself on import comes back here
        try:
            eps = sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.value, e.name))
        except Exception as e:  # noqa: BLE001 (broken metadata of some package must not break the shipped kernels)
            _STATE.entry_point_errors.append(f"the {ENTRY_POINT_GROUP} entry points cannot be listed: "
                                             f"{type(e).__name__}: {brief(str(e), 200)}")
            return
        if eps and not _STATE.shipped_loaded:
            _build_shipped()
        for ep in eps:
            where = _entry_point_words(ep)
            try:
                obj = ep.load()
                if isinstance(obj, types.ModuleType):
                    if not hasattr(obj, "KERNEL"):
                        raise KernelDefinitionError(f"module {obj.__name__} defines no KERNEL")
                    obj = obj.KERNEL
                register_kernel(obj, origin=where)
            except Exception as e:  # noqa: BLE001 (any failure of a package's code is that package's, reported)
                # (a refusal of the registry names the kernel by where it came from: said once is enough)
                text = str(e).replace(f" ({where})", "") if isinstance(e, KernelDefinitionError) \
                    else f"{type(e).__name__}: {e}"
                _STATE.entry_point_errors.append(f"{where} failed to load: {one_line(text)}")


def entry_point_errors() -> list[str]:
    """One line per ``dspsim.kernels`` entry point that failed to load (after loading them)."""
    _load_entry_points()
    return list(_STATE.entry_point_errors)


def generation() -> int:
    """A number that changes whenever the registry does (a simulator forgets its plans when it changed)."""
    return _STATE.generation


def _not_found_hint(symbol: str) -> str:
    parts = symbol.split("_")
    if len(parts) >= 3 and parts[0] in PREFIX_PRECISION and parts[-1] in VARIANTS:
        info = _STATE.active("_".join(parts[1:-1]))
        if info is not None:
            return (f"; kernel {info.kernel.name} ({info.origin}) offers precisions {', '.join(info.precisions)} "
                    f"and variants {', '.join(info.variants)}: {', '.join(info.symbol_names())}")
    close = difflib.get_close_matches(symbol, _STATE.symbols, n=3) if len(symbol) < 100 else []
    # difflib is quadratic in the name's length: a name far longer than any symbol gets no suggestions.
    return f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(_STATE.symbols))}"


def lookup(symbol: object) -> Symbol:
    """The registered symbol ``symbol``; KernelArgError (with close names) when there is none."""
    if not isinstance(symbol, str):
        raise KernelArgError(f"symbol: expected a kernel symbol name (str), got {brief(symbol)}")
    if not _STATE.entry_points_loaded:
        _load_entry_points(every_shipped=False)
    found = _STATE.symbols.get(symbol)
    if found is not None:
        return found
    if not _STATE.shipped_loaded:  # the first call of a process imports the one kernel it calls, not all six
        module = _shipped_module_of(symbol)
        with _STATE.lock:
            if module is not None:
                _load_shipped(module)
            found = _STATE.symbols.get(symbol)
            if found is None:
                _build_shipped()  # a symbol no shipped module is named for: the hint looks at every kernel
                found = _STATE.symbols.get(symbol)
        if found is not None:
            return found
    hint = _not_found_hint(symbol)
    broken = _STATE.entry_point_errors
    if broken:
        hint += f" ({len(broken)} kernel entry point(s) failed to load: {broken[0]})"
    raise KernelArgError(f"symbol: unknown kernel symbol {brief(symbol)}{hint}") from None


def symbols() -> list[Symbol]:
    """Every registered symbol, sorted by name."""
    _load_entry_points()
    return [_STATE.symbols[k] for k in sorted(_STATE.symbols)]


def kernels() -> list[KernelInfo]:
    """Every active kernel (shipped ones first, then users' by name), with where it came from."""
    _load_entry_points()
    with _STATE.lock:
        infos = [_STATE.active(n) for n in sorted(set(_STATE.shipped) | set(_STATE.user))]
    return sorted((i for i in infos if i is not None), key=lambda i: (not i.shipped, i.kernel.name))


def origin_of(kernel: Kernel) -> str:
    """Where ``kernel`` came from (``shipped with dspsim``, a file, a module, an entry point)."""
    _load_entry_points()
    for info in (*_STATE.user.values(), *_STATE.shipped.values()):
        if info.kernel is kernel:
            return info.origin
    return _caller_origin(kernel)
