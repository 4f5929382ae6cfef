"""The headline of a demo run: each experiment, the paper's figure and the run's, in one
table (the README's results, the end of ``attncoda demo``).

:func:`headline` reads a run folder's manifest and tables (the shipped reference run, or a
user's own demo run) and writes the Markdown the README shows between its
``<!-- attncoda:headline -->`` markers: a line naming the run, then one row per experiment
of the registry that declares one (:class:`attncoda.experiments.contract.Headline`), then
what those rows show below the table. The site's results page (``docs/hooks/results.py``)
builds on the same pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda.experiments.contract import EXPERIMENTS, experiment
from attncoda.experiments.view import Context
from attncoda.run.config import RunConfig
from attncoda.store import read_json
from attncoda.store.manifest import MANIFEST
from attncoda.store.runs import read_run_tables

if TYPE_CHECKING:
    from attncoda.run.compare import Comparison

__all__ = ["demo_screen", "end_demo", "headline", "machine", "run_context"]


def _manifest(folder: Path) -> dict[str, Any]:
    return dict(read_json(folder / MANIFEST))


def run_context(folder: str | Path) -> Context:
    """A run folder's tables, sink spec and settings, as every section reads them."""
    folder = Path(folder)
    config = RunConfig.from_json(_manifest(folder)["config"])
    return Context(read_run_tables(folder), config.options.sink, config.settings)


def machine(folder: str | Path, wall_seconds: float | None = None) -> str:
    """The run's command, date, CPU, cores and wall time, in one phrase."""
    found = _manifest(Path(folder))
    seconds = wall_seconds if wall_seconds is not None else found.get("wall_seconds")
    cores = found.get("cores")
    where = f"{found['cpu']}" + (f", {cores} cores" if cores else "")
    took = ""
    if seconds is not None:
        minutes, rest = divmod(round(float(seconds)), 60)
        took = f": {minutes} min {rest} s"
    command = found.get("recorded_from", "attncoda demo")
    return f"`{command}` on {found['created'][:10]}, {where}{took}"


def headline(
    folder: str | Path, wall_seconds: float | None = None, label: str = "reference run"
) -> str:
    """The headline of the demo run in ``folder`` (Markdown).

    Parameters
    ----------
    folder : str or path
        A finished demo run folder (``attncoda demo``; the shipped reference run).
    wall_seconds : float, optional
        The run's wall time (default: the manifest's ``wall_seconds``, which a recorded
        reference run holds).
    label : str
        The heading of the run's column.

    Returns
    -------
    str
        The line naming the run, the table (one row per experiment whose view declares a
        headline and whose tables the run holds), and what the rows show below it.
    """
    ctx = run_context(folder)
    shown = []
    for name in EXPERIMENTS:
        view = experiment(name).view
        if view is not None and view.headline is not None and ctx.holds(view.needs[:1]):
            shown.append(view.headline)
    lines = [
        f"{machine(folder, wall_seconds)}.",
        "",
        f"| experiment | paper | {label} |",
        "| --- | --- | --- |",
        *(f"| {row.what} | {row.paper} | {row.cell(ctx)} |" for row in shown),
    ]
    lines += [text for row in shown if row.below is not None for text in ("", row.below(ctx))]
    return "\n".join(lines) + "\n"


def demo_screen(folder: str | Path, wall_seconds: float, against: Comparison) -> list[str]:
    """The last screen of ``attncoda demo``: what the run in ``folder`` found (its headline,
    the README's results table of this run) and whether it holds the same evidence as the
    reference run recorded from ``make demo`` (``against``, :func:`attncoda.compare` of the
    run), with the cells that differ."""
    return [
        "",
        "What this run found, beside the paper (the README's results):",
        "",
        headline(folder, wall_seconds=wall_seconds, label="this run"),
        f"Against the reference run ({against.reference}):",
        *against.lines(),
    ]


def end_demo(out: str | Path, wall_seconds: float) -> int:
    """Print the demo's last screen for its run folder ``out`` (:func:`demo_screen`: the
    headline, then the comparison with the reference run, cells that differ listed) and
    return 0 where the run holds the reference's evidence (the demo's promise), else 1.

    A demo of some of the reference's models or experiments (``--models``,
    ``--experiments``) is compared on what it holds (``compare(subset=True)``)."""
    from attncoda.run.compare import compare, reference_run

    against = compare(out, subset=_part_of(Path(out), reference_run()))
    print("\n".join(demo_screen(out, wall_seconds, against)))
    return 0 if against.same else 1


def _part_of(run: Path, reference: Path) -> bool:
    """Whether ``run`` ran fewer of ``reference``'s models or experiments, and no other."""
    mine = RunConfig.from_json(_manifest(run)["config"])
    theirs = RunConfig.from_json(_manifest(reference)["config"])
    ran = (set(mine.models), set(mine.experiments))
    whole = (set(theirs.models), set(theirs.experiments))
    return ran[0] <= whole[0] and ran[1] <= whole[1] and ran != whole
