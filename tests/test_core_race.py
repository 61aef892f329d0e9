"""The plan check's ``core-race`` rule (sim/model/core_race.py): in one phase, outside the staging levels, no two
cores touch the same bytes of shared memory, one of them writing.  Judged by bytes, not spans; private memory is
each core's own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tiny_kernels import Twice

import sim
from sim.model.core_race import CoreRaces
from sim.model.plan import Tile, Transfer

N = 1024
X, Y = 0xA0000000, 0xA0100000  # FT78NE's DDR
F32 = np.dtype(np.float32)
AM = 0x20000000


def _tile(tile_id: int) -> Tile:
    return Tile(tile_id, (), None, (), 0)


def _store(core: int, dst: int, shape: tuple[int, ...], strides: tuple[int, ...], tile_id: int = 0):
    """A write access of ``core``: a block of 4-byte elements at ``dst``."""
    t = Transfer(AM, dst, shape, 4, strides, strides)
    lo, hi = t.span("dst")
    return (lo, hi, core, True, t, _tile(tile_id), "store", 0)


def _load(core: int, src: int, shape: tuple[int, ...], strides: tuple[int, ...]):
    t = Transfer(src, AM, shape, 4, strides, strides)
    lo, hi = t.span("src")
    return (lo, hi, core, False, t, _tile(0), "load", 0)


def test_interleaved_column_blocks_of_two_cores_share_spans_but_no_bytes():
    """Cores 0 and 1 store columns 0-7 and 8-15 of a 16-row matrix of 16 floats a row: their spans overlap, their
    bytes do not; columns 4-11 on core 1 do meet core 0's."""
    rules = CoreRaces(lambda addr: True)
    core0 = _store(0, Y, (16, 8), (64, 4))
    assert rules.first([], [core0, _store(1, Y + 32, (16, 8), (64, 4))]) is None
    race = rules.first([], [core0, _store(1, Y + 16, (16, 8), (64, 4))])
    assert race is not None and {race.earlier[2], race.later[2]} == {0, 1}
    assert race.shared == (Y + 16, Y + 15 * 64 + 32)


def test_a_read_of_bytes_another_core_writes_is_a_race_and_reads_alone_are_not():
    rules = CoreRaces(lambda addr: True)
    write = _store(0, Y, (256,), (4,))
    assert rules.first([_load(1, Y + 1020, (1,), (4,))], [write]) is not None
    assert rules.first([_load(1, Y + 1024, (1,), (4,))], [write]) is None  # (one past its last byte)
    assert rules.first([_load(0, Y, (256,), (4,))], [write]) is None  # (a core's own: the store-race rule's)
    assert rules.first([_load(0, Y, (256,), (4,)), _load(1, Y, (256,), (4,))], []) is None  # reads only


def test_the_same_addresses_in_private_memory_are_each_cores_own():
    rules = CoreRaces(lambda addr: False)
    assert rules.first([], [_store(0, Y, (256,), (4,)), _store(1, Y, (256,), (4,))]) is None


def _core1_writes(first_half: bool, separate_phase: bool):
    """Core 1 runs a copy of core 0's tile 1 storing into y's first half (where core 0's tile 0 stores) or its
    own second half, in core 0's phase or in a phase after it."""
    def breaker(p, c, x):
        t1 = p.phases[0].tiles[0][1]
        dst = Y if first_half else t1.stores[0].dst
        other = dataclasses.replace(t1, tile_id=0, slot=0, stores=(dataclasses.replace(t1.stores[0], dst=dst),))
        phase = p.phases[0]
        if not separate_phase:
            return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(
                phase, tiles={0: phase.tiles[0], 1: (other,)}),))
        return dataclasses.replace(p, cores=(0, 1), phases=(
            dataclasses.replace(phase, tiles={0: phase.tiles[0]}, barrier_after=True),
            dataclasses.replace(phase, name="again", tiles={1: (other,)})))
    return breaker


