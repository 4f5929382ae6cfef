"""How the report and its figures name a model: ``model@revision (family)``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.store.runs import NO_REVISION

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["groups", "is_missing", "model_label", "one_model"]


def is_missing(value: Any) -> bool:
    """Whether ``value`` is ``None``, NaN or pandas' ``NA``."""
    if value is None:
        return True
    try:
        return bool(math.isnan(float(value)))
    except (TypeError, ValueError):
        return str(value) in ("<NA>", "NaT")


def model_label(model: Any, revision: Any = NO_REVISION) -> str:
    """``model`` or ``model@revision`` (no revision: ``"-"``)."""
    rev = "" if is_missing(revision) else str(revision)
    return str(model) if rev in ("", NO_REVISION) else f"{model}@{rev}"


def groups(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(model_label, rows)`` per (model, revision), in order of first appearance; the
    label names the model family too when the table has a ``family`` column."""
    keys = list(dict.fromkeys(zip(frame["model"], frame["revision"], strict=True)))
    out = []
    for model, revision in keys:
        rows = frame[(frame["model"] == model) & (frame["revision"] == revision)]
        label = model_label(model, revision)
        if "family" in rows.columns and len(rows) and not is_missing(rows["family"].iloc[0]):
            label = f"{label} ({rows['family'].iloc[0]})"
        out.append((label, rows))
    return out


def one_model(frame: pd.DataFrame, what: str) -> str:
    """The label of the one model (and revision) whose rows ``frame`` holds.

    Raises
    ------
    AttncodaError
        ``frame`` holds several models (the message names them and ``what`` the table).
    """
    found = groups(frame)
    if len(found) != 1:
        raise AttncodaError(
            f"the {what} table must hold one model; got {[label for label, _ in found]}"
        )
    return found[0][0]
