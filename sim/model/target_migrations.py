"""Migration notes of the target file: a file still written for an older model is refused, saying what replaced
each old key (and, where it can, the block to write instead, from the file's own values).

Old keys refused: ``staging_region``/``workspace`` (replaced by the ``staging:`` levels), ``regions[].ports``
(a region's bandwidth is shared fluidly), ``core.vector_op_latency_cycles`` and ``core.vector_efficiency``
(the flops-over-peak model, replaced by functional units) and ``core.precisions.*.fmac_units`` (the core's
``core.units.fmac.count``).  :func:`refuse_old_keys` runs before the schema, on the parsed document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.errors import TargetError
from sim.model.target import COMPUTE_PRECISIONS
from sim.model.target_schema import MAX_NAME_CHARS

#: Makes the error of a key path and a message (the file's name in front).
Fail = Callable[[str, str], TargetError]

#: Keys of the flops-over-peak core model and what replaced each (a file still giving one is refused with this).
REPLACED_CORE_KEYS = {
    "vector_op_latency_cycles": "replaced by the latencies of the core's functional units "
                                "(core.units.<unit>.latency_cycles: a loop's fill is the latencies on its "
                                "dependence chain, e.g. fmac 6)",
    "vector_efficiency": "a tile's compute is now priced from its inner loops on the core's functional units "
                         "(core.units, core.issue_width), so its efficiency emerges from the loop's shape",
}


def refuse_old_keys(fail: Fail, doc: Any) -> None:
    """Refuse the first old key of ``doc`` (a parsed target file), with what replaced it."""
    if not isinstance(doc, dict):
        return
    refuse_old_staging_keys(fail, doc)
    refuse_ports(fail, doc)
    core = doc.get("core")
    if not isinstance(core, dict):
        return
    old = [k for k in REPLACED_CORE_KEYS if k in core]
    if old:
        raise fail(f"core.{old[0]}", f"is gone: {REPLACED_CORE_KEYS[old[0]]}; delete {' and '.join(old)} (the "
                                     f"shipped targets show the core: block with units, issue_width, "
                                     f"vector_registers, loop_overhead_cycles and tile_overhead_cycles)")
    precisions = core.get("precisions")
    if isinstance(precisions, dict):
        for pname, pm in precisions.items():
            if isinstance(pm, dict) and "fmac_units" in pm and pname in COMPUTE_PRECISIONS:
                raise fail(f"core.precisions.{pname}.fmac_units",
                           "is gone: the FMAC count is the core's, core.units.fmac.count; delete fmac_units "
                           "from every precision")


def refuse_old_staging_keys(fail: Fail, top: dict) -> None:
    """A file written for the single staging level (``staging_region`` + ``workspace``) is refused, with the
    ``staging:`` block that says the same thing written out from the file's own values."""
    old = [k for k in ("staging_region", "workspace") if k in top]
    if not old:
        return
    ws = top.get("workspace")
    ws = ws if isinstance(ws, dict) else {}

    def shown(v: Any, default: str) -> str:
        if isinstance(v, bool) or v is None:
            return default
        if isinstance(v, int):
            return f"{v:#x}" if 0 <= v < 1 << 64 else default
        return v if isinstance(v, str) and v.isidentifier() and len(v) <= MAX_NAME_CHARS else default

    shared = shown(ws.get("region"), "gsm")
    stage = shown(top.get("staging_region"), "am")
    levels = (f"{{name: {shared}, region: {shared}, offset_bytes: {shown(ws.get('offset_bytes'), 'OFFSET')}, "
              f"size_bytes: {shown(ws.get('size_bytes'), 'SIZE')}}}, {{name: {stage}, region: {stage}}}")
    verb = "were" if len(old) > 1 else "was"
    raise fail(old[0], f"{' and '.join(old)} {verb} replaced by a list of staging levels, outermost first; write "
                         f"instead: staging: {{source: \"...\", levels: [{levels}]}} (a per-core level beside "
                         f"another, such as a scalar memory, adds {{name: sm, region: sm, beside: {stage}}}; see "
                         f"the README's 'Staging levels')")


def refuse_ports(fail: Fail, top: dict) -> None:
    """A file written for the port model (``regions[].ports``) is refused, naming the first region that gives
    ports and saying what replaced them and what to delete."""
    regions = top.get("regions")
    if not isinstance(regions, list):
        return
    with_ports = [(i, rm) for i, rm in enumerate(regions) if isinstance(rm, dict) and "ports" in rm]
    if not with_ports:
        return
    i, rm = with_ports[0]
    name = rm.get("name")
    kp = f"regions[{i}]" + (f"({name})" if isinstance(name, str) and name.isprintable()
                            and len(name) <= MAX_NAME_CHARS else "")
    names = [rm.get("name") for _, rm in with_ports]
    shown = ", ".join(n if isinstance(n, str) and n.isidentifier() and len(n) <= MAX_NAME_CHARS else "?"
                      for n in names[:8]) + (", ..." if len(names) > 8 else "")
    dma = top.get("dma")
    add = "" if isinstance(dma, dict) and "engine_bytes_per_cycle" in dma else \
        " and give dma.engine_bytes_per_cycle (the most bytes per cycle one DMA engine streams, e.g. 64)"
    raise fail(f"{kp}.ports", f"ports are gone: a region's bandwidth_bytes_per_cycle is now shared fluidly among "
                                f"the transfers streaming through it (max-min fair shares, recomputed as streams "
                                f"start and end; a lone transfer may use all of it), each capped by its DMA "
                                f"engine's rate; delete ports: from every region ({len(names)} give it: "
                                f"{shown}){add}")
