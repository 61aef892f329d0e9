"""The column reduction with per-row broadcasts (kernels.common.loops.reduce_broadcast), priced by hand from
targets/FT78NE.yaml's core: fmac 3 units latency 6, vls 2 units latency 9 (a store's 4) moving 256 bytes an
issue, broadcast 2 units latency 4, sload 1 unit, vector issue width 6, scalar 5, 128-byte vectors (32 fp32
lanes), loop overhead 8, reduction latency 16."""

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
    # fmac 6 = 15; epilogue, a chain (sim.timing.epilogue_cycles): the 8 accumulators of each sum added as a tree,
    # levels of 2 x 4, 2 x 2, 2 x 1 adds (3, 2, 1 cycles on 3 FMACs), each starting the FMAC latency after the one
    # before (S = 0, 6, 12) and ending no sooner than that after it: F = 3, max(8, 9) = 9, max(13, 15) = 15; then
    # the 2 reductions (2 x 16), from 12 + 6 = 18: F = max(18 + 32, 15 + 6) = 50.  Per row 8 + 15 + 4 x 6 + 50 =
    # 97; 4 rows: 388.
    assert (reduce.trips, dict(reduce.issues), reduce.entries, reduce.reductions) == (4, {"vls": 8, "fmac": 16}, 4, 2)
    assert reduce.epilogue_chain == ({"fmac": 8}, {"fmac": 4}, {"fmac": 2})
    assert loop_cycles(reduce, core) == 388
    # Apply: unroll 2 (no sums), vls 2 + 1 = 3 issues (2 cycles), fmac 6 (2 cycles): II 2, 16 trips; fill vls 9 +
    # fmac 6 + the store's latency 4 = 19; prologue: 2 sloads (2 cycles on one unit) then 2 broadcasts (1 cycle
    # on 2), scalar issue 4 / 5 -> 1: 2 cycles + the broadcast's latency 4 = 6.  Per row 8 + 19 + 16 x 2 + 6 =
    # 65; 4 rows: 260.
    assert dict(apply.epilogue) == {"sload": 2, "broadcast": 2} and apply.vector_registers >= 2
    assert loop_cycles(apply, core) == 260
