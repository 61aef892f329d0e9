"""Simulated memory's pages: a small run fits a small address space, and accesses over pages of several runs
give the bytes one array would.

Pages of 256 MiB made a small run on eight cores reserve over 3 GiB of address space (one page per buffer
region and per core's scratchpad), so ``ulimit -v 3000000`` failed it with numpy's MemoryError.  Pages are now
16 MiB, no longer than the mapped memory in them (a core's 768 KiB AM), and an access over several missing
pages gets one array (a *run*) for all of them.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np

import sim
from sim.model.memory import PAGE_BYTES, SHARED, AddressSpace

REPO = Path(__file__).resolve().parent.parent
#: The address-space limit a small run must fit (bytes): half of what the 256 MiB pages needed.
LIMIT = 1536 << 20


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run_limited(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # One BLAS thread: a BLAS's per-thread buffers would make the limit depend on the machine's core count.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, preexec_fn=_limited, capture_output=True,
                          text=True, check=False, timeout=120)


def test_a_small_run_fits_a_small_address_space_limit(tmp_path):
    """The issue's run: the tiny shared BatchNormGrad on all eight cores, under a 1.5 GiB RLIMIT_AS."""
    config = REPO / "configs" / "ft78ne_batch_norm_grad_s.yaml"
    proc = _run_limited(["-m", "sim.cli", "run", str(config), "--out-dir", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "ft78ne_batch_norm_grad_s.json").is_file()
    # The limit does bite: an array larger than it cannot be made under it.
    proc = _run_limited(["-c", f"import numpy; numpy.ones({LIMIT}, numpy.uint8)"], tmp_path)
    assert proc.returncode != 0 and "MemoryError" in proc.stderr


def test_blocks_over_pages_of_several_runs_move_the_bytes_one_array_would():
    """A tensor written in two parts at two times lies in two runs; a strided block over both, a copy and a
    gather of it, and a read of the whole, give numpy's answer on one array."""
    mem = AddressSpace(sim.load_target("FT78NE"))
    base = 0x80000000 + PAGE_BYTES - 4096  # 4 KiB before a page boundary
    whole = np.arange(4096, dtype=np.uint32).reshape(64, 64)  # 16 KiB over the boundary
    flat = whole.reshape(-1).view(np.uint8)
    mem.write_span(SHARED, base, flat[:4096].copy())  # the first page alone: a run of its own
    mem.write_span(SHARED, base + 4096, flat[4096:].copy())  # the rest: the next page, another run
    assert mem._run_of(SHARED, base, base + flat.size) is False  # two runs indeed
    np.testing.assert_array_equal(mem.read(base, (64, 64), np.uint32), whole)
    # Columns 8..15 of every row (a strided block over both runs) into a dense block elsewhere, and back.
    dst = 0x90000000
    mem.copy(SHARED, base + 32, SHARED, dst, (64, 8), 4, (256, 4), (32, 4))
    np.testing.assert_array_equal(mem.read(dst, (64, 8), np.uint32), whole[:, 8:16])
    got = mem.gather(SHARED, base + 32, (64, 8), 4, (256, 4)).view(np.uint32).reshape(64, 8)
    np.testing.assert_array_equal(got, whole[:, 8:16])
    mem.scatter(SHARED, base + 32, (64, 8), 4, (256, 4), np.zeros((64, 8, 4), np.uint8))
    expected = whole.copy()
    expected[:, 8:16] = 0
    np.testing.assert_array_equal(mem.read(base, (64, 64), np.uint32), expected)


def test_a_reserved_or_placed_large_array_is_one_run_and_a_short_page_rolls_back():
    """An output reserved before it is written, or an input placed at once, is one array over its pages (views
    of it are views); a scratchpad's short page journals and rolls back like any."""
    mem = AddressSpace(sim.load_target("FT78NE"))
    mem.reserve(0xA0000000, 3 * PAGE_BYTES)
    view = mem.writable_view(0xA0000000, (3 * PAGE_BYTES // 4,), np.float32)
    assert view is not None
    view[-1] = 5.0
    assert mem.read_only_view(0xA0000000 + 3 * PAGE_BYTES - 4, (1,), np.float32)[0] == 5.0
    assert not mem.read_only_view(0xA0000000, (3 * PAGE_BYTES // 4,), np.float32).flags.owndata
    am = 0x20000000  # FT78NE's 768 KiB AM: its page is 768 KiB, its only chunk shorter than a chunk
    mem.write(am, np.full(16, 1.0, np.float32), core=3)
    before = mem.snapshot()
    mem.begin()
    mem.write(am + 0xBFFF0, np.full(4, 2.0, np.float32), core=3)  # the last bytes of AM
    mem.rollback()
    assert mem.snapshot() == before


def test_journals_nest_an_inner_commit_stays_undoable_and_an_inner_rollback_undoes_only_its_own():
    m = sim.Simulator("FT78NE")
    a, b = 0x80000000, 0x80100000
    m.write(a, np.full(16, 1.0, np.float32))
    before = m.memory.snapshot()
    m.memory.begin()
    m.write(a, np.full(16, 2.0, np.float32))
    m.memory.begin()  # inner: a again (journaled by the outer already) and b (not)
    m.write(a, np.full(16, 3.0, np.float32))
    m.write(b, np.full(16, 4.0, np.float32))
    m.memory.commit()
    assert m.read(a, 16, np.float32)[0] == 3.0 and m.read(b, 16, np.float32)[0] == 4.0
    m.memory.rollback()  # the outer undoes its own writes and the committed inner ones
    assert m.memory.snapshot() == before

    m.memory.begin()
    m.write(a, np.full(16, 5.0, np.float32))
    m.memory.begin()
    m.write(a, np.full(16, 6.0, np.float32))
    m.write(b, np.full(16, 7.0, np.float32))
    m.memory.rollback()  # the inner alone: back to the outer's 5.0 and an unwritten b
    assert m.read(a, 16, np.float32)[0] == 5.0 and m.read(b, 16, np.float32)[0] == 0.0
    m.memory.commit()
    assert m.read(a, 16, np.float32)[0] == 5.0
