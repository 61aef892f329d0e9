"""A tile's compute function called, and what it returned checked before it is written to memory: one array per
output operand, of that operand's shape and of a dtype its own converts to without changing kind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.errors import ComputeOutputError, KernelCodeError, SimError, brief, one_line
from sim.model.plan import Compute, Operand, Tile


def _output_error(tile: Tile, core: int, detail: str) -> ComputeOutputError:
    """The refusal of a compute's result on ``core``, carrying the tile (the facade names its phase)."""
    err = ComputeOutputError(detail, core=core, tile=int(tile.tile_id))
    err.tile_object = tile
    return err


def checked_results(results: Any, outputs: Sequence[Operand], core: int, tile: Tile) -> list[np.ndarray]:
    """What a compute returned, once it is one array per output operand, each of that operand's shape and of a
    dtype that converts to the operand's without changing kind (float64 -> float32 is fine, float -> int or
    complex -> float is not); ComputeOutputError saying what is wrong otherwise.  A masked array is refused as
    ``Simulator.write`` refuses one: storing it would silently drop its mask."""
    if isinstance(results, (str, bytes, np.ndarray)) or not isinstance(results, Sequence):
        raise _output_error(tile, core, f"the compute returned {brief(results)}, not a sequence of one array per "
                                        f"output operand ({len(outputs)})")
    if len(results) != len(outputs):
        raise _output_error(tile, core, f"the compute returned {len(results)} arrays for {len(outputs)} output "
                                        f"operands")
    out = list(results)
    for i, (op, value) in enumerate(zip(outputs, out)):
        if isinstance(value, np.ma.MaskedArray):
            raise _output_error(tile, core, f"output {i} is a masked array: its mask cannot be stored in memory "
                                            f"(only its data would be); return np.ma.getdata(a), or a.filled(value)")
        if not isinstance(value, np.ndarray):
            try:
                value = out[i] = np.asarray(value)
            except (TypeError, ValueError, OverflowError) as e:
                raise _output_error(tile, core, f"output {i} ({brief(value)}) is not an array: "
                                                f"{one_line(str(e), 120)}") from None
        want = np.dtype(op.dtype)
        if value.dtype.kind not in "biuf" or value.dtype.fields is not None or value.dtype.subdtype is not None \
                or not np.can_cast(value.dtype, want, "same_kind"):
            raise _output_error(tile, core, f"output {i} has dtype {one_line(str(value.dtype), 40)}, which its "
                                            f"operand's {want} cannot take without changing kind (return numbers "
                                            f"of the operand's kind: bool, int, uint or float)")
        if value.shape != tuple(op.shape):
            raise _output_error(tile, core, f"output {i} of shape {brief(value.shape, 60)} does not fill operand "
                                            f"{tuple(op.shape)} exactly (a result has its operand's shape)")
    return out


def tile_results(c: Compute, arrays: Sequence[np.ndarray], core: int, tile: Tile) -> list[np.ndarray]:
    """Call compute ``c``'s function on its input ``arrays`` and return its results, checked
    (:func:`checked_results`), ready to be written in order.  The kernel's own exception, from the function or
    from what it returned (a sequence or an array whose methods raise), is a :class:`KernelCodeError` of no kernel
    yet, its ``core``, ``tile`` and ``tile_object`` set: the facade names the kernel and the phase."""
    try:
        returned = c.fn(*arrays)
        outputs = c.outputs
        # (plain arrays of their operands' dtypes and shapes, what most functions return, pass the check as they
        # are)
        if type(returned) in (list, tuple) and len(returned) == len(outputs) and all(
                type(r) is np.ndarray and r.dtype == op.dtype and r.shape == op.shape
                for r, op in zip(returned, outputs)):
            results = list(returned)
        else:
            results = checked_results(returned, outputs, core, tile)
    except SimError:
        raise
    except Exception as e:
        err = KernelCodeError(None, "compute", e, f", core {core}, tile {tile.tile_id}")
        err.core, err.tile = core, int(tile.tile_id)
        err.tile_object = tile
        raise err from e
    if len(results) > 1:
        # A result that is (a view of) a read-only input must not change under an earlier output's write.
        results = [r.copy() if isinstance(r, np.ndarray) and not r.flags.writeable else r for r in results]
    return results
