"""Shared figure plumbing: the Agg backend, atomic PNG writes."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from attncoda.store import atomic_write_bytes


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Render ``fig`` to PNG in memory, write it atomically, close it; return the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
