"""Shared figure plumbing: pyplot-free figures on the Agg canvas, PNG bytes, atomic PNG writes."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.store import atomic_write_bytes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["need_columns", "new_agg_figure", "new_figure", "png_bytes", "save_png"]


def new_figure(**kwargs: Any) -> Figure:
    """A :class:`matplotlib.figure.Figure` with constrained layout, outside pyplot's state
    (nothing to close, safe in threads and servers). matplotlib is imported on first use."""
    from matplotlib.figure import Figure

    kwargs.setdefault("layout", "constrained")
    return Figure(**kwargs)


def png_bytes(fig: Figure, dpi: int = 120) -> bytes:
    """Render ``fig`` to PNG bytes with no ``Software`` text chunk, so the bytes depend on
    the figure (and the matplotlib version drawing it) only: what an embedded report needs."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def save_png(fig: Figure, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Render ``fig`` to PNG in memory and write it atomically; return the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return atomic_write_bytes(path, buffer.getvalue())


def new_agg_figure(**kwargs: Any) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(layout="constrained", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def need_columns(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in getattr(df, "columns", ())]
    if missing:
        raise AttncodaError(f"{what} lacks the column {missing[0]!r}")
    if len(df) == 0:
        raise AttncodaError(f"{what} has no rows to plot")
