"""The Python API: one function per experiment of the registry, each returning a
:class:`Result` (docs/design.md, "Runs").

Each function takes model specs or captures:

- model specs (``"minilm"``, ``"owner/name@rev"``, a folder; one or a list) run through the
  same runner as the CLI, into ``out`` when given (a run folder ``attncoda report`` renders)
  or a temporary folder otherwise, and return the tables the runner stored;
- :class:`attncoda.Capture` objects (one or a list, from :func:`attncoda.capture_windows` or
  :func:`attncoda.from_attentions`) run in this process, with no file written.

:func:`compare` tells whether two run folders hold the same evidence (the one comparison
of ``attncoda compare``: docs/design.md, "The same evidence, by one rule").

Either way the tables are those of the experiment's contract (``attncoda.experiments``),
with the run's ``family`` column first, and :meth:`Result.figure` draws the figure of the
report from them.

Each function's keywords are the common options, then every field of the experiment's
``Settings`` with its default, each value checked before anything loads or is written
(:mod:`attncoda.api._signatures`).

Modules: ``_functions`` (the experiment functions, made from each declaration),
``_result`` (:class:`Result`), ``_call`` (how a function runs on specs, live models or
captures), ``_signatures`` (the common options and the signatures checked against each
``Settings``), ``_sources`` (what a source is: specs, captures or live models). The package
may import every layer below it (report, run, experiments, capture, models, store, data,
coda); nothing imports it but the CLI and ``attncoda`` itself.
"""

from __future__ import annotations

from attncoda.api._functions import functions
from attncoda.api._result import Result
from attncoda.run.compare import Comparison, compare

# The module's own names, so that `from attncoda.api import flips` and the reference's
# inspection find them.
globals().update(functions())

__all__ = ["Comparison", "Result", "compare", *functions()]
