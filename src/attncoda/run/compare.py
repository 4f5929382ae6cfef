"""Whether two runs hold the same evidence: every table of two run folders compared by one
rule per kind of column (docs/design.md, "The same evidence, by one rule").

Two runs of one command on two machines, on a CPU and a GPU, or with the exact and the
fast path differ at float32 rounding, and a count of near-ties moves by a few units. A
cell is held to what its column can hold (:mod:`attncoda.experiments.contract._held`: the
experiment that makes a table declares its columns' rules, the others follow their type).
:func:`compare` is the one comparison: ``attncoda compare``, the reference run's tests,
the notebook's, and the GPU and kernel benchmarks all call it.

Without a reference, a run is compared with the reference run recorded from ``make demo``
that ships with the package (:func:`reference_run`), so an installed attncoda checks a
user's demo run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    EXPERIMENTS,
    Cell,
    Held,
    TableComparison,
    compare_frames,
    experiment,
)
from attncoda.run.config import RunConfig

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Comparison", "column_rules", "compare", "held_columns", "reference_run"]

#: The shipped reference run: the manifest and tables of one ``make demo`` run.
REFERENCE = Path(__file__).resolve().parent / "reference"
#: Config keys in which two runs may differ and still hold the same evidence: where and
#: how they computed it.
_WHERE = ("device", "dtype", "method", "kernel", "device_map", "max_memory", "offload_folder")
#: The columns that name a unit of a run, those a table has.
_UNIT_KEYS = ("experiment", "model", "revision")
#: Cells a summary lists before it says how many more differ.
SHOWN = 20


def reference_run() -> Path:
    """The folder of the reference run that ships with the package (its ``manifest.json``
    and ``tables/``)."""
    return REFERENCE


@cache
def held_columns() -> dict[str, Mapping[str, Held]]:
    """``{table: {column: rule}}`` of every experiment's declared rules (the tables a run
    stores, combined ones included)."""
    found: dict[str, Mapping[str, Held]] = {}
    for name in EXPERIMENTS:
        found.update(experiment(name).held)
    return found


@cache
def column_rules() -> dict[str, Held]:
    """Every declared rule by column name alone, for a table read back from a page or a
    notebook that does not say which run table it shows (a rule whose parts a table lacks
    allows its column nothing beyond the digits shown)."""
    return {column: rule for rules in held_columns().values() for column, rule in rules.items()}


@dataclass(frozen=True)
class Comparison:
    """Two run folders compared.

    Attributes
    ----------
    run, reference : pathlib.Path
        The run compared and what it is compared with.
    tables : tuple of TableComparison
        Every table either run holds (that the reference left out of its record, if it is
        the shipped one, excepted), by name.
    left_out : tuple of str
        Tables of ``run`` that the reference's record leaves out (too large to ship): not
        compared, and said so.
    config : tuple of str
        Config keys in which the two runs differ other than where and how they computed
        (models, settings): their tables then need not agree, and the summary says so.
    """

    run: Path
    reference: Path
    tables: tuple[TableComparison, ...]
    left_out: tuple[str, ...] = ()
    config: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        """Whether there is a table to compare and every table agrees within its rules."""
        return bool(self.tables) and all(t.same for t in self.tables)

    @property
    def cells(self) -> tuple[Cell, ...]:
        """Every cell outside its allowance, table by table."""
        return tuple(c for t in self.tables for c in t.cells)

    def summary(self) -> str:
        """One line: ``same evidence within rounding: ...`` or ``different: ...``."""
        n = len(self.tables)
        if not self.tables:
            return f"different: {self.run} holds no table of the reference's to compare"
        if self.same:
            worst = max(self.tables, key=lambda t: t.worst, default=None)
            largest = (
                f"largest difference {worst.worst:.2g} of its allowance "
                f"({worst.table}.{worst.worst_column})"
                if worst is not None and worst.worst > 0
                else "every cell equal"
            )
            return f"same evidence within rounding: {n} tables, {largest}"
        differ = [t for t in self.tables if not t.same]
        return (
            f"different: {len(differ)} of {n} tables differ beyond what their columns allow "
            f"({', '.join(t.table for t in differ)})"
        )

    def shares(self) -> dict[str, float]:
        """Per table, the largest difference of a cell in units of its allowance (``inf``
        where a table could not be compared or a cell differs with nothing allowed)."""
        return {t.table: (t.worst if t.why is None else math.inf) for t in self.tables}

    def lines(self) -> list[str]:
        """The summary, then the tables left out and the reference's columns the run
        lacks, then why each differing table differs: the reason it could not be compared,
        or its cells (the first :data:`SHOWN`) with what each was allowed."""
        out = [self.summary()]
        if self.config:
            out.append(f"note: the runs' configs differ in {', '.join(self.config)}")
        if self.left_out:
            out.append(
                f"not compared: {', '.join(self.left_out)} (left out of the reference's record)"
            )
        unheld = [f"{t.table}.{c}" for t in self.tables for c in t.unheld]
        if unheld:
            out.append(
                f"held from the reference's side only (this run lacks them): {', '.join(unheld)}"
            )
        shown = 0
        for table in self.tables:
            if table.why is not None:
                out.append(f"  {table.table}: {table.why}")
            for cell in table.cells:
                if shown < SHOWN:
                    out.append(f"  {cell.line()}")
                shown += 1
        if shown > SHOWN:
            out.append(f"  ... and {shown - SHOWN} more cells")
        return out


def _manifest(folder: Path) -> dict[str, Any]:
    from attncoda.store import read_json
    from attncoda.store.manifest import MANIFEST

    path = folder / MANIFEST
    if not path.is_file():
        raise AttncodaError(
            f"{str(folder)!r} is not a run folder (no manifest.json): give the folder a run "
            "wrote (attncoda demo, reproduce or an experiment's --out)"
        )
    found = read_json(path)
    if not (folder / "tables").is_dir():
        raise AttncodaError(
            f"run folder {str(folder)!r} has no tables yet: finish the run first (run the "
            "same command again)"
        )
    return dict(found)


def _same_units(frame: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` of the units ``like`` has rows of (by the columns of
    :data:`_UNIT_KEYS` both have), in ``frame``'s order."""
    keys = [k for k in _UNIT_KEYS if k in frame.columns and k in like.columns]
    if not keys:
        return frame
    wanted = set(like[keys].astype(str).itertuples(index=False, name=None))
    rows = frame[keys].astype(str).itertuples(index=False, name=None)
    return frame[[row in wanted for row in rows]].reset_index(drop=True)


