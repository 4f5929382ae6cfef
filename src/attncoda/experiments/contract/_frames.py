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
    BOUND_UNITS,
    Bound,
    Coordinates,
    Held,
    Labels,
    Rounding,
    Same,
    Share,
    Stated,
    held_by,
)

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
        side, rows of another number); None when they were.
    cells : tuple of Cell
        Every cell outside its allowance.
    worst : float
        The largest difference of a cell in units of its allowance (0.0 where every cell
        is equal; ``inf`` where a cell differs with nothing allowed).
    worst_column : str or None
        The column of ``worst``.
    """

    table: str
    why: str | None = None
    cells: tuple[Cell, ...] = ()
    worst: float = 0.0
    worst_column: str | None = None

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


def _key_columns(frame: pd.DataFrame) -> list[str]:
    import pandas as pd

    keys = []
    for column in frame.columns:
        dtype = frame[column].dtype
        text = pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype)
        if (text and not column.endswith(_NOT_KEYS)) or column in _KEY_INTEGERS:
            keys.append(column)
    return keys


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    import numpy as np

    return frame[column].to_numpy(np.float64, na_value=np.nan)


def _numbers(a: pd.DataFrame, b: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    return _floats(a, column), _floats(b, column)


def _allowance(rule: Held, a: pd.DataFrame, b: pd.DataFrame, column: str) -> np.ndarray:
    """Per row, what ``column`` may differ by under ``rule`` (a numeric rule)."""
    import numpy as np
    import pandas as pd

    x, y = _numbers(a, b, column)
    base = rule if isinstance(rule, Rounding) else Rounding()
    # A count is a whole number: it carries no rounding of its own, only what its rule adds.
    counted = pd.api.types.is_integer_dtype(a[column].dtype)
    allowed = np.zeros_like(x) if counted else base.atol + base.rtol * np.fmax(np.abs(x), np.abs(y))
    if isinstance(rule, Stated) and rule.bound in a.columns and rule.bound in b.columns:
        stated = np.fmax(*_numbers(a, b, rule.bound))
        allowed = allowed + np.nan_to_num(stated, nan=0.0)
    elif isinstance(rule, Bound):
        # A count's unit is one; a rate's is one over its count, none where the table
        # lacks the count (a bound read without it is held to its share of itself).
        unit = np.ones_like(x) if rule.per is None else np.zeros_like(x)
        if rule.per is not None and rule.per in a.columns and rule.per in b.columns:
            with np.errstate(divide="ignore"):
                unit = 1.0 / np.fmax(*_numbers(a, b, rule.per))
        allowed = allowed + BOUND_RTOL * np.fmax(np.abs(x), np.abs(y)) + BOUND_UNITS * unit
    elif isinstance(rule, Share):
        parts = (*rule.numerators, rule.denominator)
        if all(p in a.columns and p in b.columns for p in parts):
            den, den_b = _numbers(a, b, rule.denominator)
            moves = [np.abs(q - p) for p, q in (_numbers(a, b, c) for c in rule.numerators)]
            with np.errstate(divide="ignore", invalid="ignore"):
                moved = (np.max(moves, axis=0) + np.abs(x) * np.abs(den_b - den)) / np.abs(den)
            allowed = allowed + np.nan_to_num(moved, nan=0.0, posinf=np.inf)
    return allowed


def _numeric_cells(
    rule: Held, a: pd.DataFrame, b: pd.DataFrame, column: str, shown: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(differs, difference, allowed)`` per row of a numeric column: nulls must match,
    an infinity must be the same infinity, finite values differ by at most the allowance
    (plus ``shown``: a unit of the last digit a printed value shows)."""
    import numpy as np

    x, y = _numbers(a, b, column)
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
    more than :class:`Rounding` of the group's largest distance."""
    import numpy as np

    n = len(a)
    differs = np.zeros(n, bool)
    difference, allowed = np.zeros(n), np.zeros(n)
    if rule.partner not in a.columns or rule.partner not in b.columns:
        return _numeric_cells(Rounding(), a, b, column, None)
    points = [np.stack([_floats(f, column), _floats(f, rule.partner)], -1) for f in (a, b)]
    for rows in _groups(a, rule.within):
        pa, pb = points[0][rows], points[1][rows]
        if np.isnan(pa).any() or np.isnan(pb).any():
            gap = np.where(np.isnan(pa).any(-1) == np.isnan(pb).any(-1), 0.0, np.inf)
            difference[rows], allowed[rows] = gap, 0.0
            differs[rows] = gap > 0
            continue
        da = np.linalg.norm(pa[:, None] - pa[None], axis=-1)
        db = np.linalg.norm(pb[:, None] - pb[None], axis=-1)
        scale = max(float(da.max(initial=0.0)), float(db.max(initial=0.0)))
        room = Rounding().atol + Rounding().rtol * scale
        gap = np.abs(da - db).max(axis=1, initial=0.0)
        difference[rows], allowed[rows] = gap, room
        differs[rows] = gap > room
    return differs, difference, allowed


