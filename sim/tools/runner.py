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
from sim.tools.config import RunConfig
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
    judged before them (:mod:`sim.tools.preflight`).
    """
    m = _simulator(cfg)
    for spec in cfg.data:
        if "values" in spec.source:
            try:
                m.write(spec.addr, cfg.materialise(spec), core=spec.core)
            except SimError as e:
                raise type(e)(f"{cfg.path}: data '{spec.name}': {e}") from None
    return m, bind(cfg, m)


def place_data(cfg: RunConfig, m: Simulator, numerics: bool,
               progress: Callable[[str, int, int], None] | None = None) -> None:
    """Write the config's data into ``m``.

    A timing-only run (``numerics`` false) needs no tensors: only literal
    ``values`` entries are placed, because kernels read those (pointer tables
    such as a params array) to know what to do.
    """
    for i, spec in enumerate(cfg.data):
        if progress is not None:
            progress("placing data", i, len(cfg.data))
        if not numerics and "values" not in spec.source:
            continue
        view = None
        try:
            if "random" in spec.source:  # generated straight into simulated memory: no second copy of a tensor
                view = m.memory.writable_view(spec.addr, spec.shape, spec.dtype, core=spec.core)
        except SimError as e:
            raise type(e)(f"{cfg.path}: data '{spec.name}': {e}") from None
        if view is not None:
            cfg.materialise(spec, out=view)
            continue
        arr = cfg.materialise(spec)
        try:
            m.write(spec.addr, arr, core=spec.core)
        except SimError as e:
            raise type(e)(f"{cfg.path}: data '{spec.name}': {e}") from None
    if progress is not None:
        progress("placing data", len(cfg.data), len(cfg.data))


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
