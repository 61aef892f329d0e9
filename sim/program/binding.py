"""A program's calls as kernel calls: tensor names in their arguments turned into addresses, and bound.

A pointer argument (a kernel's ``in_ptr`` or ``out_ptr``, a ``params`` argument and the entries of a ``params``
list) may name a tensor instead of giving an address; every other argument is passed as it is.  Which tensors a
call names gives their lifetimes (:class:`sim.program.planner.Lifetime`) before any address is known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sim.errors import ConfigError, SimError, brief, renamed
from sim.model.call import BoundCall
from sim.program.planner import Lifetime
from sim.program.schema import CallSpec, Program
from sim.simulator import Simulator, check_argument_names, find_symbol

#: The argument kinds whose values may name a tensor (sim.model.call.ARG_KINDS).
POINTER_KINDS = ("in_ptr", "out_ptr", "params")


def _where(program: Program, index: int, call: CallSpec) -> str:
    return f"{program.path}: calls[{index}] ('{call.name}', {call.symbol})"


def arg_kinds(program: Program, index: int) -> dict[str, str]:
    """The kinds of call ``index``'s kernel arguments (KernelArgError naming the call for an unknown symbol)."""
    call = program.calls[index]
    try:
        return {a.name: a.kind for a in find_symbol(call.symbol).kernel.args}
    except SimError as e:
        raise renamed(e, f"{_where(program, index, call)}: {e}") from None


def _named(value: Any, kind: str | None) -> list[str]:
    """The tensor names an argument value holds (strings where a pointer goes)."""
    if kind not in POINTER_KINDS:
        return []
    if isinstance(value, str):
        return [value]
    if kind == "params" and isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def named_tensors(program: Program, index: int, kinds: Mapping[str, str]) -> list[str]:
    """The tensors call ``index`` names, in argument order (each once); ConfigError for a name no tensor has."""
    call = program.calls[index]
    known = {t.name for t in program.tensors}
    out: list[str] = []
    for arg, value in call.args.items():
        for name in _named(value, kinds.get(arg)):
            if name not in known:
                raise ConfigError(f"{program.path}: calls[{index}].args.{arg}: {brief(name)} names no tensor of the "
                                  f"program (tensors: {', '.join(sorted(known)) or 'none'})")
            if name not in out:
                out.append(name)
    return out


def tensor_args(program: Program, index: int, kinds: Mapping[str, str]) -> dict[str, str]:
    """Call ``index``'s pointer arguments that name a tensor: argument name -> tensor (a kernel's buffer of that
    name is the tensor, whatever else shares its addresses: another core's copy, a dead tensor's bytes)."""
    return {arg: value for arg, value in program.calls[index].args.items()
            if isinstance(value, str) and kinds.get(arg) in POINTER_KINDS}


def params_tensors(program: Program, index: int, kinds: Mapping[str, str], addrs: Mapping[str, int],
                   call: BoundCall) -> dict[str, str]:
    """Call ``index``'s buffers (bound as ``call``) whose address an entry of a ``params`` list gave by naming a
    tensor: buffer name -> that tensor.  A kernel names the buffers of its pointer table itself, so a buffer is
    matched by the address it was given (the tensor's own), as a pointer argument's buffer is by its name."""
    by_addr = {addrs[v]: v for arg, value in program.calls[index].args.items()
               if kinds.get(arg) == "params" and isinstance(value, list) for v in value if isinstance(v, str)}
    return {b.name: by_addr[b.addr] for b in call.buffers if b.addr in by_addr}


def lifetimes(program: Program, named: Sequence[Sequence[str]]) -> dict[str, Lifetime]:
    """Each tensor's lifetime from the steps that name it: data placed (step 0), the calls (``named[i]``, step
    ``i + 1``), outputs read back (the last step).  A tensor nothing names lives the whole program."""
    last_step = len(program.calls) + 1
    steps: dict[str, list[int]] = {t.name: [] for t in program.tensors}
    for e in program.data:
        if e.tensor is not None:
            steps[e.tensor].append(0)
    for i, names in enumerate(named):
        for name in names:
            steps[name].append(i + 1)
    for e in program.outputs:
        if e.tensor is not None:
            steps[e.tensor].append(last_step)
    return {name: Lifetime(min(s), max(s)) if s else Lifetime(0, last_step) for name, s in steps.items()}


def resolved_args(program: Program, index: int, kinds: Mapping[str, str], addrs: Mapping[str, int]) -> dict:
    """Call ``index``'s arguments with every tensor name replaced by the tensor's address (``addrs``)."""
    out: dict[str, Any] = {}
    for arg, value in program.calls[index].args.items():
        kind = kinds.get(arg)
        if kind in POINTER_KINDS and isinstance(value, str):
            out[arg] = addrs[value]
        elif kind == "params" and isinstance(value, list):
            out[arg] = [addrs[v] if isinstance(v, str) else v for v in value]
        else:
            out[arg] = value
    return out


def bind_call(m: Simulator, program: Program, index: int, args: Mapping[str, Any]) -> BoundCall:
    """Call ``index`` bound on ``m`` with ``args`` (no layout check); a refusal names the call."""
    call = program.calls[index]
    try:
        check_argument_names(args, f"{program.path}: calls[{index}].args")
        return m.bind(call.symbol, **args)
    except SimError as e:
        err = type(e)(f"{_where(program, index, call)}: {e}")
        err.__dict__.update(e.__dict__)  # a LayoutError keeps its violations
        raise err from None


__all__ = ["POINTER_KINDS", "arg_kinds", "named_tensors", "tensor_args", "params_tensors", "lifetimes", "resolved_args",
           "bind_call"]
