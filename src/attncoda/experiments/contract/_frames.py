"""Two frames of one table compared cell by cell, each column by its rule
(:mod:`attncoda.experiments.contract._held`; docs/design.md, "The same evidence, by one
rule"): :func:`compare_frames` returns a :class:`TableComparison`, the cells outside their
allowance (:class:`Cell`) and the largest difference in units of its allowance."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attncoda.experiments.contract._held import (
    BOUND_RTOL,
    FLOAT64_SLACK,
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
)
from attncoda.experiments.contract._rounding import FLOAT32_UNIT_ROUNDOFF

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["Cell", "TableComparison", "compare_frames"]


def _number(x: float) -> str:
    """``x`` in few digits: a whole number as one (``13897``), else 3 significant digits."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.3g}"


@dataclass(frozen=True)
class Cell:
    """One cell outside its allowance: its table, row (position and the row's key values),
    column, both values, their difference and what was allowed (``inf`` differences:
    nulls, infinities or labels that do not match)."""

    table: str
    row: int
    key: str
    column: str
    a: Any
    b: Any
    difference: float
    allowed: float

    def line(self) -> str:
        """The cell in words: ``flips[smollm2 cosine].flips: 47770 against 47770 (...)``."""
        if math.isfinite(self.difference):
            gap = f"differ by {_number(self.difference)}, allowed {_number(self.allowed)}"
        else:
            gap = "differ"
        return f"{self.table}[{self.key}].{self.column}: {self.a} against {self.b} ({gap})"


@dataclass(frozen=True)
class TableComparison:
    """One table of two runs compared.

    Attributes
    ----------
    table : str
    why : str or None
        Why the two cannot be compared cell by cell (a table or a column missing on one
        side, a column of another dtype, rows of another number, named); None when they
        were.
    cells : tuple of Cell
        Every cell outside its allowance.
    worst : float
        The largest difference of a cell in units of its allowance (0.0 where every cell
        is equal; ``inf`` where a cell differs with nothing allowed).
    worst_column : str or None
        The column of ``worst``.
    unheld : tuple of str
        The reference's columns the run lacks (recorded before they existed): held from
        the reference's side, compared nowhere.
    """

    table: str
    why: str | None = None
    cells: tuple[Cell, ...] = ()
    worst: float = 0.0
    worst_column: str | None = None
    unheld: tuple[str, ...] = ()

    @property
    def same(self) -> bool:
        """Whether every cell lies within its allowance."""
        return self.why is None and not self.cells


#: Text columns that describe a row rather than name it: left out of a row's key.
_NOT_KEYS = ("note", "reason", "method", "heads", "title", "label_from", "label_to")
#: Integer columns that name a row (a layer, a head, a bin, a position, a step).
_KEY_INTEGERS = (
    "layer", "head", "k", "bin", "position", "step", "pair_from", "pair_to", "head_index",
    "sink_share_bin", "sink_gap_bin", "head_a", "head_b",
)  # fmt: skip
#: Rows a summary names before it says how many more differ.
_NAMED_ROWS = 5


def _key_columns(frame: pd.DataFrame) -> list[str]:
    import pandas as pd

    keys = []
    for column in frame.columns:
        dtype = frame[column].dtype
        text = pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype)
        if (text and not column.endswith(_NOT_KEYS)) or column in _KEY_INTEGERS:
            keys.append(column)
    return keys


