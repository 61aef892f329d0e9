"""The metadata of a trace read back, checked: the values ``trace summary|plot|diff`` compute with.

A trace file is anyone's text.  Each metadata key the tools use is checked for its type and range (a cycle
count in ``[0, MAX_TRACE_CYCLE]``, a clock a chip could have, cores a chip could have, finite bandwidths);
keys the tools do not use pass as they are.  A bad value raises :class:`TraceFileError` naming the file and
the key, on one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.errors import SimError, brief
from sim.files.fields import bounded_float, bounded_int
from sim.model.target_loader import MAX_CLOCK_HZ, MAX_CORES, MAX_RATE

#: Latest cycle a trace may name: beyond it a float (Perfetto's timestamps, the plots) no longer holds
#: every cycle; at 1 GHz it is more than three months.
MAX_TRACE_CYCLE = 1 << 53

_TEXT_KEYS = ("target", "symbol", "precision", "bound_by", "limited_by", "precision_note", "kernel_origin")


class TraceFileError(SimError):
    """A trace file that cannot be read back: the message names the file and what is wrong."""


def _fail(path: Path, key: str, expected: str, value: Any) -> TraceFileError:
    return TraceFileError(f"{path}: metadata.{key}: expected {expected}, got {brief(value, 60)}")


def _cores(value: Any, path: Path) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_CORES:
        raise _fail(path, "cores", f"a list of at most {MAX_CORES} cores", value)
    return [bounded_int(c, f"{path}: metadata.cores[{i}]", TraceFileError, 0, MAX_CORES - 1)
            for i, c in enumerate(value)]


def _regions(value: Any, path: Path) -> dict[str, dict]:
    if not isinstance(value, dict):
        raise _fail(path, "regions", "an object of regions by name", value)
    out: dict[str, dict] = {}
    for name, facts in value.items():
        key = f"regions.{brief(name, 40)[1:-1]}"
        if not isinstance(facts, dict):
            raise _fail(path, key, "an object (kind, role, bandwidth, latency)", facts)
        facts = dict(facts)
        for text in ("kind", "role"):
            if facts.get(text) is not None and not isinstance(facts[text], str):
                raise _fail(path, f"{key}.{text}", "text", facts[text])
        if facts.get("bandwidth_bytes_per_cycle") is not None:
            facts["bandwidth_bytes_per_cycle"] = bounded_float(
                facts["bandwidth_bytes_per_cycle"], f"{path}: metadata.{key}.bandwidth_bytes_per_cycle",
                TraceFileError, 0.0, MAX_RATE)
        if facts.get("latency_cycles") is not None:
            facts["latency_cycles"] = bounded_int(facts["latency_cycles"], f"{path}: metadata.{key}.latency_cycles",
                                                  TraceFileError, 0, MAX_TRACE_CYCLE)
        out[name] = facts
    return out


def _tiling(value: Any, path: Path) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("tiling"), (dict, type(None))) \
            or not isinstance(value.get("source"), (str, type(None))):
        raise _fail(path, "tiling", "an object with a 'tiling' object and a 'source' text", value)
    return value


#: Most calls a program's trace may list.
MAX_TRACE_CALLS = 4096


def _calls(value: Any, path: Path) -> list[dict]:
    """A program trace's ``calls``: per call its name and symbol (text), start and cycles (bounded ints)."""
    if not isinstance(value, list) or len(value) > MAX_TRACE_CALLS:
        raise _fail(path, "calls", f"a list of at most {MAX_TRACE_CALLS} calls", value)
    out = []
    for i, call in enumerate(value):
        key = f"calls[{i}]"
        if not isinstance(call, dict):
            raise _fail(path, key, "an object (name, symbol, start_cycle, cycles ...)", call)
        call = dict(call)
        for text in ("name", "symbol", "bound_by", "limited_by"):
            if not isinstance(call.get(text), (str, type(None))):
                raise _fail(path, f"{key}.{text}", "text", call[text])
        if not isinstance(call.get("name"), str):
            raise _fail(path, f"{key}.name", "text", call.get("name"))
        for cyc in ("start_cycle", "cycles"):
            call[cyc] = bounded_int(call.get(cyc), f"{path}: metadata.{key}.{cyc}", TraceFileError, 0,
                                    MAX_TRACE_CYCLE)
        if call.get("roofline_cycles") is not None:
            call["roofline_cycles"] = bounded_float(call["roofline_cycles"], f"{path}: metadata.{key}.roofline_cycles",
                                                    TraceFileError, 0.0, float(MAX_TRACE_CYCLE))
        out.append(call)
    return out


def checked_metadata(meta: Mapping[str, Any], path: Path) -> dict:
    """A copy of a trace's metadata with every key the tools use checked (see the module docstring)."""
    out = dict(meta)
    for key in _TEXT_KEYS:
        if out.get(key) is not None and not isinstance(out[key], str):
            raise _fail(path, key, "text", out[key])
    if out.get("cycles") is not None:
        out["cycles"] = bounded_int(out["cycles"], f"{path}: metadata.cycles", TraceFileError, 0, MAX_TRACE_CYCLE)
    if out.get("clock_hz") is not None:
        out["clock_hz"] = bounded_int(out["clock_hz"], f"{path}: metadata.clock_hz", TraceFileError, 1, MAX_CLOCK_HZ)
    if out.get("cores") is not None:
        out["cores"] = _cores(out["cores"], path)
    if out.get("roofline_cycles") is not None:
        out["roofline_cycles"] = bounded_float(out["roofline_cycles"], f"{path}: metadata.roofline_cycles",
                                               TraceFileError, 0.0, float(MAX_TRACE_CYCLE))
    if out.get("numerics") is not None and not isinstance(out["numerics"], bool):
        raise _fail(path, "numerics", "true or false", out["numerics"])
    if out.get("regions") is not None:
        out["regions"] = _regions(out["regions"], path)
    if out.get("args") is not None and not isinstance(out["args"], dict):
        raise _fail(path, "args", "an object of the call's arguments", out["args"])
    if "tiling" in out:
        out["tiling"] = _tiling(out["tiling"], path)
    if out.get("calls") is not None:
        out["calls"] = _calls(out["calls"], path)
    return out
