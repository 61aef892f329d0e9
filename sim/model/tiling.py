"""A kernel's tiling space: the keys a tiling sets, the values a search tries, and what must hold for it to fit.

The kernel declares the space of one call; the tuner (:mod:`sim.tuning`) owns the search: it completes the
caller's keys (a partial tiling fixes those it names), drops what does not fit, prices the rest with the cost
model and picks.  A kernel never compares two tilings itself::

    space = TilingSpace(
        ChoiceKey("split", ("channels", "rows"), "how the work is split over the cores"),
        IntKey("channel_block", 1, channels, "channels per tile", only=("split", "channels"),
               values=lambda t: (widest, default)),
        fit=check_fit,          # DoesNotFit when a full tiling cannot fit (cheap: no plan built)
        tiles=count_tiles)      # the tiles a full tiling plans (cheap): the plan-size budget and the search's order

Keys come in the order the search completes them: a key's ``values`` may be a function of the keys before it
(and of every key the caller fixed).  ``values`` lists the candidates the search tries, the kernel's preferred
first; a caller may give any value of ``lo..hi`` (or of ``choices``).  A key with ``only = (other, choice)``
applies to that choice of ``other`` only.  A key of ``scope`` ``compute`` changes nothing but the loops of a
tile's compute (a micro-kernel's shape): the search leaves it out of the tilings it plans, and the kernel asks
its plan context for the cost model's pick per tile (``PlanContext.cheapest_loops``) unless the caller fixed it.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.errors import KernelArgError, PlanError, brief, in_kernel_code

#: The candidate values of a key: a sequence, or a function of the keys already chosen.
Values = Sequence[Any] | Callable[[Mapping[str, Any]], Iterable[Any]] | None
#: Where a key acts: ``plan`` (the tiles, their transfers and staging) or ``compute`` (a compute's loops only).
SCOPES = ("plan", "compute")


#: Most candidate values one key may list for the search (as many as the candidates a kernel's ``tilings()`` may).
MAX_KEY_VALUES = 1024


def _space_error(detail: str) -> PlanError:
    """The ``tiling-space`` PlanError: a kernel's tiling space holds something the search cannot use."""
    return PlanError("tiling-space", detail)


def _values_of(values: Values, chosen: Mapping[str, Any], name: str) -> list[Any]:
    """The values key ``name`` lists given the keys ``chosen``: at most :data:`MAX_KEY_VALUES` (an endless
    iterator is cut there and refused, not exhausted)."""
    if values is None:
        return []
    what = f"values of tiling key {name!r}"
    got = in_kernel_code(None, what, values, dict(chosen)) if callable(values) else values  # (a copy: see _checked)
    if not isinstance(got, Iterable) or isinstance(got, (str, bytes, Mapping)):  # (a str is no list of its letters)
        raise _space_error(f"tiling key {name!r}: its values are {brief(got)}, not a list of values")
    # (a generator's own exception, raised as it is read, is the kernel's code failing)
    out = in_kernel_code(None, what, lambda: list(itertools.islice(got, MAX_KEY_VALUES + 1)))
    if len(out) > MAX_KEY_VALUES:
        raise _space_error(f"tiling key {name!r} lists more than {MAX_KEY_VALUES} values for the search")
    return out