def _config_differs(a: RunConfig, b: RunConfig) -> tuple[str, ...]:
    """What two runs' configs differ in other than where and how they computed (the options
    of :data:`_WHERE`), by attribute: ``models``, ``settings``, ``seed`` ..."""
    found = [
        f.name
        for f in dataclasses.fields(a)
        if f.name != "options" and getattr(a, f.name) != getattr(b, f.name)
    ]
    found += [
        f.name
        for f in dataclasses.fields(a.options)
        if f.name not in _WHERE and getattr(a.options, f.name) != getattr(b.options, f.name)
    ]
    return tuple(found)


def compare(
    run: str | Path, reference: str | Path | None = None, *, subset: bool = False
) -> Comparison:
    """Compare the tables of two run folders, each column by its rule.

    Parameters
    ----------
    run : str or path
        A finished run folder.
    reference : str or path, optional
        Another one; default: the reference run recorded from ``make demo`` that ships
        with the package (:func:`reference_run`).
    subset : bool
        ``run`` made some units of ``reference``'s only (an experiment or two, some
        models): compare the tables ``run`` holds, each with the rows of ``reference`` of
        the same units (``experiment``, ``model`` and ``revision``, those a table has). A
        run that holds no table is not the same evidence.

    Returns
    -------
    Comparison
        ``.same``, ``.summary()`` (``same evidence within rounding: 16 tables, largest
        difference 0.31 of its allowance (flips.ci_low)``) and ``.lines()``.

    Raises
    ------
    AttncodaError
        A folder that is not a finished run folder.
    """
    from attncoda.store.files import read_table

    run = Path(run)
    other = Path(reference) if reference is not None else reference_run()
    mine, theirs = _manifest(run), _manifest(other)
    # The shipped reference is the shipped reference however it is named.
    shipped = other.resolve() == reference_run().resolve()
    left_out = set(theirs.get("left_out", ())) if shipped else set()
    folders = (run,) if subset else (run, other)
    names = sorted({p.stem for folder in folders for p in (folder / "tables").glob("*.parquet")})
    held = held_columns()
    tables = []
    for name in names:
        paths = [folder / "tables" / f"{name}.parquet" for folder in (run, other)]
        if name in left_out and not paths[1].is_file():
            continue
        missing = [str(p.parent.parent) for p in paths if not p.is_file()]
        if missing:
            tables.append(TableComparison(name, why=f"no table in {' and '.join(missing)}"))
            continue
        mine_, theirs_ = (read_table(p) for p in paths)
        if subset:
            theirs_ = _same_units(theirs_, mine_)
        tables.append(compare_frames(name, mine_, theirs_, held.get(name)))
    config = _config_differs(*(RunConfig.from_json(m["config"]) for m in (mine, theirs)))
    shown_left_out = tuple(
        sorted(n for n in left_out if (run / "tables" / f"{n}.parquet").is_file())
    )
    return Comparison(run, other, tuple(tables), shown_left_out, config)
