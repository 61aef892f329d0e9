"""The HTML report of a run (``dspsim report``): one self-contained page (:mod:`sim.report.page`)."""
