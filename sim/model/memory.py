"""Simulated memory: the map of regions and the sparse byte store behind it.

This is the only place data bytes live.  Memory is byte-addressed and
little-endian; pages of 16 MiB are allocated on first touch and zero-filled
lazily by the operating system, so untouched bytes cost nothing, and the
address space a process reserves stays near what it touches (a small run fits a
small ``ulimit -v``).  An access over several pages none of which exists yet
(a tensor placed at once, a DMA block spread over a large output) gets one
array for all of them, so that its views and strided copies stay single numpy
operations.  Private regions have one backing store per core.  A journal
records the first write to every 1 MiB chunk during a call, so a failed call
can be rolled back to the exact bytes it started from.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from sim.errors import MemoryFault, brief
from sim.model.target import Region, Target

#: Pages of 16 MiB, allocated on first touch and zero-filled lazily by the OS.  Every allocated page reserves its
#: size of the process's address space (which ``ulimit -v`` bounds): 256 MiB pages made a small run on eight cores
#: reserve over 3 GiB.  Pages are kept no longer than the mapped memory in them needs (a 768 KiB scratchpad gets
#: 768 KiB), and an access over several missing pages gets one array for all of them.
PAGE_BITS = 24
PAGE_BYTES = 1 << PAGE_BITS
#: Journal and snapshot granularity (1 MiB): a call's first write to a chunk saves only that chunk.
CHUNK_BITS = 20
CHUNK_BYTES = 1 << CHUNK_BITS
#: Journal buffers kept between calls for reuse (a fresh chunk-sized buffer costs a page fault per 4 KiB page,
#: several times the copy itself; a call that rewrites its outputs would pay that on every run).
SPARE_CHUNKS = 128

#: A run of pages: the array holding them and the address of its first byte.
Run = tuple[np.ndarray, int]

#: Store key of shared memory; private memory is keyed by core index.
SHARED = -1
#: Largest single read or write (bytes): a bigger one is a typo that would exhaust the host's memory.
MAX_ACCESS_BYTES = 1 << 31
#: Views an address space keeps for copies and operands run again (AddressSpace.kept_copy_plan and
#: kept_dense_views); past it they are all dropped and made afresh as needed.
MAX_KEPT_VIEWS = 1 << 16
#: Values made of views an address space keeps (:meth:`AddressSpace.kept`: a replayed plan's program, which holds
#: the plan's effects: tiles, transfers and all), the least recently used dropped first; as many as the plans a
#: simulator keeps (sim.plan_cache.PLAN_CACHE_SIZE), whose repeat calls replay them.
MAX_KEPT_VALUES = 16


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _hex(value: int) -> str:
    """An address for a message: hex, or (absurdly large) its size in digits."""
    return f"{value:#x}" if -(1 << 80) < value < 1 << 80 else brief(value)


def access_shape(shape: object, what: str = "read") -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative ints, else MemoryFault."""
    if _is_int(shape):
        dims: tuple = (shape,)
    elif isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise MemoryFault(f"{what}: shape must be an int or a sequence of ints, got {brief(shape)}")
    else:
        n = shape.size if isinstance(shape, np.ndarray) else len(shape)
        if n > 32:  # before copying it: a huge sequence is refused by its length alone
            raise MemoryFault(f"{what}: shape has {n} dimensions (at most 32)")
        dims = tuple(np.asarray(shape).reshape(-1)) if isinstance(shape, np.ndarray) else tuple(shape)
    for d in dims:
        if not _is_int(d):
            raise MemoryFault(f"{what}: shape {brief(shape)} holds {brief(d)}, not an int")
        if d < 0:
            raise MemoryFault(f"{what}: negative dimension in shape {tuple(int(x) for x in dims)}")
    return tuple(int(d) for d in dims)


