"""What an experiment draws its figure and writes its report section with.

The report (:mod:`attncoda.report.html`) lays the page out; each experiment's package draws
its own figure (``_figure.py``) and writes its own section (``_section.py``) from the run
folder's tables, with these helpers, and declares both in its :class:`View
<attncoda.experiments.contract.View>`.

- ``_canvas``: figures on the Agg canvas outside pyplot's state, PNG bytes and atomic writes;
- ``_labels``: how a model is named (``model@revision (family)``);
- ``_html``: escaping, number formats, captioned tables and figures, each with its convention;
- ``_context``: :class:`Context`, what every section reads;
- ``_markdown``: numbers and names as a demo run's headline writes them (:func:`pct`,
  :func:`times`, :func:`prose_name`).

They import :mod:`attncoda.store` and :mod:`attncoda._errors` only, never an experiment.
"""

from __future__ import annotations

from attncoda.experiments.view._canvas import (
    need_columns,
    new_agg_figure,
    new_figure,
    png_bytes,
    save_png,
)
from attncoda.experiments.view._context import Context
from attncoda.experiments.view._html import (
    NA,
    esc,
    figure,
    figure_or_note,
    fmt_count,
    fmt_interval,
    fmt_nats,
    fmt_num,
    fmt_pct,
    fmt_ratio,
    fmt_signed,
    interval_method,
    note,
    paper_vs_measured,
    table,
)
from attncoda.experiments.view._labels import groups, is_missing, model_label, one_model
from attncoda.experiments.view._markdown import pct, prose_name, times

__all__ = [
    "NA",
    "Context",
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
    "groups",
    "interval_method",
    "is_missing",
    "model_label",
    "need_columns",
    "new_agg_figure",
    "new_figure",
    "note",
    "one_model",
    "paper_vs_measured",
    "pct",
    "png_bytes",
    "prose_name",
    "save_png",
    "table",
    "times",
]
