"""Fitting a target's free parameters to measured cycle counts (``dspsim calibrate``).

Measurements are a CSV with columns ``symbol``, ``args`` (a JSON object of the
call's arguments, a ``tiling`` included when the board's kernel used a fixed
one; addresses may be ints or "0x..." strings), ``cycles``, and optionally
``core_mask`` or ``core`` (not contradicting ``args``); any other column is
refused.  Pointer arguments must be given as lists or ints (a ``params`` array
read from memory cannot be measured without its data).  Each measurement is
re-simulated in timing-only mode under trial parameters; scipy's least squares minimises the
relative error of the cycles over the parameters in log space (so they stay
positive).  The report lists each measurement's error before and after.

The free parameters come from the chip at hand (:func:`free_parameters`), each named by its key path in the
target file: the bandwidth of every shared region (``regions.<name>.bandwidth_bytes_per_cycle``, outermost
first), ``dma.setup_cycles``, ``sync.launch_overhead_cycles``, and the compute parameters
``core.tile_overhead_cycles`` (per tile's compute call), ``core.loop_overhead_cycles`` (per entry of an inner
loop) and ``core.units.fmac.latency_cycles`` (the FMAC latency: a loop's fill, an accumulation's recurrence).
The unit counts, lanes and issue widths are the chip's design (whole numbers no fit moves smoothly): they stay
as the target says.  A chip with other shared regions (an extra ``l3``, no ``gsm``) calibrates its own.  A DRAM's
rows (``regions.<name>.rows.window_cycles``, ``.bank_busy_cycles``, and its bus's ``.write_to_read_cycles``:
:data:`ROW_PARAMETERS`) are fitted when ``--params`` names them, not by default (only measurements of transfers
that open rows often, or write beside reads, respond).

Not every set of measurements says something about every parameter.  Before
the fit each parameter is moved by a factor of :data:`PROBE_FACTOR` both ways;
one that changes no measurement by :data:`MIN_EFFECT` or more cannot be
identified from them.  A parameter the fit drives against its bounds (a factor
:data:`MAX_DRIFT` from the target's value, where a lone parameter goes when
the measurements only ever ask for less of it) is not identified either.
Both are reported and kept at the target's values; the rest are fitted again
without them.

The fitted target is written as a copy of the starting target file that keeps
its comments, hex numbers and key order (ruamel.yaml round-trip editing):
only the fitted values change, the ``name`` says the chip is calibrated, and
the ``source`` notes say which values were fitted from which measurements.
"""


from sim.calibrate.fit import Calibration, calibrate
from sim.calibrate.measurements import Measurement, load_measurements
from sim.calibrate.parameters import (
    CHIP_PARAMETERS,
    ROW_PARAMETERS,
    check_parameter_names,
    free_parameters,
    parameter_values,
    pinned,
    row_parameters,
    simulate,
    stored_value,
    with_parameters,
)
from sim.calibrate.target_copy import TargetDocument, fitted_yaml, load_target_document, read_target_document

__all__ = ["CHIP_PARAMETERS", "ROW_PARAMETERS", "Calibration", "Measurement", "TargetDocument", "calibrate",
           "check_parameter_names", "fitted_yaml", "free_parameters", "load_measurements", "load_target_document",
           "parameter_values", "pinned", "read_target_document", "row_parameters", "simulate", "stored_value",
           "with_parameters"]