class MemoryMap:
    """Address -> region lookup over a target's memory map."""

    def __init__(self, target: Target):
        self.target = target
        self.regions: tuple[Region, ...] = tuple(sorted(target.regions, key=lambda r: r.base))
        self._bases = [r.base for r in self.regions]

    def region_at(self, addr: int) -> Region | None:
        """The region holding ``addr``, or None."""
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0 and addr < self.regions[i].end:
            return self.regions[i]
        return None

    def region_of(self, addr: int, size_bytes: int) -> Region | None:
        """The region wholly holding ``[addr, addr + size_bytes)``, or None."""
        r = self.region_at(addr)
        if r is not None and r.contains(addr, max(size_bytes, 1)):
            return r
        return None

    def describe(self, addr: int) -> str:
        """Human words for where ``addr`` falls: a region, or the gap between two."""
        r = self.region_at(addr)
        if r is not None:
            return f"region {r.name} [{r.base:#x}, {r.end:#x})"
        i = bisect.bisect_right(self._bases, addr) - 1
        before = self.regions[i].name if i >= 0 else None
        after = self.regions[i + 1].name if i + 1 < len(self.regions) else None
        return f"unmapped (between {before or 'the start'} and {after or 'the end'} of the map)"

    def resolve(self, addr: int, size_bytes: int, core: int | None, *, what: str = "access") -> tuple[Region, int]:
        """The region and backing-store key of an access, or MemoryFault naming why it is illegal."""
        if not _is_int(addr):
            raise MemoryFault(f"{what}: address must be an int, got {brief(addr)}")
        addr = int(addr)
        if not _is_int(size_bytes) or size_bytes < 0:
            raise MemoryFault(f"{what}: size must be a non-negative int, got {brief(size_bytes)}")
        if core is not None and (not _is_int(core) or not 0 <= core < self.target.cores):
            raise MemoryFault(f"{what}: core={brief(core)} is not a core of {self.target.name} "
                              f"(0..{self.target.cores - 1})")
        r = self.region_of(addr, size_bytes)
        if r is None:
            start = self.region_at(addr)
            if start is not None:
                raise MemoryFault(f"{what} [{_hex(addr)}, {_hex(addr + size_bytes)}) runs past the end of region "
                                  f"{start.name} [{start.base:#x}, {start.end:#x})")
            raise MemoryFault(f"{what} [{_hex(addr)}, {_hex(addr + size_bytes)}): {self.describe(addr)}")
        if size_bytes > MAX_ACCESS_BYTES:
            raise MemoryFault(f"{what} of {size_bytes} bytes at {addr:#x}: larger than any single access the "
                              f"simulator allows ({MAX_ACCESS_BYTES} bytes)")
        if r.shared:
            return r, SHARED
        if core is None:
            raise MemoryFault(f"{what} [{addr:#x}, {addr + size_bytes:#x}) is in private region {r.name}: "
                              f"pass core= (0..{self.target.cores - 1})")
        return r, int(core)