def _integer(value: Any) -> int | None:
    """``value`` as an int if it is an integer (a Python or numpy int, or a float with an integer value), else
    None (a bool, NaN, an infinity, a string...)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


@dataclass(frozen=True)
class IntKey:
    """An integer key in ``lo..hi``; ``values``: the ones the search tries (preferred first, out-of-range ones
    dropped); ``only`` = (another key, one of its choices): the key applies to that choice only, and giving it
    without that key chooses it."""

    name: str
    lo: int
    hi: int
    doc: str = ""
    only: tuple[str, str] | None = None
    values: Values = None
    scope: str = "plan"

    def check(self, value: Any) -> int:
        """``value`` as an int in range; else KernelArgError naming ``tiling.<name>``."""
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or not self.lo <= value <= self.hi:
            raise KernelArgError(f"argument 'tiling.{self.name}': expected an integer in {self.lo}..{self.hi}, "
                                 f"got {brief(value)}")
        return int(value)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or _integer(self.lo) is None or _integer(self.hi) is None:
            raise _space_error(f"an IntKey needs a name and integer bounds lo and hi, got IntKey({brief(self.name)}, "
                               f"{brief(self.lo)}, {brief(self.hi)})")
        if self.lo > self.hi:
            raise _space_error(f"tiling key {self.name!r}: its range {self.lo}..{self.hi} holds no value (lo > hi)")
        _check_declared(self.name, self.values, self.scope, self.only)

    def candidates(self, chosen: Mapping[str, Any]) -> list[int]:
        """The values the search tries given the keys ``chosen`` so far: in range, each once, in order."""
        out: list[int] = []
        for given in _values_of(self.values, chosen, self.name):
            v = _integer(given)
            if v is None:
                raise _space_error(f"tiling key {self.name!r} lists {brief(given)}, not an integer")
            if self.lo <= v <= self.hi and v not in out:
                out.append(v)
        return out

    def takes(self) -> str:
        """What the key takes, in words."""
        return f"{self.lo}..{self.hi}"


@dataclass(frozen=True)
class ChoiceKey:
    """A key taking one of ``choices`` (exact strings); ``values``: those the search tries (default: all)."""

    name: str
    choices: tuple[str, ...]
    doc: str = ""
    only: tuple[str, str] | None = None
    values: Values = None
    scope: str = "plan"

    def check(self, value: Any) -> str:
        """``value`` if it is one of the choices; else KernelArgError naming ``tiling.<name>``."""
        if not isinstance(value, str) or value not in self.choices:
            raise KernelArgError(f"argument 'tiling.{self.name}': expected one of {', '.join(self.choices)}, "
                                 f"got {brief(value)}")
        return str(value)  # (a numpy str is kept as the str it is: the tiling prints and caches as any other)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not isinstance(self.choices, tuple) or not self.choices \
                or not all(isinstance(c, str) for c in self.choices):
            raise _space_error(f"a ChoiceKey needs a name and a non-empty tuple of str choices, got "
                               f"ChoiceKey({brief(self.name)}, {brief(self.choices)})")
        _check_declared(self.name, self.values, self.scope, self.only)

    def candidates(self, chosen: Mapping[str, Any]) -> list[str]:
        """The choices the search tries given the keys ``chosen`` so far, each once, in order."""
        got = self.choices if self.values is None else _values_of(self.values, chosen, self.name)
        out: list[str] = []
        for v in got:
            if v in self.choices and v not in out:
                out.append(str(v))  # (a numpy str is the same choice, kept as the plain one: printed, cached alike)
        return out

    def takes(self) -> str:
        """What the key takes, in words."""
        return " | ".join(self.choices)


Key = IntKey | ChoiceKey


def _check_declared(name: str, values: Any, scope: Any, only: Any) -> None:
    """What every key declares: ``values`` None, a sequence or a function; a known ``scope``; ``only`` None or
    (another key, one of its choices)."""
    if values is not None and not callable(values) and (isinstance(values, (str, bytes, Mapping))
                                                         or not isinstance(values, Iterable)):
        raise _space_error(f"tiling key {name!r}: values must be a sequence of values or a function of the keys "
                           f"chosen, got {brief(values)}")
    if scope not in SCOPES:
        raise _space_error(f"tiling key {name!r}: scope must be one of {', '.join(SCOPES)}, got {brief(scope)}")
    if only is not None and not (isinstance(only, tuple) and len(only) == 2 and all(isinstance(x, str) for x in only)):
        raise _space_error(f"tiling key {name!r}: only must be (another key, one of its choices), got {brief(only)}")


def _kernel_code(fn: Callable[[dict[str, Any]], Any], what: str) -> Callable[[dict[str, Any]], Any]:
    """``fn`` whose own exceptions (not dspsim's: DoesNotFit, KernelArgError) are KernelCodeErrors naming ``what``."""
    def wrapped(tiling: dict[str, Any]) -> Any:
        return in_kernel_code(None, what, fn, dict(tiling))  # (a copy: see _checked)
    return wrapped


def _checked(fn: Callable[[dict[str, Any]], Any], what: str, number: Callable[[Any], Any]) -> Callable[..., Any]:
    """``fn`` whose result ``number`` checks (None: refused with the ``tiling-space`` PlanError naming ``what``); an
    exception of its own is a :class:`~sim.errors.KernelCodeError`."""
    def checked(tiling: dict[str, Any]) -> Any:
        # A copy: a callback that changed the search's own tiling would change what the search plans and picks.
        got = in_kernel_code(None, f"tiling space's {what}", fn, dict(tiling))
        value = number(got)
        if value is None:
            raise _space_error(f"the tiling space's {what} gave {brief(got)} for {brief(tiling, 160)}")
        return value
    return checked


#: A count of tiles past this is taken as this (a tiling beyond any budget; a number of thousands of digits would
#: not even print).
_MOST_TILES = 1 << 62


def _count(value: Any) -> int | None:
    got = _integer(value)
    return min(got, _MOST_TILES) if got is not None and got >= 0 else None


def _cycles(value: Any) -> float | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        return None  # (a Fraction of cycles is a number: numbers.Real)
    try:
        got = float(value)
    except OverflowError:  # (an int beyond the floats: a bound no run beats, if positive)
        return math.inf if isinstance(value, int) and value > 0 else None
    return got if got >= 0 else None  # (NaN compares false: refused; inf is a bound no run beats)


class TilingSpace:
    """The keys of a kernel's tiling for one call, the values the search tries, and the cheap checks a full
    tiling goes through before it is planned.

    ``fit(tiling)`` raises :class:`~sim.model.plan.DoesNotFit` (or KernelArgError for keys that do not go
    together) when a full tiling cannot fit; it must be cheap (no plan built), and a tiling it passes may still
    fail to plan (the search drops it then too).  ``tiles(tiling)`` says how many tiles the tiling plans (an
    upper bound is fine): the search refuses a tiling beyond the plan-size budget before planning it, and
    prices candidates fewest tiles first.  ``bound(tiling)`` gives cycles no run of the tiling's plan can beat,
    worked out from the tiling alone (cheap: no plan built; never more than the plan's own lower bound,
    :meth:`sim.planning.CallPlanner.lower_bound`): the search plans a round's tilings lowest bound first, one at
    a time, and leaves unplanned those whose bound is beyond the tolerance of the cheapest found so far.
    ``starts``: partial tilings naming algorithms a step of one key cannot reach (their tilings differ from the
    others in two choices at once): once its climb ends, the search also prices the tiling of each nearest the
    climb's end, and climbs on from it if it is the cheapest.  ``alternatives``: partial tilings naming
    formulations whose other keys mean something else (a tiling nearest the climb's end says little of them):
    the search climbs from each one's preferred tiling too, as far as from the space's first, and picks among
    everything the climbs priced.
    """

    def __init__(self, *keys: Key, fit: Callable[[dict[str, Any]], None] | None = None,
                 tiles: Callable[[dict[str, Any]], int] | None = None,
                 bound: Callable[[dict[str, Any]], float] | None = None,
                 starts: Sequence[Mapping[str, Any]] = (), alternatives: Sequence[Mapping[str, Any]] = ()):
        self.keys: dict[str, Key] = {}
        for k in keys:
            if not isinstance(k, (IntKey, ChoiceKey)):
                raise _space_error(f"a tiling space's keys are IntKey and ChoiceKey, got {brief(k)}")
            if k.name in self.keys:
                raise _space_error(f"tiling key {k.name!r} declared twice")
            self.keys[k.name] = k
        for name, fn in (("fit", fit), ("tiles", tiles), ("bound", bound)):
            if fn is not None and not callable(fn):
                raise _space_error(f"the tiling space's {name} must be a function of a tiling, got {brief(fn)}")
        self.fit = None if fit is None else _kernel_code(fit, "tiling space's fit()")
        self.tiles = None if tiles is None else _checked(tiles, "tiles()", _count)
        self.bound = None if bound is None else _checked(bound, "bound()", _cycles)
        for k in self.keys.values():
            if k.only is None:
                continue
            # (keys are completed in order: an only on a key declared later, or on no key, would never apply)
            other = self.keys.get(k.only[0])
            if not isinstance(other, ChoiceKey) or k.only[1] not in other.choices \
                    or list(self.keys).index(k.only[0]) > list(self.keys).index(k.name):
                raise _space_error(f"tiling key {k.name!r}: only={k.only!r} must name a ChoiceKey declared before it "
                                   f"and one of its choices (the keys: {', '.join(self.keys)})")
        self.starts = self._partials("starts", starts)
        self.alternatives = self._partials("alternatives", alternatives)
        for a in self.alternatives:
            if any(not isinstance(self.keys[k], ChoiceKey) for k in a):
                raise _space_error(f"the tiling space's alternatives entry {brief(a)}: a formulation names choice "
                                   f"keys only (an integer key there would be held at that value in every climb)")

    def _partials(self, what: str, entries: Any) -> tuple[dict[str, Any], ...]:
        """The space's ``starts`` or ``alternatives``: a sequence of partial tilings, each checked as a caller's
        would be and kept in its checked form (a key of one choice of another sets that choice); the space's own
        error naming the entry otherwise."""
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Iterable):
            raise _space_error(f"the tiling space's {what} must be a sequence of partial tilings (dicts), got "
                               f"{brief(entries)}")
        out = []
        for partial in entries:
            if not isinstance(partial, Mapping) or any(v is None for v in partial.values()):
                raise _space_error(f"the tiling space's {what} entry {brief(partial)}: not a partial tiling (a dict "
                                   f"of keys to values, none of them None)")
            try:
                self.check_names(partial)
                checked = self.check(partial)
            except KernelArgError as e:  # (the kernel's own partial tiling: the space is wrong, not the caller)
                raise _space_error(f"the tiling space's {what} entry {brief(partial)}: "
                                   f"{str(e).removeprefix('argument ')}") from None
            out.append({k: v for k, v in checked.items() if v is not None})
        return tuple(out)

    # -- checking a caller's tiling -------------------------------------------------------------------

    def parse(self, ctx: Any) -> dict[str, Any]:
        """The tiling of a plan context (``ctx.tiling``) checked: every key, None where it has none."""
        return self.check(ctx.tiling or {})

    def check(self, tiling: Mapping[str, Any]) -> dict[str, Any]:
        """``tiling`` checked against the space: every key (None where absent), unknown keys and bad values
        refused naming the key; a key that applies to one choice of another sets that choice."""
        self.check_names(tiling)
        out = {name: (k.check(tiling[name]) if name in tiling and tiling[name] is not None else None)
               for name, k in self.keys.items()}
        for name, k in self.keys.items():
            if k.only is None or out[name] is None:
                continue
            other, choice = k.only
            if out[other] is None:
                out[other] = choice  # the key says which choice it belongs to
            elif out[other] != choice:
                raise KernelArgError(f"argument 'tiling.{name}': applies to {other} {choice!r} only, not to "
                                     f"{out[other]!r}")
        return out

    def check_names(self, tiling: Mapping[str, Any]) -> None:
        """Refuse a key of ``tiling`` the space does not have, naming the keys it has."""
        for key in tiling:
            if key not in self.keys:
                raise KernelArgError(f"argument 'tiling': unknown key {brief(key)} (this kernel takes: "
                                     f"{', '.join(self.keys)})")

    def fixed(self, tiling: Mapping[str, Any] | None) -> dict[str, Any]:
        """The keys a caller's (possibly partial) ``tiling`` fixes, checked, in the space's order (a key that
        belongs to one choice of another fixes that choice too)."""
        return {k: v for k, v in self.check(tiling or {}).items() if v is not None}

    def applies(self, key: Key, tiling: Mapping[str, Any]) -> bool:
        """Whether ``key`` is part of a tiling whose other keys are ``tiling``."""
        return key.only is None or tiling.get(key.only[0]) == key.only[1]

    def canonical(self, tiling: Mapping[str, Any]) -> dict[str, Any]:
        """``tiling``'s keys in the space's order (a tiling read back from a file or a cache prints, hashes and
        traces the same as a fresh one)."""
        return {k: tiling[k] for k in self.keys if k in tiling}

    def is_complete(self, tiling: Mapping[str, Any]) -> bool:
        """Whether ``tiling`` sets every plan-scope key that applies to it."""
        return all(k.name in tiling for k in self.keys.values() if k.scope == "plan" and self.applies(k, tiling))

    def implied(self, fixed: dict[str, Any]) -> dict[str, Any]:
        """``fixed`` with the keys it leaves out set where the space allows them one value only (a tiling written
        before its kernel gained a key that has one value for this call is still a full one); ``fixed`` itself
        when it is complete or some key it leaves out has a choice."""
        if self.is_complete(fixed):
            return fixed
        only, more = self.completions(fixed, 1)
        return only[0] if only and not more else fixed

    # -- what the search goes through -----------------------------------------------------------------

    def completions(self, fixed: Mapping[str, Any], limit: int) -> tuple[list[dict[str, Any]], bool]:
        """The full tilings (plan-scope keys; ``fixed`` keys as given) in the kernel's order of preference, at
        most ``limit``; and whether there were more."""
        out: list[dict[str, Any]] = []
        it = self._complete(list(self.keys.values()), dict(fixed))
        for t in itertools.islice(it, limit + 1):
            out.append(self.canonical(t))
        return out[:limit], len(out) > limit

    def _complete(self, keys: list[Key], chosen: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if not keys:
            yield dict(chosen)
            return
        key, rest = keys[0], keys[1:]
        if key.name in chosen or key.scope != "plan" or not self.applies(key, chosen):
            yield from self._complete(rest, chosen)
            return
        for v in key.candidates(chosen):
            chosen[key.name] = v
            yield from self._complete(rest, chosen)
        chosen.pop(key.name, None)

    def offers(self, tiling: Mapping[str, Any], fixed: Mapping[str, Any]) -> bool:
        """Whether ``tiling`` is one of the completions of ``fixed`` (:meth:`completions`): each plan-scope key that
        applies and ``fixed`` leaves out set to one of the values the space lists for it, given the keys before it
        (a choice remembered from a search of another space, which the kernel would no longer offer, is not)."""
        chosen = dict(fixed)
        for key in self.keys.values():
            if key.name in chosen or key.scope != "plan" or not self.applies(key, chosen):
                continue
            if key.name not in tiling or tiling[key.name] not in key.candidates(chosen):
                return False
            chosen[key.name] = tiling[key.name]
        return True

    def candidate(self, **values: Any) -> dict[str, Any]:
        """A tiling of the given keys (None values left out), checked like a caller's."""
        given = {k: v for k, v in values.items() if v is not None}
        self.check(given)
        return self.canonical(given)

    def describe(self) -> str:
        """One line per key: its name, what it takes, and its doc."""
        lines = []
        for k in self.keys.values():
            when = f" (with {k.only[0]} {k.only[1]})" if k.only else ""
            scope = " [per tile: the cost model prices each compute's loops]" if k.scope == "compute" else ""
            lines.append(f"{k.name}: {k.takes()}{when}" + (f" -- {k.doc}" if k.doc else "") + scope)
        return "\n".join(lines)


def union(key: ChoiceKey, spaces: Mapping[str, TilingSpace],
          alternatives: Sequence[Mapping[str, Any]] = ()) -> TilingSpace:
    """One space of a call's several formulations, each a space of its own: ``key`` chooses the formulation
    (``key.choices`` name ``spaces``; its ``values`` say which the search tries, preferred first), and every other
    key means what the chosen formulation's space says.

    A key several formulations have is one key of the union: its range or choices theirs together (a caller's
    value is checked against the chosen formulation's own when the union's ``fit``, ``tiles`` or ``bound`` runs),
    its candidates the chosen formulation's.  A key one formulation has applies to that choice of ``key`` only (it
    cannot then have an ``only`` of its own).  ``fit`` is the chosen formulation's, given the tiling with its own
    keys only; so are ``tiles`` and ``bound`` where every formulation has them; ``starts``: each formulation's own
    (with its choice of ``key``); ``alternatives``: the formulations (choices of ``key``) the search climbs from as
    well."""
    if set(key.choices) != set(spaces):
        raise ValueError(f"tiling key {key.name!r}: its choices {key.choices} must name the spaces {tuple(spaces)}")
    names: list[str] = []
    for space in spaces.values():
        if key.name in space.keys:
            raise ValueError(f"tiling key {key.name!r} is a key of a formulation too")
        names += [name for name in space.keys if name not in names]
    merged: list[Key] = [key]
    for name in names:
        having = [(choice, space.keys[name]) for choice, space in spaces.items() if name in space.keys]
        first = having[0][1]
        if any(type(k) is not type(first) or k.scope != first.scope or k.only != first.only for _, k in having):
            raise ValueError(f"tiling key {name!r}: the formulations declare it differently (type, scope or only)")
        only = first.only
        if len(having) < len(spaces):
            if len(having) > 1 or only is not None:
                raise ValueError(f"tiling key {name!r}: a key some formulations lack must belong to one, with no "
                                 f"'only' of its own")
            only = (key.name, having[0][0])
        values = _chosen_candidates(key.name, name, spaces)
        if isinstance(first, IntKey):
            ints = [k for _, k in having if isinstance(k, IntKey)]
            merged.append(IntKey(name, min(k.lo for k in ints), max(k.hi for k in ints), first.doc, only, values,
                                 first.scope))
        else:
            choices = tuple(dict.fromkeys(c for _, k in having if isinstance(k, ChoiceKey) for c in k.choices))
            merged.append(ChoiceKey(name, choices, first.doc, only, values, first.scope))

    def own(tiling: Mapping[str, Any]) -> tuple[TilingSpace, dict[str, Any]]:
        """The chosen formulation's space and ``tiling``'s keys of it, checked against its own ranges (the union's
        are theirs together): KernelArgError naming ``tiling.<key>``."""
        space = spaces[tiling[key.name]]
        t = {k: v for k, v in tiling.items() if k in space.keys}
        try:
            space.check(t)
        except KernelArgError as e:  # (the union's range is every formulation's: name the one it is not in)
            raise KernelArgError(f"{e} with {key.name} {tiling[key.name]}") from None
        return space, t

    def fit(tiling: dict[str, Any]) -> None:
        space, t = own(tiling)
        if space.fit is not None:
            space.fit(t)

    def tiles(tiling: dict[str, Any]) -> int:
        space, t = own(tiling)
        assert space.tiles is not None
        return space.tiles(t)

    def bound(tiling: dict[str, Any]) -> float:
        space, t = own(tiling)
        assert space.bound is not None
        return space.bound(t)

    all_starts = [{key.name: choice, **start} for choice, space in spaces.items() for start in space.starts]
    return TilingSpace(*merged, fit=fit,
                       tiles=tiles if all(s.tiles is not None for s in spaces.values()) else None,
                       bound=bound if all(s.bound is not None for s in spaces.values()) else None,
                       starts=all_starts, alternatives=alternatives)


def _chosen_candidates(choice_key: str, name: str,
                       spaces: Mapping[str, TilingSpace]) -> Callable[[Mapping[str, Any]], list[Any]]:
    """The candidates of key ``name`` in the space ``choice_key`` chooses (none where that space lacks the key)."""
    def values(chosen: Mapping[str, Any]) -> list[Any]:
        k = spaces[chosen[choice_key]].keys.get(name)
        return k.candidates(chosen) if k is not None else []
    return values
