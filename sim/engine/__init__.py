"""The SimPy model of a chip running a plan: unit queues, DMA transfers, each core's walk, the engine.

It imports :mod:`sim.model` and :mod:`sim.timing` only, never a kernel.
"""
