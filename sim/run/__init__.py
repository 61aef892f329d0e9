"""The run pipeline: a run-config bound, checked, placed, run and saved (:mod:`sim.run.runner`), the checks
before a run (:mod:`sim.run.preflight`), progress bars over its stages (:mod:`sim.run.progress`) and the signal
handling of long runs (:mod:`sim.run.signals`)."""