def _label_cells(rule: Labels, a: pd.DataFrame, b: pd.DataFrame, column: str) -> np.ndarray:
    """Per row, whether its label breaks the one-to-one map between the two runs' labels
    in its group."""
    import numpy as np

    differs = np.zeros(len(a), bool)
    la, lb = a[column].astype(str).to_numpy(), b[column].astype(str).to_numpy()
    for rows in _groups(a, rule.within):
        pairs = set(zip(la[rows], lb[rows], strict=True))
        forward: dict[str, set[str]] = {}
        backward: dict[str, set[str]] = {}
        for p, q in pairs:
            forward.setdefault(p, set()).add(q)
            backward.setdefault(q, set()).add(p)
        bad = {p for p, qs in forward.items() if len(qs) > 1}
        bad_b = {q for q, ps in backward.items() if len(ps) > 1}
        differs[rows] = [p in bad or q in bad_b for p, q in zip(la[rows], lb[rows], strict=True)]
    return differs


def compare_frames(
    table: str,
    a: pd.DataFrame,
    b: pd.DataFrame,
    rules: Mapping[str, Held] | None = None,
    shown: Mapping[str, np.ndarray] | None = None,
) -> TableComparison:
    """Table ``table`` of two runs, ``a`` and ``b``, compared cell by cell.

    Parameters
    ----------
    table : str
        The table's name (for the cells' names).
    a, b : pandas.DataFrame
        Its two versions, rows in the same order.
    rules : mapping of str to Held, optional
        The columns' declared rules (:func:`held_by` gives the others theirs).
    shown : mapping of str to ndarray, optional
        Per column, per row, one unit of the last digit a printed value shows (a value read
        back from a page or a notebook): added to the allowance.

    Returns
    -------
    TableComparison
    """
    import numpy as np
    import pandas as pd

    rules = dict(rules or {})
    if list(a.columns) != list(b.columns):
        only = sorted(set(a.columns) ^ set(b.columns))
        why = f"columns differ: {only}" if only else "columns in another order"
        return TableComparison(table, why=why)
    if len(a) != len(b):
        return TableComparison(table, why=f"{len(a)} rows against {len(b)}")
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    keys = _key_columns(a)
    cells: list[Cell] = []
    worst, worst_column = 0.0, None
    for column in a.columns:
        rule = held_by(rules, column, a[column].dtype)
        numeric = pd.api.types.is_numeric_dtype(a[column]) and not pd.api.types.is_bool_dtype(
            a[column]
        )
        difference = allowed = None
        if isinstance(rule, Labels):
            differs = _label_cells(rule, a, b, column)
        elif isinstance(rule, Coordinates) and numeric:
            differs, difference, allowed = _coordinate_cells(rule, a, b, column)
        elif isinstance(rule, Same) or not numeric or not pd.api.types.is_numeric_dtype(b[column]):
            differs = _equal_cells(a, b, column)
        else:
            extra = None if shown is None else shown.get(column)
            differs, difference, allowed = _numeric_cells(rule, a, b, column, extra)
        if difference is not None and allowed is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                units = np.where(difference == 0, 0.0, difference / allowed)
            if units.size and float(np.nanmax(units)) > worst:
                worst, worst_column = float(np.nanmax(units)), column
        elif differs.any():
            worst, worst_column = math.inf, column
        for row in np.flatnonzero(differs):
            gap = math.inf if difference is None else float(difference[row])
            room = 0.0 if allowed is None else float(allowed[row])
            key = " ".join(str(a.at[row, k]) for k in keys if k != column)
            cells.append(
                Cell(table, int(row), key, column, a.at[row, column], b.at[row, column], gap, room)
            )
    return TableComparison(table, cells=tuple(cells), worst=worst, worst_column=worst_column)
