"""Carrying out a run-config: place its data, call its kernel, save its outputs and trace."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from sim.config.run_config import ArraySpec, RunConfig
from sim.config.user_kernels import load_kernels
from sim.errors import ConfigError, SimError, renamed
from sim.files.atomic import atomic_write
from sim.model.call import BoundCall
from sim.model.layout import enforce_layout
from sim.model.target import Target
from sim.simulator import Run, Simulator, check_argument_names


def prepare(cfg: RunConfig, *, numerics: bool | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> Simulator:
    """A simulator of the config's target with the config's data placed in memory.

    ``numerics`` False places only literal ``values`` data (enough to bind and
    lay out the call); None follows the config.  ``progress(phase, done,
    total)`` hears ``placing data`` after each array.
    """
    m = _simulator(cfg)
    check_entries_map(cfg, m)
    place_data(cfg, m, cfg.numerics if numerics is None else numerics, progress=progress)
    return m


def check_entries_map(cfg: RunConfig, m: Simulator) -> None:
    """Every placement and read-back checked against the map before any array is generated, so that a typo
    fails fast instead of building a large array (or running) for nothing."""
    for kind, specs in (("data", cfg.data), ("output", cfg.outputs)):
        for spec in specs:
            try:
                m.memory.map.resolve(spec.addr, math.prod(spec.shape) * spec.dtype.itemsize, spec.core,
                                     what="write" if kind == "data" else "read")
            except SimError as e:
                raise renamed(e, f"{cfg.path}: {kind} '{spec.name}': {e}") from None


def _simulator(cfg: RunConfig, target: Target | None = None) -> Simulator:
    """A fresh simulator of the config's target (``target`` instead: a sweep point's edited chip) and tolerance,
    the config's arguments checked first and its ``kernels`` imported."""
    # Arguments are passed to call() as keywords: one named like call()'s own parameters must be refused here,
    # as a SimError naming the key, before Python's TypeError ("got multiple values for argument").
    check_argument_names(cfg.args, f"{cfg.path}: args")
    load_kernels(cfg)
    chip = cfg.target if target is None else target
    return Simulator(chip) if cfg.tiling_tolerance is None else Simulator(chip, tiling_tolerance=cfg.tiling_tolerance)


@dataclass(frozen=True)
class Bound:
    """A run-config's call bound (the run pipeline's first stage): the one simulator of the run, the call and
    the data entries placed so far (the set binding fills as it reads entries)."""

    simulator: Simulator
    call: BoundCall
    placed: set[str] = field(default_factory=set)


def bound_call(cfg: RunConfig, target: Target | None = None) -> Bound:
    """A simulator holding only the config's literal ``values`` data, and the config's call bound on it
    (``target``: the chip to simulate instead of the config's, as a sweep point gives it).

    That is what checking a config needs (pointers and shapes, not tensors);
    the other entries are not even resolved, so that the call's layout can be
    judged before them (:mod:`sim.run.preflight`), except an entry the binding
    itself reads (a params table from a ``.npy`` file): that one is placed when
    it is read (:func:`place_on_demand`).
    """
    m = _simulator(cfg, target)
    placed = place_literals(cfg, m)
    call = bind(cfg, m)
    m.before_bind_read = None
    return Bound(m, call, placed)


def place_literals(cfg: RunConfig, m: Simulator) -> set[str]:
    """Place the config's literal ``values`` entries in ``m`` and have the others placed when a binding reads them
    (:func:`place_on_demand`): what binding a call needs.  Returns the names of the entries placed (the set the
    on-demand placing adds to)."""
    placed: set[str] = set()
    for spec in cfg.data:
        if "values" in spec.source:
            _place(cfg, m, spec)
            placed.add(spec.name)
    place_on_demand(cfg, m, placed)
    return placed