class AddressSpace:
    """Sparse paged byte stores (one shared, one per core for private regions) with a rollback journal.

    Pages (``PAGE_BYTES``) are zero-filled lazily by the operating system, so
    only the bytes a run writes cost memory.  Consecutive pages allocated
    together share one array (a *run*), so that a block inside one run -- a
    strided DMA block, a tensor's view -- is copied or viewed through a single
    strided view (only its own bytes, never the span around it).  The journal and
    :meth:`snapshot` work in ``CHUNK_BYTES`` chunks, so a call's first write
    saves one chunk, not a page.
    """

    def __init__(self, target: Target):
        self.map = MemoryMap(target)
        self._stores: dict[int, dict[int, np.ndarray]] = {}  # store key -> page index -> the page's bytes
        self._runs: dict[int, dict[int, tuple[np.ndarray, int]]] = {}  # page index -> (its run, the run's first page)
        self._written: dict[int, set[int]] = {}  # store key -> chunks ever written (all others are zero)
        self._journal: dict[tuple[int, int], np.ndarray | None] | None = None
        self._enclosing: list[dict[tuple[int, int], np.ndarray | None]] = []  # journals begun before it
        self._spare: list[np.ndarray] = []  # chunk-sized journal buffers free for the next call
        self._page_ends: dict[int, int] = {}  # page index -> bytes of it the map covers (from the page's start)
        # Views into these pages that runs ask for again and again (a cached plan's copies and operands), by the
        # values that define them: they stay valid for good (pages never move), and die with this memory.
        self._kept: dict[tuple, Any] = {}
        self._values: OrderedDict[tuple, Any] = OrderedDict()  # (AddressSpace.kept)

    # -- pages and chunks ----------------------------------------------------------------------

    def _page_length(self, idx: int) -> int:
        """Bytes of page ``idx`` worth allocating: up to the end of the last mapped byte in it (a small
        scratchpad's page is as small as it is)."""
        got = self._page_ends.get(idx)
        if got is None:
            lo, hi = idx << PAGE_BITS, (idx + 1) << PAGE_BITS
            ends = [min(r.end, hi) - lo for r in self.map.regions if r.base < hi and r.end > lo]
            got = self._page_ends[idx] = max(ends, default=PAGE_BYTES)
        return got

    def _allocate(self, key: int, first: int, last: int) -> np.ndarray:
        """One zeroed array (lazily, by the OS) for the missing pages ``first..last`` of store ``key``: its run."""
        run = np.zeros(((last - first) << PAGE_BITS) + self._page_length(last), np.uint8)
        pages = self._stores.setdefault(key, {})
        runs = self._runs.setdefault(key, {})
        for idx in range(first, last + 1):
            off = (idx - first) << PAGE_BITS
            pages[idx] = run[off:off + (PAGE_BYTES if idx < last else self._page_length(last))]
            runs[idx] = (run, first)
        return run

    def _page(self, key: int, idx: int) -> np.ndarray:
        """Page ``idx`` of store ``key``, allocated (zeroed lazily by the OS) on first use."""
        page = self._stores.get(key, {}).get(idx)
        if page is None:
            self._allocate(key, idx, idx)
            page = self._stores[key][idx]
        return page

    def _run_of(self, key: int, lo: int, hi: int) -> Run | None | Literal[False]:
        """``(array, address of its first byte)`` of the one run holding all of ``[lo, hi)`` (``hi > lo``); None
        when none of its pages exists; False when the span lies over pages of several runs, or over pages some of
        which exist and some not."""
        first, last = lo >> PAGE_BITS, (hi - 1) >> PAGE_BITS
        runs = self._runs.get(key)
        if not runs:
            return None
        got = runs.get(first)
        if got is not None:
            if last == first:
                return got[0], got[1] << PAGE_BITS
            end = runs.get(last)
            return (got[0], got[1] << PAGE_BITS) if end is not None and end[0] is got[0] else False
        return False if any(i in runs for i in range(first + 1, last + 1)) else None

    def _run_made(self, key: int, lo: int, hi: int) -> Run | Literal[False]:
        """:meth:`_run_of`, the pages made (as one run) when none of them exists."""
        got = self._run_of(key, lo, hi)
        if got is None:
            first = lo >> PAGE_BITS
            return self._allocate(key, first, (hi - 1) >> PAGE_BITS), first << PAGE_BITS
        return got

    def _chunk(self, key: int, chunk: int) -> np.ndarray:
        """A writable view of chunk ``chunk`` (absolute index) of store ``key`` (shorter at the end of a short
        page)."""
        off = (chunk << CHUNK_BITS) & (PAGE_BYTES - 1)
        return self._page(key, chunk >> (PAGE_BITS - CHUNK_BITS))[off:off + CHUNK_BYTES]

    def _touch(self, key: int, lo: int, hi: int) -> None:
        """Journal (once per call) and mark as written the chunks of ``[lo, hi)`` before they change."""
        if hi <= lo:
            return
        journal = self._journal
        first = lo >> CHUNK_BITS
        if journal is not None and first == (hi - 1) >> CHUNK_BITS and (key, first) in journal:
            return  # one chunk, journaled (and so marked written) earlier in this call: the common case
        written = self._written.setdefault(key, set())
        for chunk in range(lo >> CHUNK_BITS, ((hi - 1) >> CHUNK_BITS) + 1):
            if journal is not None and (key, chunk) not in journal:
                saved = None
                if chunk in written:
                    saved = self._spare.pop() if self._spare else np.empty(CHUNK_BYTES, np.uint8)
                    view = self._chunk(key, chunk)
                    saved[:view.size] = view
                journal[(key, chunk)] = saved
            written.add(chunk)

    # -- raw spans ---------------------------------------------------------------------------

    def read_span(self, key: int, addr: int, size_bytes: int) -> np.ndarray:
        """Bytes ``[addr, addr + size_bytes)`` of store ``key`` as a uint8 array (a view when in one run)."""
        if size_bytes <= 0:
            return np.zeros(0, np.uint8)
        got = self._run_of(key, addr, addr + size_bytes)
        if got is None:
            return np.zeros(size_bytes, np.uint8)
        if got is not False:
            run, base = got
            return run[addr - base:addr - base + size_bytes]
        pages = self._stores.get(key, {})
        first, last = addr >> PAGE_BITS, (addr + size_bytes - 1) >> PAGE_BITS
        off = addr & (PAGE_BYTES - 1)
        out = np.empty(size_bytes, np.uint8)
        pos = 0
        for idx in range(first, last + 1):
            lo = off if idx == first else 0
            n = min(PAGE_BYTES - lo, size_bytes - pos)
            page = pages.get(idx)
            if page is None:
                out[pos:pos + n] = 0
            else:
                out[pos:pos + n] = page[lo:lo + n]
            pos += n
        return out

    def write_span(self, key: int, addr: int, data: np.ndarray) -> None:
        """Store the uint8 array ``data`` at ``addr`` of store ``key``."""
        size_bytes = data.size
        if size_bytes <= 0:
            return
        self._touch(key, addr, addr + size_bytes)
        got = self._run_made(key, addr, addr + size_bytes)
        if got is not False:
            run, base = got
            run[addr - base:addr - base + size_bytes] = data
            return
        pos = 0
        while pos < size_bytes:
            a = addr + pos
            idx, lo = a >> PAGE_BITS, a & (PAGE_BYTES - 1)
            n = min(PAGE_BYTES - lo, size_bytes - pos)
            self._page(key, idx)[lo:lo + n] = data[pos:pos + n]
            pos += n

    # -- strided blocks (DMA descriptors) -----------------------------------------------------

    @staticmethod
    def _block_view(run: Run, addr: int, shape: Sequence[int], itemsize: int,
                    strides: Sequence[int]) -> np.ndarray:
        """The strided block at ``addr`` inside ``run`` (an array and the address of its first byte) as a view of
        ``shape`` with one item per element.

        Items are unsigned words of ``itemsize`` bytes (a void type for odd sizes), so copies move
        whole items instead of bytes.
        """
        array, base = run
        return np.ndarray(tuple(shape), _item_dtype(itemsize), buffer=array, offset=addr - base,
                          strides=tuple(strides))

    def copy(self, src_key: int, src: int, dst_key: int, dst: int, shape: Sequence[int], itemsize: int,
             src_strides: Sequence[int], dst_strides: Sequence[int]) -> None:
        """Copy a strided block to another strided block (a DMA transfer), in one pass when each side lies in
        one run of pages."""
        if 0 in shape:
            return
        slo, shi = block_span(src, shape, itemsize, src_strides)
        dlo, dhi = block_span(dst, shape, itemsize, dst_strides)
        src_run = self._run_of(src_key, slo, shi)
        dst_run = self._run_made(dst_key, dlo, dhi) if src_run is not False else False
        if src_run is not False and dst_run is not False:
            self._touch(dst_key, dlo, dhi)
            out = self._block_view(dst_run, dst, shape, itemsize, dst_strides)
            if src_run is None:
                out[...] = 0
            else:
                # numpy buffers the copy itself when source and destination overlap.
                out[...] = self._block_view(src_run, src, shape, itemsize, src_strides)
            return
        self.scatter(dst_key, dst, shape, itemsize, dst_strides,
                     self.gather(src_key, src, shape, itemsize, src_strides))

    def copy_plan(self, src_key: int, src: int, dst_key: int, dst: int, shape: Sequence[int], itemsize: int,
                  src_strides: Sequence[int], dst_strides: Sequence[int]) -> tuple | None:
        """The views a block copy moves through, for doing the same copy again and again (a plan run twice):
        None unless each side lies in one run of pages.  Pass the result to :meth:`copy_planned`."""
        if 0 in shape:
            return None
        slo, shi = block_span(src, shape, itemsize, src_strides)
        dlo, dhi = block_span(dst, shape, itemsize, dst_strides)
        # Pages are created (zero, costing nothing until written) so the views stay valid for good.
        src_run = self._run_made(src_key, slo, shi)
        dst_run = self._run_made(dst_key, dlo, dhi) if src_run is not False else False
        if src_run is False or dst_run is False:
            return None
        return (self._block_view(src_run, src, shape, itemsize, src_strides),
                self._block_view(dst_run, dst, shape, itemsize, dst_strides),
                dst_key, dlo, dhi)

    def copy_planned(self, planned: tuple) -> None:
        """Do a copy :meth:`copy_plan` prepared (the destination journaled as by any write)."""
        src_view, dst_view, dst_key, dlo, dhi = planned
        self._touch(dst_key, dlo, dhi)
        dst_view[...] = src_view  # numpy buffers the copy itself when source and destination overlap

    def kept_copy_plan(self, src_key: int, src: int, dst_key: int, dst: int, shape: tuple[int, ...], itemsize: int,
                       src_strides: tuple[int, ...], dst_strides: tuple[int, ...]) -> tuple | None:
        """:meth:`copy_plan`, made once per distinct copy and kept with this memory."""
        key = ("copy", src_key, src, dst_key, dst, shape, itemsize, src_strides, dst_strides)
        try:
            return self._kept[key]
        except KeyError:
            got = self.copy_plan(src_key, src, dst_key, dst, shape, itemsize, src_strides, dst_strides)
            return self._keep(key, got)

    def kept_dense_views(self, key: int, addr: int, shape: tuple[int, ...],
                         dtype: np.dtype) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(:meth:`dense_view`, a read-only view of the same bytes), made once per distinct array and kept with
        this memory; (None, None) if its bytes lie over pages of several runs."""
        k = ("dense", key, addr, shape, dtype)
        try:
            return self._kept[k]
        except KeyError:
            view = self.dense_view(key, addr, shape, dtype)
            frozen = None
            if view is not None:
                frozen = view.view()
                frozen.flags.writeable = False
            return self._keep(k, (view, frozen))

    def kept(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, made once per ``key`` and kept with this memory, as its views are (a replay's program of
        them: :mod:`sim.engine.replay`; the :data:`MAX_KEPT_VALUES` used last); a key names what the value is made
        of."""
        values = self._values
        try:
            got = values[key]
        except KeyError:
            got = values[key] = make()
            while len(values) > MAX_KEPT_VALUES:
                values.popitem(last=False)
        else:
            values.move_to_end(key)
        return got

    def forget_kept(self) -> None:
        """Drop every view and value kept for runs made again (they are made afresh as needed)."""
        self._kept.clear()
        self._values.clear()

    def _keep(self, key: tuple, value: Any) -> Any:
        if len(self._kept) >= MAX_KEPT_VIEWS:  # a long sweep's plans: start afresh rather than grow
            self._kept.clear()
        self._kept[key] = value
        return value

    def dense_view(self, key: int, addr: int, shape: Sequence[int], dtype: np.dtype) -> np.ndarray | None:
        """A writable view of the dense array at ``addr`` (little-endian ``dtype``), None if its bytes lie over
        pages of several runs.

        Writing through it bypasses the journal: call :meth:`touch` on its bytes first.
        """
        dt = np.dtype(dtype)
        n = math.prod(shape) * dt.itemsize
        if n <= 0:
            return None
        got = self._run_made(key, addr, addr + n)
        if got is False:
            return None
        run, base = got
        return run[addr - base:addr - base + n].view(dt).reshape(tuple(shape))

    def touch(self, key: int, lo: int, hi: int) -> None:
        """Journal and mark as written ``[lo, hi)`` of store ``key`` before writing it through a view."""
        self._touch(key, lo, hi)

    def gather(self, key: int, addr: int, shape: Sequence[int], itemsize: int,
               strides: Sequence[int]) -> np.ndarray:
        """A dense uint8 array of shape ``(*shape, itemsize)`` read from a strided block."""
        lo, hi = block_span(addr, shape, itemsize, strides)
        if 0 in shape:
            return np.zeros(tuple(shape) + (itemsize,), np.uint8)
        run = self._run_of(key, lo, hi)
        if run is None:
            return np.zeros(tuple(shape) + (itemsize,), np.uint8)
        if run is not False:
            # One run of pages: copy exactly the block's bytes through a strided view.
            block = np.ascontiguousarray(self._block_view(run, addr, shape, itemsize, strides))
            return block.view(np.uint8).reshape(tuple(shape) + (itemsize,))
        if _loop_outer(shape, itemsize, hi - lo):
            out = np.empty(tuple(shape) + (itemsize,), np.uint8)
            for i in range(shape[0]):
                out[i] = self.gather(key, addr + i * strides[0], shape[1:], itemsize, strides[1:])
            return out
        raw = self.read_span(key, lo, hi - lo)
        view = np.lib.stride_tricks.as_strided(raw[addr - lo:], shape=tuple(shape) + (itemsize,),
                                               strides=tuple(strides) + (1,), writeable=False)
        return np.ascontiguousarray(view)

    def scatter(self, key: int, addr: int, shape: Sequence[int], itemsize: int,
                strides: Sequence[int], data: np.ndarray) -> None:
        """Write the dense uint8 ``data`` (shape ``(*shape, itemsize)``) to a strided block."""
        lo, hi = block_span(addr, shape, itemsize, strides)
        if 0 in shape:
            return
        if _is_dense(shape, itemsize, strides):
            self.write_span(key, lo, data.reshape(-1))
            return
        run = self._run_made(key, lo, hi)
        if run is not False:
            # One run of pages: write exactly the block's bytes through a strided view.
            self._touch(key, lo, hi)
            view = self._block_view(run, addr, shape, itemsize, strides)
            view[...] = np.ascontiguousarray(data).reshape(-1).view(view.dtype).reshape(view.shape)
            return
        if _loop_outer(shape, itemsize, hi - lo):
            block = data.reshape(tuple(shape) + (itemsize,))
            for i in range(shape[0]):
                self.scatter(key, addr + i * strides[0], shape[1:], itemsize, strides[1:], block[i])
            return
        raw = np.array(self.read_span(key, lo, hi - lo))  # copy: read-modify-write of the span
        view = np.lib.stride_tricks.as_strided(raw[addr - lo:], shape=tuple(shape) + (itemsize,),
                                               strides=tuple(strides) + (1,))
        view[...] = data.reshape(view.shape)
        self.write_span(key, lo, raw)

    # -- journal ------------------------------------------------------------------------------

    def begin(self) -> None:
        """Start recording the first write to every chunk, for :meth:`rollback`.  Journals nest: one begun while
        another records is committed into it or rolled back alone (a program's calls inside the program's)."""
        if self._journal is not None:
            self._enclosing.append(self._journal)
        self._journal = {}

    def commit(self) -> None:
        """Keep every write since the last :meth:`begin` (an enclosing journal can still roll them back)."""
        journal, self._journal = self._journal or {}, self._enclosing.pop() if self._enclosing else None
        outer = self._journal
        if outer is None:
            self._recycle(journal)
            return
        # The enclosing journal needs each chunk's bytes at its own begin: those this journal saved, for the
        # chunks it had not saved itself (it saved the others before, and keeps its own copy).
        spare: dict[tuple[int, int], np.ndarray | None] = {}
        for k, saved in journal.items():
            if k in outer:
                spare[k] = saved
            else:
                outer[k] = saved
        self._recycle(spare)

    def rollback(self) -> None:
        """Restore every chunk written since the last :meth:`begin` to its bytes at that moment."""
        journal, self._journal = self._journal or {}, self._enclosing.pop() if self._enclosing else None
        for (key, chunk), saved in journal.items():
            view = self._chunk(key, chunk)
            if saved is None:
                view[...] = 0
            else:
                view[...] = saved[:view.size]
        self._recycle(journal)

    def _recycle(self, journal: dict[tuple[int, int], np.ndarray | None]) -> None:
        """Keep the journal's buffers (up to SPARE_CHUNKS) for the next call's first writes."""
        spare = self._spare
        for saved in journal.values():
            if saved is not None and len(spare) < SPARE_CHUNKS:
                spare.append(saved)

    def snapshot(self) -> dict[tuple[int, int], bytes]:
        """Every written chunk's bytes that are not all zero (for tests that check memory is unchanged)."""
        out = {}
        for key, chunks in self._written.items():
            for chunk in sorted(chunks):
                view = self._chunk(key, chunk)
                if view.any():
                    out[(key, chunk)] = view.tobytes()
        return out

    # -- typed access ----------------------------------------------------------------------

    def write(self, addr: int, array: np.ndarray, core: int | None = None) -> None:
        """Store ``array``'s bytes (C order, little-endian) at ``addr``.

        The access is checked from the array's shape and dtype alone, before its data is copied or
        converted: an unmapped address or an absurd size (a broadcast view of 2**34 elements) is refused at
        once, without allocating anything.
        """
        if isinstance(array, np.ma.MaskedArray):
            raise MemoryFault("write: a masked array's mask cannot be stored (only its data would be)")
        arr = np.asarray(array)  # no copy for an ndarray (a broadcast view stays a view)
        size_bytes = math.prod(arr.shape) * arr.dtype.itemsize  # Python ints: no overflow, no data touched
        _, key = self.map.resolve(addr, size_bytes, core, what="write")
        data = np.ascontiguousarray(arr)
        if data.dtype.byteorder == ">":
            data = data.astype(data.dtype.newbyteorder("<"))
        self.write_span(key, int(addr), data.reshape(-1).view(np.uint8))

    def read(self, addr: int, shape: Sequence[int] | int, dtype: np.dtype | type | str,
             core: int | None = None) -> np.ndarray:
        """A fresh array of ``shape`` and ``dtype`` decoded from the bytes at ``addr``."""
        dt = checked_dtype(dtype).newbyteorder("<")
        shp = access_shape(shape, "read")
        n = math.prod(shp) * dt.itemsize  # Python ints: an absurd shape cannot wrap around
        _, key = self.map.resolve(addr, n, core, what="read")
        return np.array(self.read_span(key, int(addr), n)).view(dt).reshape(shp)

    def writable_view(self, addr: int, shape: Sequence[int], dtype: np.dtype,
                      core: int | None = None) -> np.ndarray | None:
        """A writable view of the dense array at ``addr`` (checked like :meth:`write`, journaled and marked
        written), for filling a large input in place; None when its bytes lie over pages of several runs (then
        :meth:`write`)."""
        dt = np.dtype(dtype).newbyteorder("<")
        n = math.prod(shape) * dt.itemsize
        _, key = self.map.resolve(addr, n, core, what="write")
        view = self.dense_view(key, int(addr), shape, dt)
        if view is not None:
            self._touch(key, int(addr), int(addr) + n)
        return view

    def reserve(self, addr: int, size_bytes: int, core: int | None = None) -> None:
        """Make the pages of ``[addr, addr + size_bytes)`` one run if none of them exists yet (address space
        only: the OS zero-fills them on first touch), so that the DMA blocks and views of a large output written
        a tile at a time stay single operations; nothing when some exist already.  Checked like :meth:`write`."""
        if size_bytes <= 0:
            return
        _, key = self.map.resolve(addr, size_bytes, core, what="write")
        if self._run_of(key, int(addr), int(addr) + size_bytes) is None:
            try:
                self._run_made(key, int(addr), int(addr) + size_bytes)
            except MemoryError:  # no room for it in the address space: its pages come one by one as they are written
                pass

    def read_only_view(self, addr: int, shape: Sequence[int] | int, dtype: np.dtype | type | str,
                       core: int | None = None) -> np.ndarray:
        """The array :meth:`read` gives, as a read-only view of simulated memory where its bytes lie in one run
        of pages (a copy otherwise), for saving a large output without a second copy of it."""
        dt = checked_dtype(dtype).newbyteorder("<")
        shp = access_shape(shape, "read")
        n = math.prod(shp) * dt.itemsize
        _, key = self.map.resolve(addr, n, core, what="read")
        out = self.read_span(key, int(addr), n).view(dt).reshape(shp)
        out.flags.writeable = False
        return out


