"""What a notebook shows for a :class:`attncoda.Capture` or an API result: a compact table
and the experiment's figure, drawn by the report's own figure code (docs/design.md, "Runs").
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["capture_html", "result_html"]

#: Rows of a table a notebook shows before it says how many more there are.
MAX_ROWS = 12
#: The width of the figure in a notebook, in pixels.
WIDTH_PX = 560


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img style="max-width:{WIDTH_PX}px" src="data:image/png;base64,{data}"/>'


def _table(frame: pd.DataFrame, held: Mapping[str, Any] | None = None) -> str:
    """``frame``'s first rows, each number to 4 significant digits and each stated bound
    (``held``: its columns' rules) to the 2 it holds (docs/design.md, "The same evidence,
    by one rule")."""
    from attncoda.experiments.contract import Bound

    bounds = {
        column: (lambda v: f"{v:.2g}")
        for column, rule in (held or {}).items()
        if isinstance(rule, Bound) and column in frame and frame[column].dtype.kind == "f"
    }
    shown = frame.head(MAX_ROWS).to_html(
        index=False, float_format=lambda v: f"{v:.4g}", formatters=bounds or None
    )
    more = len(frame) - MAX_ROWS
    tail = f"<div><small>... {more} more rows</small></div>" if more > 0 else ""
    return shown + tail


def _figure_or_note(draw: Any) -> str:
    from attncoda._errors import AttncodaError

    try:
        return _png(draw())
    except AttncodaError as exc:  # several models, say: the view says why there is no figure
        return f"<div><small>no figure: {html.escape(str(exc))}</small></div>"


def result_html(result: Any) -> str:
    """The notebook view of an API result: its first table, compact, and its figure."""
    models = sorted({str(m) for frame in result.tables.values() for m in frame.get("model", [])})
    head = html.escape(f"{result.experiment}: {', '.join(models) or 'no rows'}")
    parts = [f"<div><b>{head}</b></div>"]
    if result.tables:
        from attncoda.experiments.contract import experiment

        name = next(iter(result.tables))
        parts.append(_table(result.table, experiment(result.experiment).held.get(name)))
        parts.append(_figure_or_note(result.figure))
    return "<div>" + "".join(parts) + "</div>"


def capture_html(cap: Any, sink: str = "first") -> str:
    """The notebook view of a capture: a compact table and a figure, as the first
    experiment of the registry whose view shows a capture says
    (:attr:`attncoda.experiments.contract.View.of_capture`)."""
    from attncoda.experiments.contract import EXPERIMENTS, experiment
    from attncoda.report.figures import figure

    n_docs = cap.n_docs
    head = (
        f"Capture: {n_docs} document{'s' if n_docs != 1 else ''}, {cap.n_layers} layers x "
        f"{cap.n_heads} heads, method {getattr(cap, 'method', 'exact')}"
    )
    title = f"<div><b>{html.escape(head)}</b></div>"
    views = [(n, v.of_capture) for n in EXPERIMENTS if (v := experiment(n).view) is not None]
    shows = [(n, of_capture) for n, of_capture in views if of_capture is not None]
    if not shows:
        return f"<div>{title}</div>"
    name, of_capture = shows[0]
    shown, tables = of_capture(cap)

    def draw() -> Any:
        return figure(name, tables, sink=sink)

    return f"<div>{title}{_table(shown)}{_figure_or_note(draw)}</div>"
