"""The sweep file's schema: each top-level key declared once, with its type, default and doc.

:func:`sim.sweep.load_sweep` reads a sweep file with it (:func:`sim.files.schema.decode`), then checks
what depends on the base configs and the chips: each grid axis's kind and values, the arguments the symbols
take, the ``plot.x`` axis (docs/sweeps.md describes the axes).
"""

from __future__ import annotations

from typing import Annotated, Any

from sim.files.schema import Spec, param


class Plot(Spec):
    """``plot:``: how the sweep's plot is drawn."""

    x: Annotated[str, param("the axis the plot puts on x (an axis of the grid, or cores); default: the first "
                            "axis that is not the chip", means="an axis name")] | None = None


class SweepFile(Spec):
    """A whole sweep file."""

    configs: Annotated[list[str], param("the base run-configs, paths relative to the sweep file", min_length=1,
                                        items="run-config paths")]
    grid: Annotated[dict[Any, Any], param("axis -> list of values: every combination of the values is one point "
                                          "(axes: target, symbol, cores, args.<name>[.<index>], target.<key "
                                          "path>, tiling.<key>, tiling_tolerance)")] | None = None
    numerics: Annotated[bool, param("true also computes and checks the numerics; false (default): timing "
                                    "only")] = False
    plot: Plot | None = None
    description: Annotated[str, param("free text about the sweep", kind="text")] | None = None
