"""Carrying out a run-config: place its data, call its kernel, save its outputs and trace."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.errors import SimError
from sim.files.atomic import atomic_write
from sim.model.call import BoundCall
from sim.simulator import Run, Simulator, check_argument_names
from sim.tools.config import ArraySpec, RunConfig
from sim.tools.user_kernels import load_kernels


def prepare(cfg: RunConfig, *, numerics: bool | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> Simulator:
    """A simulator of the config's target with the config's data placed in memory.

    ``numerics`` False places only literal ``values`` data (enough to bind and
    lay out the call); None follows the config.  ``progress(phase, done,
    total)`` hears ``placing data`` after each array.
    """
    m = _simulator(cfg)
    # Every placement and read-back is checked against the map before any array is generated,
    # so a typo fails fast instead of building a large array (or running) for nothing.
    for kind, specs in (("data", cfg.data), ("output", cfg.outputs)):
        for spec in specs:
            try:
                m.memory.map.resolve(spec.addr, math.prod(spec.shape) * spec.dtype.itemsize, spec.core,
                                     what="write" if kind == "data" else "read")
            except SimError as e:
                raise type(e)(f"{cfg.path}: {kind} '{spec.name}': {e}") from None
    place_data(cfg, m, cfg.numerics if numerics is None else numerics, progress=progress)
    return m


def _simulator(cfg: RunConfig) -> Simulator:
    """A fresh simulator of the config's target and tolerance, the config's arguments checked first and its
    ``kernels`` imported."""
    # Arguments are passed to call() as keywords: one named like call()'s own parameters must be refused here,
    # as a SimError naming the key, before Python's TypeError ("got multiple values for argument").
    check_argument_names(cfg.args, f"{cfg.path}: args")
    load_kernels(cfg)
    return Simulator(cfg.target) if cfg.tiling_tolerance is None else \
        Simulator(cfg.target, tiling_tolerance=cfg.tiling_tolerance)


def bind_only(cfg: RunConfig) -> tuple[Simulator, BoundCall]:
    """A simulator holding only the config's literal ``values`` data, and the config's call bound on it.

    That is what checking a config needs (pointers and shapes, not tensors);
    the other entries are not even resolved, so that the call's layout can be
    judged before them (:mod:`sim.tools.preflight`), except an entry the binding
    itself reads (a params table from a ``.npy`` file): that one is placed when
    it is read (:func:`place_on_demand`).
    """
    m = _simulator(cfg)
    placed = set()
    for spec in cfg.data:
        if "values" in spec.source:
            _place(cfg, m, spec)
            placed.add(spec.name)
    place_on_demand(cfg, m, placed)
    return m, bind(cfg, m)


def place_data(cfg: RunConfig, m: Simulator, numerics: bool,
               progress: Callable[[str, int, int], None] | None = None) -> None:
    """Write the config's data into ``m``.

    A timing-only run (``numerics`` false) needs no tensors: only literal
    ``values`` entries are placed up front, and any other entry the call's
    binding reads (a pointer table such as a params array from a ``.npy``
    file) when it reads it (:func:`place_on_demand`).
    """
    placed = set()
    for i, spec in enumerate(cfg.data):
        if progress is not None:
            progress("placing data", i, len(cfg.data))
        if not numerics and "values" not in spec.source:
            continue
        placed.add(spec.name)
        view = None
        try:
            if "random" in spec.source:  # generated straight into simulated memory: no second copy of a tensor
                view = m.memory.writable_view(spec.addr, spec.shape, spec.dtype, core=spec.core)
        except SimError as e:
            raise type(e)(f"{cfg.path}: data '{spec.name}': {e}") from None
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
        raise type(e)(f"{cfg.path}: data '{spec.name}': {e}") from None


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


def execute(cfg: RunConfig, progress: Callable[[int, int], None] | None = None) -> tuple[Simulator, Run]:
    """Place the data and run the call."""
    m = prepare(cfg)
    run = m.call(cfg.symbol, numerics=cfg.numerics, progress=progress, tiling=cfg.tiling,
                 time_limit_seconds=cfg.time_limit_seconds, **cfg.args)
    return m, run


def _npy_writer(arr: np.ndarray) -> Callable[[Path], None]:
    """A writer of ``arr`` as a .npy file at the path it is given."""
    def write(path: Path) -> None:
        with path.open("wb") as f:  # a file object: np.save given a name would append ".npy" to it
            np.save(f, arr, allow_pickle=False)
    return write


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
            raise type(e)(f"{cfg.path}: output '{spec.name}': {e}") from None
        paths.append(atomic_write(out_dir / f"{cfg.path.stem}.{spec.name}.npy", _npy_writer(arr)))
    return paths
