"""Building blocks of the HTML report: escaping, number formats, captioned tables, figures.

Every table and every figure of the report is made here, and each one must be given the
convention it was measured under: :func:`table` and :func:`figure` put a visible
``Convention: ...`` line in the ``<caption>`` or ``<figcaption>``. Every string from a table
is HTML-escaped (model names may be paths); numbers are formatted by the ``fmt_*`` helpers
(percent with 1 decimal, nats with 3 decimals) and show ``n/a`` for a missing value.
"""

from __future__ import annotations

import base64
import html
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attncoda.experiments.view._canvas import png_bytes
from attncoda.experiments.view._labels import groups, is_missing, model_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "NA",
    "esc",
    "figure",
    "figure_or_note",
    "fmt_count",
    "fmt_interval",
    "fmt_nats",
    "fmt_num",
    "fmt_pct",
    "fmt_ratio",
    "fmt_signed",
    "interval_method",
    "groups",
    "is_missing",
    "model_label",
    "note",
    "paper_vs_measured",
    "table",
]

NA = "n/a"
#: A cell that reads as a number (right-aligned): ``12.3%``, ``-0.001``, ``1.2×``, ``n/a``.
_NUMERIC = re.compile(r"^(n/a|[+-]?\d[\d,]*(\.\d+)?(e[+-]\d+)?\s?(%|×)?)(\s|$)")
_FIGURE_DPI = 100
_NUM = ' class="num"'


def esc(value: Any) -> str:
    """``str(value)`` with ``& < > " '`` escaped."""
    return html.escape(str(value), quote=True)


def fmt_pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.1234`` -> ``12.3%``."""
    return NA if is_missing(value) else f"{100.0 * float(value):.{digits}f}%"


def fmt_num(value: Any, digits: int = 3) -> str:
    """A plain number with ``digits`` decimals; tiny non-zero values in scientific form."""
    if is_missing(value):
        return NA
    x = float(value)
    if x != 0.0 and abs(x) < 0.5 * 10.0**-digits:
        return f"{x:.2e}"
    return f"{x:.{digits}f}"


def fmt_nats(value: Any) -> str:
    """An entropy in nats, 3 decimals (``2.631``); tiny changes as ``-6.66e-04``."""
    return fmt_num(value, 3)


def fmt_signed(value: Any, digits: int = 3) -> str:
    """A signed number: ``+0.048``, ``-0.739``."""
    if is_missing(value):
        return NA
    text = fmt_num(value, digits)
    return text if text.startswith("-") else f"+{text}"


def fmt_ratio(value: Any) -> str:
    """A perplexity ratio: ``1.72×``, ``12.5×``, ``1,234×``."""
    if is_missing(value):
        return NA
    x = float(value)
    if x >= 1000:
        return f"{x:,.0f}×"
    return f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


def fmt_count(value: Any) -> str:
    """An integer with thousands separators."""
    return NA if is_missing(value) else f"{int(value):,}"


def fmt_interval(
    row: Mapping[str, Any], low: str, high: str, fmt: Callable[[Any], str] = fmt_pct
) -> str:
    """A row's interval, ``12.0% – 15.0%``, or the note that stands where it has none
    (``no interval: 4 documents, fewer than 10``). A row of a table written before intervals
    carried notes shows its bounds, or ``n/a``."""
    why = row.get("ci_note")
    if not is_missing(why) and str(why):
        return str(why)
    if is_missing(row.get(low)) or is_missing(row.get(high)):
        return NA
    return f"{fmt(row[low])} – {fmt(row[high])}"


def interval_method(row: Mapping[str, Any], n: str, unit: str) -> str:
    """How a row's interval was made and from how many: ``percentile bootstrap over
    documents, 16 documents, 200 resamples``; ``—`` where the row has no interval (or its
    table names no method)."""
    method = row.get("ci_method")
    if is_missing(method) or not str(method):
        return "—"
    text = f"{method}, {fmt_count(row.get(n))} {unit}"
    boot = row.get("n_boot")
    return text if is_missing(boot) else f"{text}, {fmt_count(boot)} resamples"


def _caption(caption: str, convention: str) -> str:
    return f'{esc(caption)}<br><span class="convention">Convention: {esc(convention)}</span>'


def table(
    caption: str,
    convention: str,
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    align_numbers: bool = True,
) -> str:
    """A ``<table>`` whose ``<caption>`` names the convention; every cell is escaped.

    With ``align_numbers``, columns whose every cell reads as a number are right-aligned.
    """
    body = [[str(c) for c in row] for row in rows]
    numeric = [
        align_numbers and bool(body) and all(_NUMERIC.match(row[j]) for row in body)
        for j in range(len(headers))
    ]
    head = "".join(f"<th{_NUM if numeric[j] else ''}>{esc(h)}</th>" for j, h in enumerate(headers))
    lines = [
        "<tr>"
        + "".join(f"<td{_NUM if numeric[j] else ''}>{esc(c)}</td>" for j, c in enumerate(row))
        + "</tr>"
        for row in body
    ]
    if not body:
        lines = [f'<tr><td colspan="{len(headers)}">no rows</td></tr>']
    return (
        f"<table><caption>{_caption(caption, convention)}</caption>"
        f"<thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(lines) + "\n</tbody></table>\n"
    )


def paper_vs_measured(convention: str, rows: Iterable[Sequence[str]]) -> str:
    """The small table that puts each claim of the paper beside this run's measurement."""
    return table(
        "Paper vs measured (this run)",
        convention,
        ("quantity", "paper", "measured"),
        rows,
        align_numbers=False,
    ).replace("<table>", '<table class="claims">', 1)


def figure(fig: Figure, *, alt: str, caption: str, convention: str) -> str:
    """A matplotlib figure embedded as a base64 PNG, in a ``<figure>`` with its caption."""
    data = png_bytes(fig, dpi=_FIGURE_DPI)
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    src = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return (
        f'<figure><img src="{src}" alt="{esc(alt)}" width="{width}" height="{height}">'
        f"<figcaption>{_caption(caption, convention)}</figcaption></figure>\n"
    )


def note(text: str, cls: str = "note") -> str:
    """A paragraph of escaped text."""
    return f'<p class="{esc(cls)}">{esc(text)}</p>\n'


def figure_or_note(make: Any, **kwargs: Any) -> str:
    """:func:`figure` of ``make()``, or a note saying why it could not be drawn (the tables
    are still shown)."""
    from attncoda._errors import AttncodaError

    try:
        fig = make()
    except AttncodaError as exc:
        return note(f"Figure not drawn: {exc}.", "not-run")
    return figure(fig, **kwargs)
