"""The one memo: work that is a function of plan values (loops, transfers, a core's model) is remembered by value.

Plan values are hashable (:mod:`sim.model.plan`: a :class:`~sim.model.plan.Loop`'s mappings are
:class:`FrozenDict`, a compute's function a :class:`~sim.model.plan.TileFn` or a plain function hashed by
identity), so a pure function of them is memoised with :func:`memoized`: a bounded ``functools.lru_cache`` keyed
by the arguments' values and types (``True`` and ``1`` are different arguments: a loop builder keeps what it was
given).  Equal values met again -- the same loop stated by thousands of tiles, a plan lowered afresh for the same
call -- are worked out once, whichever object brings them.  :func:`clear` forgets everything (tests, and a user
replacing a kernel).

Frozen dataclasses in a hot path key by a hash worked out once per instance (:func:`cached_hash`): the engine asks
for a transfer's resolved ends once per transfer it runs, and hashing six tuples every time would cost more than
the memo saves.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

#: Entries each memoised function keeps at most (least recently used dropped first): a plan states a few dozen
#: loops and a few thousand distinct transfers; the bound keeps a long sweep's memory flat.
MEMO_SIZE = 1 << 15

_F = TypeVar("_F", bound=Callable[..., Any])
_MEMOISED: list[Any] = []  # every memoised function, for clear()


def memoized(fn: _F) -> _F:
    """``fn`` remembering its results by its arguments' values and types (bounded, least recently used first).

    Arguments must be hashable: a dict is passed as a :class:`FrozenDict` (:func:`memoized_frozen` does it).
    An exception is not remembered: the next call raises it again."""
    cached = functools.lru_cache(maxsize=MEMO_SIZE, typed=True)(fn)
    _MEMOISED.append(cached)
    return cached  # type: ignore[return-value]


def clear() -> None:
    """Forget every memoised result."""
    for fn in _MEMOISED:
        fn.cache_clear()


class FrozenDict(dict):
    """A dict that cannot change, hence hashable (its hash is worked out once).  Equal to a plain dict of the same
    items, so ``loop.issues == {"fmac": 2}`` holds; iterating it runs at a dict's speed (the timing module reads a
    loop's issues on every price)."""

    __slots__ = ("_hash",)

    def __hash__(self) -> int:  # type: ignore[override]
        try:
            return self._hash
        except AttributeError:
            self._hash: int = hash(frozenset(self.items()))
            return self._hash

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a FrozenDict cannot change: build a new one")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore

    def __reduce__(self) -> tuple:
        return (FrozenDict, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


def frozen(value: Any) -> Any:
    """``value`` with every dict in it (at any depth of dicts, lists and tuples) frozen: a hashable equal value."""
    if isinstance(value, FrozenDict):
        return value
    if isinstance(value, Mapping):
        return FrozenDict((k, frozen(v)) for k, v in value.items())
    if type(value) is list:
        return [frozen(v) for v in value]
    if type(value) is tuple:
        return tuple(frozen(v) for v in value)
    return value


def memoized_frozen(fn: _F) -> _F:
    """:func:`memoized`, with dict arguments frozen first (a loop builder takes ``epilogue={"vls": 2}`` as its callers
    always wrote it); a call with an argument that stays unhashable (a list, an array) runs ``fn`` afresh.
    ``__wrapped__`` is ``fn`` itself."""
    cached = memoized(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if any(type(v) is dict for v in kwargs.values()):
            kwargs = {k: frozen(v) for k, v in kwargs.items()}
        if any(type(v) is dict for v in args):
            args = tuple(frozen(v) for v in args)
        try:
            return cached(*args, **kwargs)
        except TypeError:
            try:
                hash((args, tuple(kwargs.values())))
            except TypeError:  # an unhashable argument: nothing to key the result by
                return fn(*args, **kwargs)
            raise
    return call  # type: ignore[return-value]


def _hashable(value: Any) -> Any:
    """A hashable stand-in of a field value for :func:`cached_hash` (mappings by their items)."""
    if isinstance(value, Mapping) and not isinstance(value, FrozenDict):
        return frozenset((k, _hashable(v)) for k, v in value.items())
    return value


#: Each class's field names (dataclasses.fields() builds its tuple anew on every call: too slow for a value
#: hashed once per plan object, thousands of them per plan).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def cached_hash(self: Any) -> int:
    """A frozen dataclass's value hash, worked out once and kept on the instance (outside its fields).  Assign it
    as ``__hash__`` in the class body (the dataclass then keeps it); fields that are mappings hash by items."""
    d = self.__dict__
    h = d.get("_value_hash")
    if h is None:
        cls = type(self)
        names = _FIELD_NAMES.get(cls)
        if names is None:
            names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
        values = [d[n] for n in names]
        h = d["_value_hash"] = hash((cls.__qualname__, *(
            v if not isinstance(v, Mapping) or isinstance(v, FrozenDict) else _hashable(v) for v in values)))
    return h


#: What a frozen plan value keeps outside its fields for this process only: its hash (another process has another
#: string-hash seed) and its last priced or resolved answer (kept with the objects it was for).
_PROCESS_LOCAL = ("_value_hash", "_price", "_ends", "_src_rows", "_dst_rows")


def state_without_hash(self: Any) -> dict[str, Any]:
    """A :func:`cached_hash` instance's pickled state: its ``__dict__`` without what it keeps for this process only
    (its hash, which another process would get wrong; its last answers).  Assign it as ``__getstate__`` beside
    ``__hash__``."""
    state = dict(self.__dict__)
    for name in _PROCESS_LOCAL:
        state.pop(name, None)
    return state