@pytest.mark.parametrize("separate_phase", [False, True])
def test_two_cores_writing_the_same_output_bytes_in_one_phase_is_refused(separate_phase):
    """In one phase the write of core 1 races core 0's (refused, memory untouched); after a barrier, in a phase of
    its own, core 1's write lands last and the run is legal."""
    name = f"two_writers_{int(separate_phase)}"
    with sim.registered_kernel(Twice(name, _core1_writes(True, separate_phase))):
        m = sim.Simulator("FT78NE")
        m.write(X, np.arange(N, dtype=F32))
        m.write(Y, np.full(N, 7.0, F32))
        args = {"x": X, "y": Y, "n": N, "core_mask": 0x3}
        if not separate_phase:
            with pytest.raises(sim.PlanError) as e:
                m.call(f"fp_{name}_s", **args)
            assert e.value.rule == "core-race" and (e.value.core, e.value.tile) == (0, 0)
            assert "that core 1's tile 0 (store 0) writes in the same phase" in str(e.value)
            assert (m.read(Y, N, F32) == 7.0).all()
            return
        m.call(f"fp_{name}_s", **args)
    x = np.arange(N, dtype=F32)
    np.testing.assert_array_equal(m.read(Y, N, F32), np.concatenate([2 * x[N // 2:], 2 * x[N // 2:]]))


def _run(name: str, breaker, n: int = N) -> sim.Simulator | sim.PlanError:
    """Run Twice with ``breaker`` on cores 0 and 1: the simulator, or the PlanError that refused the plan."""
    with sim.registered_kernel(Twice(name, breaker)):
        m = sim.Simulator("FT78NE")
        m.write(X, np.arange(n, dtype=F32))
        m.write(Y, np.full(n, 7.0, F32))
        try:
            m.call(f"fp_{name}_s", x=X, y=Y, n=n, core_mask=0x3)
        except sim.PlanError as e:
            return e
    return m


@pytest.mark.parametrize("barrier", [False, True])
def test_a_phase_without_a_barrier_after_it_runs_beside_the_next(barrier):
    """Core 0 stores y[0:512] in phase 'one'; core 1, with no tile there, loads y[0:512] in phase 'two'.  Without a
    barrier after 'one', core 1 walks into 'two' at once: a race, refused naming both phases.  With it, legal: core
    1 reads what core 0 stored and doubles it into y[512:1024]."""
    def breaker(p, c, x):
        t0, t1 = p.phases[0].tiles[0]
        reader = dataclasses.replace(t1, tile_id=0, slot=0,
                                     loads=(dataclasses.replace(t1.loads[0], src=Y),))
        return dataclasses.replace(p, cores=(0, 1), phases=(
            dataclasses.replace(p.phases[0], name="one", tiles={0: (t0,)}, barrier_after=barrier),
            dataclasses.replace(p.phases[0], name="two", tiles={1: (reader,)}, barrier_after=False)))
    got = _run(f"phases_{int(barrier)}", breaker)
    if not barrier:
        assert isinstance(got, sim.PlanError) and got.rule == "core-race"
        assert (got.core, got.tile, got.phase) == (0, 0, "one")
        assert "that core 1's tile 0 (load 0) reads in phase 'two', no barrier between" in str(got)
        return
    assert isinstance(got, sim.Simulator)
    x = np.arange(N, dtype=F32)
    np.testing.assert_array_equal(got.read(Y, N, F32), np.concatenate([2 * x[:N // 2], 4 * x[:N // 2]]))


def test_bytes_of_a_shared_staging_level_are_shared_but_a_per_core_levels_are_each_cores_own():
    """Core 0 stores its tile into GSM's staging window and core 1 loads the same GSM bytes in the same phase: a
    race (the window is one memory for both).  Both cores using the same addresses of their own AM is not."""
    def breaker(p, c, x):
        t0, t1 = p.phases[0].tiles[0]
        g = x.level("gsm").base
        writer = dataclasses.replace(t0, stores=(dataclasses.replace(t0.stores[0], dst=g),))
        reader = dataclasses.replace(t1, tile_id=0, slot=0, loads=(dataclasses.replace(t1.loads[0], src=g),))
        return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(
            p.phases[0], tiles={0: (writer,), 1: (reader,)}),))
    got = _run("gsm_window", breaker)
    assert isinstance(got, sim.PlanError) and got.rule == "core-race", got
    assert "that core 1's tile 0 (load 0) reads in the same phase" in str(got)

    def own_am(p, c, x):  # each core its own half of y, through the same AM addresses
        t0, t1 = p.phases[0].tiles[0]
        other = dataclasses.replace(t1, tile_id=0, loads=(dataclasses.replace(t1.loads[0], dst=t0.loads[0].dst),),
                                    compute=t0.compute, stores=(dataclasses.replace(t1.stores[0],
                                                                                    src=t0.stores[0].src),))
        return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(
            p.phases[0], tiles={0: (t0,), 1: (other,)}),))
    got = _run("own_am", own_am)
    assert isinstance(got, sim.Simulator), got
    np.testing.assert_array_equal(got.read(Y, N, F32), 2 * np.arange(N, dtype=F32))


def _block(core: int, writes: bool, base: int, shape: tuple[int, ...], strides: tuple[int, ...]):
    return _store(core, base, shape, strides) if writes else _load(core, base, shape, strides)


def _bytes(access) -> set[int]:
    """The bytes an access touches, element by element (the independent truth)."""
    t, writes = access[4], access[3]
    base, strides = (t.dst, t.dst_strides) if writes else (t.src, t.src_strides)
    out: set[int] = set()
    for index in np.ndindex(*t.shape):
        first = base + sum(i * s for i, s in zip(index, strides))
        out.update(range(first, first + t.itemsize))
    return out


def _listing(listed: str, monkeypatch) -> None:
    """How CoreRaces lists runs: ``all`` at once, ``windows`` of at most 8 stretches, or ``none`` (every block
    judged pair by pair, as one that is not nested and has too many runs is)."""
    import sim.model.block_runs as block_runs
    import sim.model.core_race as core_race
    if listed != "all":
        monkeypatch.setattr(core_race, "MAX_RUNS_TOTAL", 8)
    if listed == "none":
        monkeypatch.setattr(block_runs.BlockGroup, "listable", staticmethod(lambda run, dims: False))


@pytest.mark.parametrize("listed", ["all", "windows", "none"])
def test_the_lowest_byte_two_cores_touch_one_writing_is_found_as_the_byte_sets_say(listed, monkeypatch):
    """400 random sets of strided blocks (backward, zero, overlapping and transposed strides among them) on three
    cores: a race is found exactly when one core writes a byte another core touches, at the lowest such byte, and
    both accesses named touch it; also when at most 8 runs are listed at once (windows of the address range), and
    when none is (every access judged pair by pair, as a block that is not nested and has too many runs is)."""
    _listing(listed, monkeypatch)
    rng = np.random.default_rng(7)
    rules = CoreRaces(lambda addr: True)
    for _ in range(400):
        accesses = []
        for _ in range(int(rng.integers(2, 7))):
            dims = int(rng.integers(1, 4))
            shape = tuple(int(n) for n in rng.integers(1, 5, dims))
            strides = tuple(int(s) for s in rng.choice([-64, -8, 0, 4, 8, 12, 16, 64, 128], dims))
            base = Y + 1024 + int(rng.integers(0, 64)) * 4
            accesses.append(_block(int(rng.integers(0, 3)), bool(rng.integers(0, 2)), base, shape, strides))
        touched = {}
        for a in accesses:
            for byte in _bytes(a):
                touched.setdefault(byte, []).append(a)
        racing = [b for b, who in touched.items()
                  if any(x[3] and y[2] != x[2] for x in who for y in who)]
        race = rules.first([a for a in accesses if not a[3]], [a for a in accesses if a[3]])
        if not racing:
            assert race is None
            continue
        assert race is not None and (race.shared[0] == min(racing) or listed == "none")
        a, b = race.earlier, race.later
        assert a[2] != b[2] and (a[3] or b[3]) and _bytes(a) & _bytes(b)
        assert race.shared[0] in _bytes(a) & _bytes(b) or listed == "none"


def test_accesses_whose_spans_all_overlap_are_not_compared_pair_by_pair(monkeypatch):
    """Eight cores each storing every eighth row of one matrix, 64 blocks each (every block's span overlapping
    every other core's): no access is judged byte by byte; with one row stored twice, only those whose span holds
    the row's first byte are (cores 0 to 5's first blocks, and the second store)."""
    import sim.model.core_race as core_race
    judged = []
    meet = core_race.sides_meet
    monkeypatch.setattr(core_race, "sides_meet", lambda a, b: judged.append(a) or meet(a, b))
    rows = [_store(core, Y + (64 * 8 * i + core) * 64, (8, 16), (8 * 64, 4), tile_id=i)
            for core in range(8) for i in range(64)]
    rules = CoreRaces(lambda addr: True)
    assert rules.first([], rows) is None and not judged
    again = _store(7, Y + 5 * 64, (16,), (4,))  # core 7 stores row 5, core 5's
    race = rules.first([], [*rows, again])
    assert race is not None and {race.earlier[2], race.later[2]} == {5, 7} and race.shared[0] == Y + 5 * 64
    assert len(judged) == 7


def test_an_access_of_more_runs_than_are_listed_is_judged_against_each_other_cores_access():
    """Core 0 writes every other float of 8 MiB (2**20 + 1 runs, more than are listed): core 1 reading one of those
    floats races it, one of the floats between does not."""
    from sim.model.block_overlap import MAX_RUNS_LISTED
    rules = CoreRaces(lambda addr: True)
    many = _store(0, Y, (MAX_RUNS_LISTED + 1,), (8,))
    race = rules.first([_load(1, Y + 8 * 1000, (1,), (4,))], [many])
    assert race is not None and race.earlier is many and race.shared == (Y + 8000, Y + 8004)
    assert rules.first([_load(1, Y + 8 * 1000 + 4, (1,), (4,))], [many]) is None
    assert rules.first([], [many, _store(1, Y + 8 * 999 + 4, (1,), (4,))]) is None
    assert rules.first([], [many, _store(1, Y + 8 * 999 + 4, (2,), (4,))]) is not None


def test_two_cores_writing_non_nested_blocks_of_over_a_million_runs_each_race_at_their_one_shared_float():
    """Cores 0 and 1 each write 2**20 + 2 overlapping runs of two floats one float apart (not nested, more runs
    than are listed at once: judged pair by pair), core 1's from where core 0's ends but for its last float: they
    race there; a float further on, they do not."""
    from sim.model.block_overlap import MAX_RUNS_LISTED
    n = MAX_RUNS_LISTED + 2
    rules = CoreRaces(lambda addr: True)
    mine = _store(0, Y, (n, 2), (4, 4))  # floats [Y, Y + 4 n + 4)
    race = rules.first([], [mine, _store(1, Y + 4 * n, (n, 2), (4, 4))])
    assert race is not None and race.earlier is mine and race.shared[0] == Y + 4 * n
    assert rules.first([], [mine, _store(1, Y + 4 * n + 4, (n, 2), (4, 4))]) is None


def _fill(tile_id: int, src: int, dst: int, buffer: str = "g@0", nbytes: int = 1024) -> Tile:
    """A staging tile filling ``buffer`` with ``nbytes`` from ``src`` at ``dst``."""
    return Tile(tile_id, (Transfer.contiguous(src, dst, nbytes),), None, (), 0, fills=(buffer,))


def test_a_staged_buffer_filled_into_ddr_is_judged_as_any_load():
    """Core 0's staging tile fills buffer b into y[0:256] (a copy within DDR) while core 1 stores y[0:512]: the
    race rules leave out only the bytes staged buffers fill in the staging levels (the buffers' rules judge
    those), so core-race refuses it."""
    def breaker(p, c, x):
        t0, t1 = p.phases[0].tiles[0]
        user = dataclasses.replace(t1, uses=("b@0",))
        return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(
            p.phases[0], tiles={0: (_fill(9, X + 2048, Y, "b@0"), user), 1: (t0,)}),))
    got = _run("fill_into_ddr", breaker)
    assert isinstance(got, sim.PlanError) and got.rule == "core-race", got
    assert "[0xa0100000, 0xa0100400)" in str(got)


@pytest.mark.parametrize("barrier", [False, True])
@pytest.mark.parametrize("fill_first", [False, True])
def test_a_staged_buffers_bytes_are_its_phases_own_when_no_barrier_follows(fill_first, barrier):
    """Without a barrier between them, a phase's staged buffer in GSM and another core's access to its bytes in
    the next phase race: core 1 storing into the bytes buffer g fills in the next phase, or reading them (without
    using g) in the phase after the fill.  With a barrier between, each is legal."""
    def breaker(p, c, x):
        t0, t1 = p.phases[0].tiles[0]
        g = x.level("gsm").base
        fill, user = _fill(9, X, g, nbytes=2048), dataclasses.replace(t1, uses=("g@0",), loads=(
            dataclasses.replace(t1.loads[0], src=g),))
        if fill_first:  # core 1 reads g's bytes in the phase after
            other = dataclasses.replace(t0, loads=(dataclasses.replace(t0.loads[0], src=g),))
        else:  # core 1 stores its block into g's bytes in the phase before
            other = dataclasses.replace(t0, stores=(dataclasses.replace(t0.stores[0], dst=g),))
        staged = dataclasses.replace(p.phases[0], name="staged", tiles={0: (fill, user)}, barrier_after=barrier)
        plain = dataclasses.replace(p.phases[0], name="plain", tiles={1: (other,)}, barrier_after=barrier)
        return dataclasses.replace(p, cores=(0, 1), phases=(staged, plain) if fill_first else (plain, staged))
    got = _run(f"window_{int(fill_first)}_{int(barrier)}", breaker)
    if barrier:
        assert isinstance(got, sim.Simulator), got
        return
    assert isinstance(got, sim.PlanError) and got.rule == "core-race", got
    assert "no barrier between" in str(got) and "[0x40580000, 0x40580800)" in str(got)


def _odd_rows(t: Tile, g: int, tile_id: int = 0) -> Tile:
    """``t`` storing its 512 floats into GSM's 1 KiB rows 1 and 3 from ``g`` (strided: the odd rows)."""
    store = Transfer(t.stores[0].src, g + 1024, (2, 256), 4, (1024, 4), (2048, 4))
    return dataclasses.replace(t, tile_id=tile_id, stores=(store,))


@pytest.mark.parametrize("second_core", [False, True])
def test_a_strided_buffers_bytes_are_its_rows_not_its_span(second_core):
    """Buffer b fills GSM's even 1 KiB rows 0, 2, 4 and 6 (a strided fill) and its user reads row 0.  Another tile
    storing into the odd rows touches none of b's bytes (legal: the staged buffers' rules judge bytes, not spans);
    two cores storing into the same odd rows race (the race rules leave out b's bytes only, not its span)."""
    def breaker(p, c, x):
        t0, t1 = p.phases[0].tiles[0]
        g = x.level("gsm").base
        fill = Tile(9, (Transfer(X, g, (4, 256), 4, (1024, 4), (2048, 4)),), None, (), 0, fills=("b@0",))
        # (row 0 of b into the first half of the compute's input, the second half from x: the compute reads only
        # bytes the call wrote)
        dst = t1.loads[0].dst
        user = dataclasses.replace(t1, uses=("b@0",), loads=(Transfer.contiguous(g, dst, 1024),
                                                             Transfer.contiguous(X + 1024, dst + 1024, 1024)))
        tiles = {0: (fill, user, _odd_rows(t0, g, 2))}
        if second_core:
            tiles[1] = (_odd_rows(t0, g),)
        return dataclasses.replace(p, cores=(0, 1), phases=(dataclasses.replace(p.phases[0], tiles=tiles),))
    got = _run(f"odd_rows_{int(second_core)}", breaker)
    if not second_core:
        assert isinstance(got, sim.Simulator), got
        return
    assert isinstance(got, sim.PlanError) and got.rule == "core-race", got
    assert "store 0 writes bytes of [0x40580400, " in str(got), str(got)


@pytest.mark.parametrize("listed", ["all", "windows", "none"])
def test_the_staged_bytes_of_a_phase_are_compared_with_the_other_phases_accesses_as_byte_sets_say(listed,
                                                                                                    monkeypatch):
    """300 random windows of two phases on three cores: ``across`` finds a race exactly when an access withheld in
    one phase (to its staged buffers' bytes) and an access of another core in the other phase share a byte, one
    writing, and names two such accesses; also a few stretches at a time, and pair by pair."""
    _listing(listed, monkeypatch)
    rng = np.random.default_rng(3)
    rules = CoreRaces(lambda addr: True)
    found = 0
    for _ in range(300):
        accesses = []
        for _ in range(int(rng.integers(2, 7))):
            dims = int(rng.integers(1, 3))
            shape = tuple(int(n) for n in rng.integers(1, 5, dims))
            strides = tuple(int(s) for s in rng.choice([-64, 0, 4, 8, 16, 64], dims))
            block = _block(int(rng.integers(0, 3)), bool(rng.integers(0, 2)), Y + 1024 + int(rng.integers(0, 64)) * 4,
                           shape, strides)
            accesses.append((*block, str(rng.choice(["a", "b"]))))
        withheld = [a for a in accesses if rng.integers(0, 2)]
        racing = any(w[8] != a[8] and w[2] != a[2] and (w[3] or a[3]) and _bytes(w) & _bytes(a)
                     for w in withheld for a in accesses)
        race = rules.across(withheld, accesses)
        assert (race is not None) == racing
        if race is not None:
            found += 1
            a, b = race.earlier, race.later
            assert a[8] != b[8] and a[2] != b[2] and (a[3] or b[3]) and _bytes(a) & _bytes(b)
            assert race.shared[0] in _bytes(a) & _bytes(b) or listed == "none"
    assert found > 30


def test_overlapping_runs_are_listed_as_the_stretches_they_cover(monkeypatch):
    """Ten cores' reads of 200 runs of 64 bytes each stepping 4 bytes (an im2col-like read: 2,000 runs over 860
    bytes) and one core's write past them: with at most 64 runs listed at once the byte sets are still one stretch
    an access, so one window does, where halving windows of runs would go down to single bytes."""
    import sim.model.block_runs as block_runs
    import sim.model.core_race as core_race
    monkeypatch.setattr(core_race, "MAX_RUNS_TOTAL", 64)
    windows = []
    within = block_runs.BlockGroup.within
    monkeypatch.setattr(block_runs.BlockGroup, "within",
                        lambda self, lo, hi: windows.append(lo) or within(self, lo, hi))
    reads = [_load(core, Y, (200, 16), (4, 4)) for core in range(1, 10)]
    rules = CoreRaces(lambda addr: True)
    assert rules.first(reads, [_store(0, Y + 860, (16,), (4,))]) is None
    assert len(set(windows)) == 1
    race = rules.first(reads, [_store(0, Y + 856, (16,), (4,))])
    assert race is not None and race.shared[0] == Y + 856


def test_a_strided_read_meeting_one_row_of_a_strided_buffer_is_judged_by_that_row():
    """Buffer b fills GSM's even 1 KiB rows; a tile not using b reads rows 1 and 4 (a strided read whose span
    covers rows 1 to 4): row 4 is b's, so the read races b's fill (refused), though rows 0 and 2, the first of b's
    rows it spans, are not among its bytes."""
    def breaker(p, c, x):
        t0, t1 = p.phases[0].tiles[0]
        g = x.level("gsm").base
        fill = Tile(9, (Transfer(X, g, (4, 256), 4, (1024, 4), (2048, 4)),), None, (), 0, fills=("b@0",))
        # (row 0 of b into the first half of the compute's input, the second half from x: the compute reads only
        # bytes the call wrote)
        dst = t1.loads[0].dst
        user = dataclasses.replace(t1, uses=("b@0",), loads=(Transfer.contiguous(g, dst, 1024),
                                                             Transfer.contiguous(X + 1024, dst + 1024, 1024)))
        reader = dataclasses.replace(t0, tile_id=2, loads=(Transfer(g + 1024, t0.loads[0].dst, (2, 256), 4,
                                                                    (3072, 4), (1024, 4)),))
        return dataclasses.replace(p, phases=(dataclasses.replace(p.phases[0], tiles={0: (fill, user, reader)}),))
    got = _run("row_four", breaker)
    assert isinstance(got, sim.PlanError) and got.rule == "staging-alias", got
    assert "loads from [0x40581000, 0x40581400) of gsm, bytes of staged buffer 'b', which it does not use" in str(got)