def _row_keys(frame: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """Each row's key: its values of ``keys``, joined by spaces."""
    return [" ".join(str(v) for v in row) for row in frame[list(keys)].itertuples(index=False)]


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    import numpy as np

    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    return frame[column].to_numpy(np.float64, na_value=np.nan)


def _stated(b: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """The reference's stated bounds in ``columns``, summed per row (a null bound: 0)."""
    import numpy as np

    total = np.zeros(len(b))
    for column in columns:
        total = total + np.nan_to_num(np.abs(_floats(b, column)), nan=0.0)
    return total


def _allowance(rule: Held, a: pd.DataFrame, b: pd.DataFrame, column: str) -> np.ndarray:
    """Per row, what ``column`` may differ by under ``rule`` (a numeric rule), read from the
    reference's row ``b``."""
    import numpy as np
    import pandas as pd

    x, y = _floats(a, column), _floats(b, column)
    size = np.abs(y)
    # A count is a whole number: it carries no float rounding, only what its rule states.
    slack = 0.0 if pd.api.types.is_integer_dtype(b[column].dtype) else FLOAT64_SLACK * size
    if isinstance(rule, RowStatistic):
        n = np.fmax(np.nan_to_num(_floats(b, rule.keys), nan=1.0), 1.0)
        magnitude = _stated(b, rule.magnitude) if rule.magnitude else size
        return FLOAT32_UNIT_ROUNDOFF * (n + 2.0) * (magnitude + np.log(n))
    if isinstance(rule, Stated):
        return _stated(b, rule.bounds) + slack
    if isinstance(rule, Bound):
        # A count's unit is one; a rate's is one over the reference's count, none where the
        # table lacks it (the bound is then held to its share of itself).
        unit = np.ones_like(y) if rule.per is None else np.zeros_like(y)
        if rule.per is not None and rule.per in b.columns:
            with np.errstate(divide="ignore"):
                unit = np.nan_to_num(rule.scale / _floats(b, rule.per), nan=0.0, posinf=0.0)
        return BOUND_RTOL * size + rule.units * unit + slack
    if isinstance(rule, Exponent):
        return size * np.expm1(_stated(b, rule.bounds)) + slack
    if isinstance(rule, Share):
        # num_a / den_a - num_b / den_b = (d num - share_b d den) / den_a, exactly: over the
        # smaller denominator, whichever run holds it.
        den, den_b = _floats(a, rule.denominator), _floats(b, rule.denominator)
        moves = [np.abs(_floats(a, c) - _floats(b, c)) for c in rule.numerators]
        with np.errstate(divide="ignore", invalid="ignore"):
            smaller = np.fmin(np.abs(den), np.abs(den_b))
            moved = (np.max(moves, axis=0) + size * np.abs(den - den_b)) / smaller
        return np.nan_to_num(moved, nan=0.0, posinf=np.inf) + slack
    return np.zeros_like(x)


def _numeric_cells(
    rule: Held, a: pd.DataFrame, b: pd.DataFrame, column: str, shown: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(differs, difference, allowed)`` per row of a numeric column: nulls must match,
    an infinity must be the same infinity, finite values differ by at most the allowance
    (plus ``shown``: a unit of the last digit a printed value shows)."""
    import numpy as np

    x, y = _floats(a, column), _floats(b, column)
    allowed = _allowance(rule, a, b, column)
    if shown is not None:
        allowed = allowed + shown
    finite = np.isfinite(x) & np.isfinite(y)
    with np.errstate(invalid="ignore"):
        difference = np.where(finite, np.abs(y - x), np.inf)
    same_special = (np.isnan(x) & np.isnan(y)) | (~finite & (x == y))
    difference = np.where(same_special, 0.0, difference)
    allowed = np.where(finite, allowed, 0.0)
    return difference > allowed, difference, allowed


def _equal_cells(a: pd.DataFrame, b: pd.DataFrame, column: str) -> np.ndarray:
    """Per row, whether the cells of a :class:`Same` column differ (nulls where nulls)."""
    left, right = a[column].reset_index(drop=True), b[column].reset_index(drop=True)
    real = ~left.isna() & ~right.isna()
    differs = (left.isna() != right.isna()) | (real & (left.astype(str) != right.astype(str)))
    return differs.to_numpy(bool)


def _edges(b: pd.DataFrame, columns: str | tuple[str, ...] | None) -> np.ndarray:
    """Per row, whether the reference flags an edge in ``columns`` (any of them; False
    where it has none)."""
    import numpy as np

    flags = np.zeros(len(b), bool)
    for column in (columns,) if isinstance(columns, str) else columns or ():
        if column in b.columns:
            flags |= b[column].fillna(False).to_numpy(bool)
    return flags


def _groups(frame: pd.DataFrame, within: Sequence[str]) -> list[np.ndarray]:
    """The row positions of each group of equal ``within`` values (those present)."""
    import numpy as np

    keys = [c for c in within if c in frame.columns]
    if not keys:
        return [np.arange(len(frame))]
    codes = frame[keys].astype(str).agg("\x1f".join, axis=1).to_numpy()
    return [np.flatnonzero(codes == code) for code in dict.fromkeys(codes)]


def _coordinate_cells(
    rule: Coordinates, a: pd.DataFrame, b: pd.DataFrame, column: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, whether its point's distances to the other points of its group differ by
    more than the reference's stated bound of the group."""
    import numpy as np

    n = len(a)
    differs = np.zeros(n, bool)
    difference, allowed = np.zeros(n), np.zeros(n)
    points = [np.stack([_floats(f, column), _floats(f, rule.partner)], -1) for f in (a, b)]
    bound = _stated(b, (rule.bound,))
    for rows in _groups(b, rule.within):
        pa, pb = points[0][rows], points[1][rows]
        if np.isnan(pa).any() or np.isnan(pb).any():
            gap = np.where(np.isnan(pa).any(-1) == np.isnan(pb).any(-1), 0.0, np.inf)
            difference[rows], allowed[rows] = gap, 0.0
            differs[rows] = gap > 0
            continue
        da = np.linalg.norm(pa[:, None] - pa[None], axis=-1)
        db = np.linalg.norm(pb[:, None] - pb[None], axis=-1)
        room = float(bound[rows].max(initial=0.0))
        gap = np.abs(da - db).max(axis=1, initial=0.0)
        difference[rows], allowed[rows] = gap, room
        differs[rows] = gap > room
    return differs, difference, allowed


def _label_cells(rule: Labels, a: pd.DataFrame, b: pd.DataFrame, column: str) -> np.ndarray:
    """Per row, whether its label breaks the one-to-one map between the two runs' labels
    in its group (rows on the reference's edge left out of the map)."""
    import numpy as np

    differs = np.zeros(len(a), bool)
    la, lb = a[column].astype(str).to_numpy(), b[column].astype(str).to_numpy()
    edge = _edges(b, rule.edge)
    for rows in _groups(b, rule.within):
        held = rows[~edge[rows]]
        forward: dict[str, set[str]] = {}
        backward: dict[str, set[str]] = {}
        for p, q in set(zip(la[held], lb[held], strict=True)):
            forward.setdefault(p, set()).add(q)
            backward.setdefault(q, set()).add(p)
        bad = {p for p, qs in forward.items() if len(qs) > 1}
        bad_b = {q for q, ps in backward.items() if len(ps) > 1}
        differs[held] = [p in bad or q in bad_b for p, q in zip(la[held], lb[held], strict=True)]
    return differs


def _why(a: pd.DataFrame, b: pd.DataFrame) -> str | None:
    """Why two frames of a table cannot be compared cell by cell: columns the reference
    lacks, columns in another order, another dtype, or other rows (named); None when
    they can."""
    extra = [c for c in a.columns if c not in b.columns]
    if extra:
        return f"columns the reference lacks: {extra}"
    if [c for c in b.columns if c in a.columns] != list(a.columns):
        return "columns in another order"
    dtypes = [
        f"{c} is {a[c].dtype} here, {b[c].dtype} in the reference"
        for c in a.columns
        if str(a[c].dtype) != str(b[c].dtype)
    ]
    if dtypes:
        return "; ".join(dtypes)
    if len(a) == len(b):
        return None
    keys = [k for k in _key_columns(b) if k in a.columns]
    mine, theirs = _row_keys(a, keys), _row_keys(b, keys)
    parts = [f"{len(a)} rows against {len(b)}"]
    for label, rows, other in (
        ("only here", mine, theirs),
        ("only in the reference", theirs, mine),
    ):
        found = [r for r in dict.fromkeys(rows) if r not in set(other)]
        if found:
            more = f" and {len(found) - _NAMED_ROWS} more" if len(found) > _NAMED_ROWS else ""
            parts.append(f"{label}: {', '.join(found[:_NAMED_ROWS])}{more}")
    return "; ".join(parts)


def compare_frames(
    table: str,
    a: pd.DataFrame,
    b: pd.DataFrame,
    rules: Mapping[str, Held] | None = None,
    shown: Mapping[str, np.ndarray] | None = None,
) -> TableComparison:
    """Table ``table`` of two runs, ``a`` and the reference ``b``, compared cell by cell.

    Parameters
    ----------
    table : str
        The table's name (for the cells' names).
    a, b : pandas.DataFrame
        The run's version and the reference's, rows in the same order. Every allowance is
        read from ``b``'s row; a column of ``b`` that ``a`` lacks is held from ``b``'s
        side and compared nowhere (:attr:`TableComparison.unheld`).
    rules : mapping of str to Held, optional
        The columns' declared rules (:func:`held_by`: :class:`Same` for the others).
    shown : mapping of str to ndarray, optional
        Per column, per row, one unit of the last digit a printed value shows (a value read
        back from a page or a notebook): added to the allowance (a :class:`Same` number
        is then held to it alone).

    Returns
    -------
    TableComparison
    """
    import numpy as np
    import pandas as pd

    rules = dict(rules or {})
    unheld = tuple(c for c in b.columns if c not in a.columns)
    why = _why(a, b)
    if why is not None:
        return TableComparison(table, why=why, unheld=unheld)
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    keys = _key_columns(b)
    cells: list[Cell] = []
    worst, worst_column = 0.0, None
    for column in a.columns:
        rule = held_by(rules, column)
        numeric = pd.api.types.is_numeric_dtype(b[column]) and not pd.api.types.is_bool_dtype(
            b[column]
        )
        difference = allowed = None
        extra = None if shown is None else shown.get(column)
        if isinstance(rule, Labels):
            differs = _label_cells(rule, a, b, column)
        elif isinstance(rule, Verdict):
            differs = _equal_cells(a, b, column) & ~_edges(b, rule.edge)
        elif isinstance(rule, Coordinates) and numeric:
            differs, difference, allowed = _coordinate_cells(rule, a, b, column)
        elif not numeric or (isinstance(rule, Same) and extra is None):
            differs = _equal_cells(a, b, column)
        else:
            differs, difference, allowed = _numeric_cells(rule, a, b, column, extra)
        edge = getattr(rule, "edge", None)
        on_edge = _edges(b, edge)
        if edge is not None and not isinstance(rule, (Labels, Verdict)):
            differs = differs & ~on_edge
        if difference is not None and allowed is not None:
            # A cell on its reference's edge may differ by anything: it uses no allowance.
            with np.errstate(divide="ignore", invalid="ignore"):
                units = np.where((difference == 0) | on_edge, 0.0, difference / allowed)
            if units.size and float(np.nanmax(units)) > worst:
                worst, worst_column = float(np.nanmax(units)), column
        elif differs.any():
            worst, worst_column = math.inf, column
        for row in np.flatnonzero(differs):
            gap = math.inf if difference is None else float(difference[row])
            room = 0.0 if allowed is None else float(allowed[row])
            key = " ".join(str(b.at[row, k]) for k in keys if k != column)
            cells.append(
                Cell(table, int(row), key, column, a.at[row, column], b.at[row, column], gap, room)
            )
    return TableComparison(table, None, tuple(cells), worst, worst_column, unheld)
