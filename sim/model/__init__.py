"""Frozen data: what a chip (target), a call (buffers, arguments) and a plan (the IR kernels hand the engine) are.

No SimPy and no timing here: :mod:`sim.timing` prices the work, :mod:`sim.engine` runs it.
"""
