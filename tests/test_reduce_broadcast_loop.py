"""The column reduction with per-row broadcasts (kernels.common.loops.reduce_broadcast), priced by hand from
targets/FT78NE.yaml's core: fmac 3 units latency 6, vls 2 units latency 9 moving 256 bytes an issue, broadcast 2
units latency 4, sload 1 unit, vector issue width 6, scalar 5, 128-byte vectors (32 fp32 lanes), loop overhead 8,
reduction latency 16."""

from __future__ import annotations

import sim
from kernels.common.loops import reduce_broadcast
from sim.timing import loop_cycles


def test_four_rows_of_1024_reduced_then_broadcast_and_applied():
    core = sim.load_target("FT78NE").core
    reduce, apply = reduce_broadcast(core, "fp32", 4, 1024, loads=2, fmac=2, sums=2, apply_loads=2, apply_fmac=3,
                                     apply_stores=1, prologue={"sload": 2}, label="norm")
    # Sums: 1024 / 32 = 32 vectors a row.  A load issue moves 256 / 128 = 2 vectors, so the unroll steps by 2 until
    # the busiest unit takes the FMAC latency (6): at 8 vectors, vls 2 x 4 = 8 issues (4 cycles on 2 units) and
    # fmac 2 x 8 = 16 (ceil(16 / 3) = 6 cycles).  II = max(6, recurrence 6) = 6, 32 / 8 = 4 trips; fill vls 9 +
    # fmac 6 = 15; epilogue: the 8 accumulators of each sum added, 2 x 7 = 14 fmac (ceil(14 / 3) = 5, + 6 latency)
    # and 2 reductions (2 x 16): 43.  Per row 8 + 15 + 4 x 6 + 43 = 90; 4 rows: 360.
    assert (reduce.trips, dict(reduce.issues), reduce.entries, reduce.reductions) == (4, {"vls": 8, "fmac": 16}, 4, 2)
    assert loop_cycles(reduce, core) == 360
    # Apply: unroll 2 (no sums), vls 2 + 1 = 3 issues (2 cycles), fmac 6 (2 cycles): II 2, 16 trips; fill vls 9 +
    # fmac 6 + vls 9 = 24; prologue: 2 sloads (2 cycles on one unit) then 2 broadcasts (1 cycle on 2), scalar issue
    # 4 / 5 -> 1: 2 cycles + the broadcast's latency 4 = 6.  Per row 8 + 24 + 16 x 2 + 6 = 70; 4 rows: 280.
    assert dict(apply.epilogue) == {"sload": 2, "broadcast": 2} and apply.vector_registers >= 2
    assert loop_cycles(apply, core) == 280
