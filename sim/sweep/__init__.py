"""Design-space sweeps: a grid over run-configs, chips, arguments and target-file parameters, run in parallel.

A sweep file::

    configs: [../configs/ft78ne_batch_norm_grad_s.yaml]   # base run-configs (paths relative to this file)
    numerics: false                 # timing only (default); true also computes and checks the numerics
    grid:                           # every combination of these values is one point
      target: [FT78NE, MT7004]      # the chip (a name, or a target YAML path relative to this file)
      cores: [1, 2, 4, 8]           # the first n cores (core_mask 2**n - 1); skipped on a chip with fewer
      args.params.5: [256, 1024]    # element 5 of the params argument
      args.epsilon: [0.001]         # any argument the symbol takes, given by the config or left to its default
      target.regions.ddr.bandwidth_bytes_per_cycle: [12, 24]   # an edit of the target file
      tiling.tile_elements: [256, 1024] # a key of the kernel's tiling (merged into the config's tiling:)
      tiling_tolerance: [0, 0.01]   # the cost model's tie tolerance (when the tiling is left to it)
    plot: {x: cores}                # the axis the plot puts on x (default: the first non-chip axis)

``cores`` is chip-relative, so one axis serves chips of different sizes: a
point asking for more cores than its chip has is *skipped* (recorded with the
reason, not run, not a failure).  ``args.core_mask`` sets the mask itself, the
same on every chip.

Points run on a local process pool, or on a Dask distributed cluster given its
scheduler address.  Each finished point is appended to ``points.jsonl`` in the
output folder as it arrives.  A point's id is a digest of everything that
decides its result: the base config's path and content, the target file's
content, the content of the config's data files and kernel files (with the
local modules those import), the simulator's own source digest, the grid
values and ``numerics``; a sweep started again into the same folder reuses the
points that succeeded with the same id and runs the rest (failed points, and
points any of whose inputs changed).  Ctrl-C stops
the sweep at once: the points that finished are in the journal, the ones still
running are dropped and run again on resume.  At the end the table is written
as CSV and Parquet, with a plot of cycles against the swept parameter, one
line per chip; each row also names the tiling the point ran with.
"""


from sim.sweep.point import run_point
from sim.sweep.results import SweepResult, plot_sweep, run_sweep, write_tables
from sim.sweep.spec import BaseConfig, SweepInterrupted, SweepSpec, load_sweep

__all__ = ["BaseConfig", "SweepInterrupted", "SweepResult", "SweepSpec", "load_sweep", "plot_sweep", "run_point",
           "run_sweep", "write_tables"]
