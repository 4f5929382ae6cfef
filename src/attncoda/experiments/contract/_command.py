"""How an experiment is shown and run from the outside: its report section and figure
(:class:`View`), its command and Python function (:class:`Command`), and the tools beside
its command that a higher layer carries out (:class:`Tool`; docs/design.md, "The experiment
contract")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from attncoda._errors import AttncodaError

__all__ = ["SOURCES", "Command", "Headline", "Tool", "View"]

#: How a command takes what it reads (:attr:`Command.sources`): ``"model"`` one model spec;
#: ``"model?"`` one spec or ``--attentions FILE``; ``"models*"`` specs or ``--attentions
#: FILE...``; ``"models+"`` one spec or more; ``"series"`` one checkpoint series spec.
SOURCES = ("model", "model?", "models*", "models+", "series")


@dataclass(frozen=True)
class Tool:
    """A command beside an experiment's own, ``attncoda <name> <action>``, that a higher
    layer carries out (the predictor's ``fit``, which captures models through the runner and
    writes a predictor file): the command line builds its options and calls ``run``.

    Attributes
    ----------
    action : str
        The word after the experiment's name (``"fit"``).
    help : str
        Its line in ``attncoda <name> --help``.
    sources : str
        How it takes what it reads (:data:`SOURCES`).
    settings : type
        A settings dataclass of its own options (made with
        :func:`attncoda.experiments.contract.setting`).
    run : str
        ``"module:function"`` of the layer that carries it out, called as
        ``function(models, settings, rows=..., text=..., out=..., options=...)`` with the
        sources, the dict of its settings given, the shared rows' settings given, the corpus,
        the ``--out`` path and the :class:`attncoda.capture.options.CaptureOptions`; it returns
        the lines to print.
    shared_rows : bool
        Whether it takes the shared rows' options (``--docs``, ``--max-tokens``).
    """

    action: str
    help: str
    sources: str
    settings: type
    run: str
    shared_rows: bool = False

    def __post_init__(self) -> None:
        if self.sources not in SOURCES:
            raise AttncodaError(
                f"unknown tool sources {self.sources!r}: use one of {', '.join(SOURCES)}"
            )


@dataclass(frozen=True)
class View:
    """How an experiment is shown: its report section and its figure.

    Attributes
    ----------
    title : str
        The section's heading in the report.
    needs : tuple of str
        The tables the section reads; when the first is absent from a run folder, the
        report says the experiment was not run instead of calling ``section``.
    section : callable
        ``section(ctx) -> str``: the inner HTML of the section from a
        :class:`attncoda.experiments.view.Context` (the run folder's tables and sink spec):
        the paper's claim beside what was measured, the measured tables and the figures,
        each captioned with its convention.
    figure_tables : tuple of str
        The tables the figure is drawn from.
    figure : callable
        ``figure(tables, *, sink) -> matplotlib.figure.Figure`` from those tables by name
        (``sink``: the run's sink spec, named in titles).
    units : tuple of str
        Other unit names whose skipped or failed units the section reports beside its own
        (collapse reports the ``train`` unit that made its series).
    of_capture : callable or None
        ``of_capture(capture) -> (shown, tables)``: what a notebook shows of one capture, a
        compact table and the tables (keyed as a run stores them) its figure is drawn from;
        the first experiment of the registry that has one draws every capture's view.
    headline : Headline or None
        Its row of a demo run's headline (the README's results), or None: it has none.
    """

    title: str
    needs: tuple[str, ...]
    section: Callable[[Any], str]
    figure_tables: tuple[str, ...]
    figure: Callable[..., Any]
    units: tuple[str, ...] = ()
    of_capture: Callable[[Any], tuple[Any, Mapping[str, Any]]] | None = None
    headline: Headline | None = None


@dataclass(frozen=True)
class Headline:
    """An experiment's row of a demo run's headline: what it measures, the paper's figure,
    and the run's, in Markdown (the README's results table; ``attncoda demo`` prints it for
    the user's run).

    Attributes
    ----------
    what : str
        The row's first cell (``"flips (keep vs drop)"``).
    paper : str
        The paper's figure (``"17–47% of verdicts flip"``).
    cell : callable
        ``cell(ctx) -> str``: the run's figure, from a :class:`attncoda.experiments.view.
        Context` of its tables.
    below : callable or None
        ``below(ctx) -> str``: Markdown the headline shows under its table (the predictor's
        held-out verdicts), or None.
    """

    what: str
    paper: str
    cell: Callable[[Any], str]
    below: Callable[[Any], str] | None = None


@dataclass(frozen=True)
class Command:
    """How the command line and the Python API run an experiment: ``attncoda <name>
    SOURCES [options]`` and ``attncoda.<function>(source, **options)``.

    The options come from the experiment's ``Settings`` (and the shared rows' when it needs
    ``rows``), the command runs the experiment into a run folder and prints ``summary``.

    Attributes
    ----------
    help : str
        The command's line in ``attncoda --help``.
    sources : str
        How it takes what it reads (:data:`SOURCES`).
    summary : callable
        ``summary(tables, facts, sink) -> str``: the lines printed after the run, from the
        run folder's tables by name; ``facts(model, revision)`` gives a unit's stored facts
        (``read``: what its rows were read from) and ``sink`` is the run's sink spec.
    source_help : str
        The help of the sources argument.
    flags : mapping of str to tuple of str
        Option strings of settings fields whose option is not ``--<field-name>`` alone (the
        first is shown, the others are older names kept as aliases).
    doc : str
        The summary line of the Python function's docstring (its parameters are documented
        from the settings fields).
    positional : str or None
        A settings field given as the first argument (the predictor's file), ``None``: none.
    files : tuple of str
        Settings fields that name a file, made absolute before the run records them.
    action : str or None
        The command is ``attncoda <name> <action>`` (``predictor apply``); ``None``: none.
    tools : tuple of Tool
        Commands beside it, ``attncoda <name> <tool.action>`` (``predictor fit``); with
        any, ``action`` must be set.
    run_flags : tuple of str
        Settings fields that ``reproduce``, ``sweep`` and ``demo`` also take, as
        ``--<field-name>``, for every unit of the experiment (flips' ``n_boot``).
    """

    help: str
    sources: str
    summary: Callable[..., str]
    source_help: str = ""
    doc: str = ""
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    positional: str | None = None
    files: tuple[str, ...] = ()
    action: str | None = None
    tools: tuple[Tool, ...] = ()
    run_flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.sources not in SOURCES:
            raise AttncodaError(
                f"unknown command sources {self.sources!r}: use one of {', '.join(SOURCES)}"
            )
        if self.tools and self.action is None:
            raise AttncodaError(
                f"a command with tools ({', '.join(t.action for t in self.tools)}) is "
                "'<name> <action>' itself: give it an action"
            )