def place_rest(cfg: RunConfig, b: Bound, placing: Callable[[str, int, int], None] | None = None) -> Bound:
    """Place the config's data entries not placed yet (all of them, or only the literal ones of a timing-only
    config) in the bound call's simulator.  The call stays as bound: every entry its binding read was placed
    when it read it (:func:`place_on_demand`).  Only when two entries share bytes (which the preflight warns
    of) does the order of placing them matter: then every entry is placed again in the config's order, as a
    run that placed everything first would have it, and the call bound again on that memory (and checked).
    ``placing`` hears the data placed.  Returns the bound call to run: ``b``, or the one bound again."""
    m = b.simulator
    check_entries_map(cfg, m)
    if _entries_overlap(cfg, m):
        place_data(cfg, m, cfg.numerics, progress=placing)
        again = replace(b, call=m.bind(cfg.symbol, **cfg.args))
        enforce_layout(again.call, m.target)
        return again
    place_data(cfg, m, cfg.numerics, progress=placing, already=b.placed)
    return b


def _entries_overlap(cfg: RunConfig, m: Simulator) -> bool:
    """Whether two of the config's data entries share bytes of one memory."""
    spans = []
    for spec in cfg.data:
        lo = spec.addr
        hi = lo + math.prod(spec.shape) * spec.dtype.itemsize
        region = m.memory.map.region_of(lo, hi - lo)
        key = None if region is None else (region.name, None if region.shared else spec.core)
        spans.append((key, lo, hi))
    return any(k1 == k2 and lo1 < hi2 and lo2 < hi1 for i, (k1, lo1, hi1) in enumerate(spans)
               for k2, lo2, hi2 in spans[i + 1:])


def run_bound(cfg: RunConfig, b: Bound, progress: Callable[[int, int], None] | None = None,
              placing: Callable[[str, int, int], None] | None = None) -> Run:
    """The run pipeline's last stages for a call bound and layout-checked by :func:`bound_call` (and the
    preflight): the rest of the config's data placed in the same simulator (:func:`place_rest`), then the call
    run with no second bind nor layout check.  ``progress`` hears the tiles, ``placing`` the data placed."""
    b = place_rest(cfg, b, placing)
    return b.simulator.run_bound(b.call, cfg.args, numerics=cfg.numerics, progress=progress, tiling=cfg.tiling,
                                 time_limit_seconds=cfg.time_limit_seconds)


def place_data(cfg: RunConfig, m: Simulator, numerics: bool,
               progress: Callable[[str, int, int], None] | None = None, already: set[str] | None = None) -> None:
    """Write the config's data into ``m``.

    A timing-only run (``numerics`` false) needs no tensors: only literal
    ``values`` entries are placed up front, and any other entry the call's
    binding reads (a pointer table such as a params array from a ``.npy``
    file) when it reads it (:func:`place_on_demand`).
    """
    placed = set() if already is None else already  # (``already``: entries in memory before, placed again never)
    for i, spec in enumerate(cfg.data):
        if progress is not None:
            progress("placing data", i, len(cfg.data))
        if spec.name in placed or (not numerics and "values" not in spec.source):
            continue
        placed.add(spec.name)
        view = None
        try:
            if "random" in spec.source:  # generated straight into simulated memory: no second copy of a tensor
                view = m.memory.writable_view(spec.addr, spec.shape, spec.dtype, core=spec.core)
        except SimError as e:
            raise renamed(e, f"{cfg.path}: data '{spec.name}': {e}") from None
        if view is not None:
            cfg.materialise(spec, out=view)
            continue
        _place(cfg, m, spec)
    place_on_demand(cfg, m, placed)
    if progress is not None:
        progress("placing data", len(cfg.data), len(cfg.data))


def _place(cfg: RunConfig, m: Simulator, spec: ArraySpec) -> None:
    """Build one ``data`` entry's array and write it into ``m`` (a SimError names the entry)."""
    arr = cfg.materialise(spec)
    try:
        m.write(spec.addr, arr, core=spec.core)
    except SimError as e:
        raise renamed(e, f"{cfg.path}: data '{spec.name}': {e}") from None


