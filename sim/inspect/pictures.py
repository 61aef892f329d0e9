"""A matplotlib figure saved the same, byte for byte, each time it is drawn the same: no date in an SVG or a PDF,
and an SVG's element ids from a fixed salt (matplotlib's defaults stamp the time and draw random ids)."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

#: What each format would stamp with the time, removed (None: matplotlib then writes no such entry).
_NO_DATES = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "ps": {"CreationDate": None},
             "eps": {"CreationDate": None}}


def save_figure(fig: Any, target: str | Path | IO[bytes], fmt: str, dpi: int) -> None:
    """``fig.savefig`` in format ``fmt`` at ``dpi``, reproducibly."""
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "dspsim"}):
        fig.savefig(target, format=fmt, dpi=dpi, metadata=_NO_DATES.get(fmt))