def checked_dtype(dtype: object, what: str = "read") -> np.dtype:
    """``dtype`` as a plain numeric numpy dtype, else MemoryFault (None is refused: numpy reads it as float64)."""
    if dtype is None:
        raise MemoryFault(f"{what}: dtype is required (None would silently mean float64): name the element "
                          f"type, e.g. np.float32")
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except (TypeError, ValueError, SyntaxError):
        raise MemoryFault(f"{what}: {brief(dtype)} is not a dtype") from None
    if dt.kind not in "biuf" or dt.fields is not None or dt.subdtype is not None:
        raise MemoryFault(f"{what}: expected a plain numeric dtype, got {dt}")
    return dt


def _item_dtype(itemsize: int) -> np.dtype:
    """An unsigned word of ``itemsize`` bytes (1, 2, 4, 8), else raw bytes of that size."""
    return np.dtype(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else np.dtype(f"V{itemsize}")


def block_span(addr: int, shape: Sequence[int], itemsize: int, strides: Sequence[int]) -> tuple[int, int]:
    """``(lowest address, one past the highest byte)`` of a strided block (an empty block spans nothing)."""
    lo, hi = addr, addr + itemsize
    for n, s in zip(shape, strides):
        if n <= 0:
            return addr, addr
        reach = (n - 1) * s
        if reach >= 0:
            hi += reach
        else:
            lo += reach
    return lo, hi


def _loop_outer(shape: Sequence[int], itemsize: int, span_bytes: int) -> bool:
    """True when copying a block row by row beats copying the whole address span it is spread over.

    A thin slice of a large tensor (a few channels of every row) spans almost
    the whole tensor; one pass per outer row then moves far fewer bytes.  The
    per-row Python cost (about the time of copying 16 KiB) decides where the
    loop starts to pay.
    """
    if len(shape) < 2 or shape[0] < 2:
        return False
    data_bytes = itemsize
    for n in shape:
        data_bytes *= n
    return span_bytes > 4 * data_bytes and span_bytes > shape[0] * (16 << 10)


def _is_dense(shape: Sequence[int], itemsize: int, strides: Sequence[int]) -> bool:
    step = itemsize
    for n, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if n != 1 and s != step:
            return False
        step *= n
    return True
