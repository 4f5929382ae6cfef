"""A benchmark with a target says when it misses it: its exit status is 1 and its last lines
name each miss (``MISSED: ...``); 0 when every target it measured is met."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["verdict"]


def _met(row: Any) -> bool | None:
    met = row.get("met") if isinstance(row, dict) else getattr(row, "met", None)
    return None if met is None else bool(met)


def _name(row: Any) -> str:
    if isinstance(row, dict):
        value = row.get("value")
        shown = f" = {value:.3g}" if isinstance(value, (int, float)) else ""
        return f"{row.get('name', '?')}{shown} (target {row.get('target', '?')})"
    return f"{getattr(row, 'name', row)} (ratio {getattr(row, 'ratio', float('nan')):.3g})"


def verdict(rows: Iterable[Any], extra: Iterable[str] = ()) -> int:
    """Print each row whose ``met`` is False (dicts or objects with ``met``) and each of
    ``extra`` (misses said in words); return the exit status: 1 when anything missed."""
    missed = [_name(row) for row in rows if _met(row) is False] + list(extra)
    for line in missed:
        print(f"MISSED: {line}", flush=True)
    if not missed:
        print("every target met", flush=True)
    return 1 if missed else 0
