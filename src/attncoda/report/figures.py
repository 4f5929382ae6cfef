"""Shared figure plumbing: pyplot-free figures on the Agg canvas, atomic PNG writes."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from attncoda.store import atomic_write_bytes


def figure(**kwargs: Any) -> Any:
    """A :class:`matplotlib.figure.Figure` with constrained layout, outside pyplot's state
    (nothing to close, safe in threads and servers). matplotlib is imported on first use."""
    from matplotlib.figure import Figure

    kwargs.setdefault("layout", "constrained")
    return Figure(**kwargs)


def png_bytes(fig: Any, dpi: int = 120) -> bytes:
    """Render ``fig`` to PNG bytes with no ``Software`` text chunk, so the bytes depend on
    the figure (and the matplotlib version drawing it) only: what an embedded report needs."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def save_png(fig: Any, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Render ``fig`` to PNG in memory and write it atomically; return the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())
