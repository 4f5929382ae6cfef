"""The contract every experiment keeps, apart from the experiments themselves
(docs/design.md, "The experiment contract").

Public names: the declaration (:class:`Experiment`, :func:`experiment`, :data:`REGISTRY`,
:data:`EXPERIMENTS`, :data:`NEEDS`), what the runner hands in and gets back
(:class:`Inputs`, :class:`Tables`), how it is shown and run (:class:`View`,
:class:`Headline`, :class:`Command`, :class:`Tool`, :data:`SOURCES`), settings (:func:`setting`,
:func:`check_settings`, :func:`settings_from`, :func:`settings_dict`), the recorded rows an
experiment reads (:class:`HeadRows`, :class:`DocRows`, :func:`head_rows`) and what they
read (:class:`Reading`), the windows a
capture read (:func:`captured_ids`, :func:`check_captured`), the shared verdict helpers
(:data:`CONVENTIONS`, :data:`FLIP_METRICS`, :func:`flip_rate`, :func:`flip_rate_interval`),
what every interval shares (:data:`MIN_BOOTSTRAP_N`, the method names,
:func:`no_interval_note`, :func:`percentile_interval`, :func:`resample_weights`,
:func:`check_n_boot`), and what float32 statistics resolve (:data:`FLOAT32_UNIT_ROUNDOFF`,
:func:`rounding_bound`, :func:`within_rounding`), and how each column is held when two runs
are compared (:class:`Same`, :class:`RowStatistic`, :class:`Stated`, :class:`Bound`,
:class:`Exponent`, :class:`Share`, :class:`Coordinates`, :class:`Labels`, :class:`Verdict`,
:data:`RULES`, :func:`held_by`, :func:`row_statistic_rounding`, :func:`compare_frames`,
:class:`TableComparison`, :class:`Cell`).

Modules: ``_experiment`` (the declaration, inputs and tables), ``_command`` (views,
commands and tools), ``_settings`` (setting fields and their checks), ``_inputs`` (recorded
rows and what they read), ``_verdicts`` (metrics, tolerances and flip rates), ``_held`` (the
rules of a comparison of two runs), ``_frames`` (two frames of a table compared by them),
``_intervals`` (the fewest observations of a bootstrap, method names, notes), ``_rounding``
(rounding bounds, nulls and threshold edges). They may import :mod:`attncoda.coda` and
each other; no experiment, nothing above.
"""

from __future__ import annotations

from attncoda.experiments.contract._command import SOURCES, Command, Headline, Tool, View
from attncoda.experiments.contract._experiment import (
    EXPERIMENTS,
    NEEDS,
    REGISTRY,
    RUN_COLUMNS,
    Experiment,
    Inputs,
    Tables,
    experiment,
    settings_dict,
    settings_from,
    without_run_columns,
)
from attncoda.experiments.contract._frames import Cell, TableComparison, compare_frames
from attncoda.experiments.contract._held import (
    RULES,
    Bound,
    Coordinates,
    Exponent,
    Held,
    Labels,
    RowStatistic,
    Same,
    Share,
    Stated,
    Verdict,
    held_by,
    row_statistic_rounding,
)
from attncoda.experiments.contract._inputs import (
    DocRows,
    HeadRows,
    Reading,
    captured_ids,
    check_captured,
    head_rows,
)
from attncoda.experiments.contract._intervals import (
    BOOTSTRAP_DOCUMENTS,
    BOOTSTRAP_WINDOWS,
    CLOPPER_PEARSON,
    MIN_BOOTSTRAP_N,
    check_n_boot,
    no_interval_note,
    percentile_interval,
    resample_weights,
)
from attncoda.experiments.contract._rounding import (
    FLOAT32_UNIT_ROUNDOFF,
    rounding_bound,
    within_rounding,
)
from attncoda.experiments.contract._settings import (
    RENAMED,
    Allowed,
    allowed_text,
    check_setting,
    check_settings,
    renamed_settings,
    setting,
)
from attncoda.experiments.contract._verdicts import (
    CONVENTIONS,
    DEFAULT_TOL,
    FLIP_METRICS,
    check_metrics,
    check_tol,
    flip_rate,
    flip_rate_interval,
)

__all__ = [
    "Allowed",
    "Bound",
    "Cell",
    "Coordinates",
    "Held",
    "Exponent",
    "Labels",
    "RULES",
    "RowStatistic",
    "Same",
    "Share",
    "Stated",
    "TableComparison",
    "Verdict",
    "compare_frames",
    "held_by",
    "row_statistic_rounding",
    "BOOTSTRAP_DOCUMENTS",
    "BOOTSTRAP_WINDOWS",
    "CLOPPER_PEARSON",
    "CONVENTIONS",
    "DEFAULT_TOL",
    "DocRows",
    "EXPERIMENTS",
    "Command",
    "Experiment",
    "FLIP_METRICS",
    "FLOAT32_UNIT_ROUNDOFF",
    "HeadRows",
    "Headline",
    "Inputs",
    "MIN_BOOTSTRAP_N",
    "NEEDS",
    "RENAMED",
    "REGISTRY",
    "RUN_COLUMNS",
    "Reading",
    "SOURCES",
    "Tables",
    "Tool",
    "View",
    "allowed_text",
    "captured_ids",
    "check_captured",
    "check_metrics",
    "check_n_boot",
    "check_setting",
    "check_settings",
    "check_tol",
    "experiment",
    "flip_rate",
    "flip_rate_interval",
    "head_rows",
    "no_interval_note",
    "percentile_interval",
    "resample_weights",
    "rounding_bound",
    "renamed_settings",
    "setting",
    "settings_dict",
    "settings_from",
    "within_rounding",
    "without_run_columns",
]
