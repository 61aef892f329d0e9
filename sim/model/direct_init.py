"""A cheaper ``__init__`` for the plan IR's frozen dataclasses, which a plan makes by the hundred thousand.

The ``__init__`` a frozen dataclass is given assigns each field through ``object.__setattr__`` (its own
``__setattr__`` refuses), about a third of a microsecond per field.  A plan's transfers, operands, computes and
tiles are made once per tile, and that cost was a third of a GEMM candidate's planning.  :func:`direct_init`
gives such a class an ``__init__`` that writes the same fields, in the same order and with the same defaults,
straight into the instance's ``__dict__``; everything else the dataclass made (equality, ``repr``, hashing,
``replace``, pickling, the refusal to change a field afterwards) stays as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

_C = TypeVar("_C", bound=type)


def direct_init(cls: _C) -> _C:
    """Give frozen dataclass ``cls`` an ``__init__`` that stores its fields in the instance's ``__dict__``.

    Only for a class its dataclass ``__init__`` does nothing else for: every field an ``__init__`` parameter,
    positional or keyword, with at most a plain default (no ``default_factory``, no ``kw_only``), and no
    ``__post_init__``; TypeError otherwise (a class this would change the meaning of)."""
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"direct_init: {cls.__name__} is not a frozen dataclass")
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__"):
        raise TypeError(f"direct_init: {cls.__name__} has a __post_init__ or __slots__")
    params: list[str] = []
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"direct_init: field {cls.__name__}.{f.name} is not a plain parameter")
        if f.default is dataclasses.MISSING:
            if defaults:
                raise TypeError(f"direct_init: {cls.__name__}.{f.name} without a default follows one with")
            params.append(f.name)
        else:
            defaults[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    names = [f.name for f in dataclasses.fields(cls)]
    body = "".join(f"    d[{name!r}] = {name}\n" for name in names) or "    pass\n"
    source = f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n{body}"
    namespace: dict[str, Any] = {}
    exec(source, dict(defaults), namespace)  # noqa: S102 (source made from the field names above only)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = f"Make a {cls.__name__} (its fields written directly: sim.model.direct_init)."
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