def _same_memory(m: Simulator, spec: ArraySpec, core: int | None) -> bool:
    """Whether ``spec`` lies in the memory a binding on ``core`` reads (shared memory, or that core's copy)."""
    region = m.memory.map.region_of(spec.addr, math.prod(spec.shape) * spec.dtype.itemsize)
    return region is not None and (region.shared or spec.core == core)


def place_on_demand(cfg: RunConfig, m: Simulator, placed: set[str]) -> None:
    """Have ``m`` place the config's data entries not in ``placed`` when a binding reads their bytes.

    A kernel reads a pointer table while binding (BatchNormGrad's params given as an address): the entry
    holding it must be in memory first, whatever its source, while the tensors a timing-only run or
    ``validate`` never reads stay unbuilt (``validate`` reads only the headers of their files).
    """
    def before_read(addr: int, size_bytes: int, core: int | None) -> None:
        for spec in cfg.data:
            lo = spec.addr
            hi = lo + math.prod(spec.shape) * spec.dtype.itemsize
            if spec.name in placed or not (lo < addr + size_bytes and addr < hi) or not _same_memory(m, spec, core):
                continue
            placed.add(spec.name)  # first: a failed placement is reported once, not on every read
            _place(cfg, m, spec)

    m.before_bind_read = before_read


def bind(cfg: RunConfig, m: Simulator) -> BoundCall:
    """The config's call with its arguments checked (no layout check, no run)."""
    return m.bind(cfg.symbol, **cfg.args)


def execute(cfg: RunConfig, progress: Callable[[int, int], None] | None = None,
            bound: Bound | None = None) -> tuple[Simulator, Run]:
    """Run a run-config through the one pipeline: bind its call (once; ``bound``: bound and checked already by
    the preflight), check its layout, place its data, run it (:func:`run_bound`)."""
    if bound is None:
        bound = bound_call(cfg)
        enforce_layout(bound.call, bound.simulator.target)
    return bound.simulator, run_bound(cfg, bound, progress)


def _npy_writer(arr: np.ndarray) -> Callable[[Path], None]:
    """A writer of ``arr`` as a .npy file at the path it is given."""
    def write(path: Path) -> None:
        with path.open("wb") as f:  # a file object: np.save given a name would append ".npy" to it
            np.save(f, arr, allow_pickle=False)
    return write


def output_file_name(config: Path, name: str) -> str:
    """The file an output entry ``name`` of the config (or program) at ``config`` is saved as."""
    return f"{config.stem}.{name}.npy"


def check_trace_names(config: Path, output_names: Sequence[str], traces: Sequence[str]) -> None:
    """A ConfigError when a trace file (``traces``: its JSON, its CSV) would take an output's file name: one of
    them would be written over the other."""
    outputs = {output_file_name(config, n): n for n in output_names}
    for trace in traces:
        if trace in outputs:
            raise ConfigError(f"{config}: the trace {trace!r} would be written over output '{outputs[trace]}' "
                              f"(saved as {trace}): give the trace another name")


def save_outputs(cfg: RunConfig, m: Simulator, out_dir: Path,
                 progress: Callable[[str, int, int], None] | None = None) -> list[Path]:
    """Read the config's outputs back and save each as ``<out_dir>/<config stem>.<name>.npy`` (atomically);
    ``progress(phase, done, total)`` hears ``writing outputs`` before each."""
    paths = []
    for i, spec in enumerate(cfg.outputs):
        if progress is not None:
            progress("writing outputs", i, len(cfg.outputs))
        try:
            # Streamed from simulated memory to the file: a layer-sized output is never copied in the host.
            arr = m.memory.read_only_view(spec.addr, spec.shape, spec.dtype, core=spec.core)
        except SimError as e:
            raise renamed(e, f"{cfg.path}: output '{spec.name}': {e}") from None
        paths.append(atomic_write(out_dir / output_file_name(cfg.path, spec.name), _npy_writer(arr)))
    return paths
