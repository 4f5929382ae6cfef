"""What a report section reads: the run folder's tables, its sink spec and its settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Context", "NeededTables", "OptionalTables"]


@dataclass(frozen=True)
class Context:
    """What every section reads.

    Attributes
    ----------
    frames : mapping of str to pandas.DataFrame
        The run folder's tables by name, which a section reads as attributes.
    sink : str
        The sink spec of the run (manifest ``config.sink``), named in every convention.
    settings : mapping of str to Settings
        Each experiment's settings as the run recorded them (its frozen ``Settings``), where
        a section states one (prune's window length).
    """

    frames: Mapping[str, pd.DataFrame]
    sink: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tables(self) -> NeededTables:
        """The tables the section needs, by name (``ctx.tables.flips``)."""
        return NeededTables(self.optional)

    @property
    def optional(self) -> OptionalTables:
        """Every table by name, ``None`` where the run lacks it (``ctx.optional.train``)."""
        return OptionalTables(self.frames)

    def holds(self, names: Iterable[str]) -> bool:
        """Whether the run holds every table ``names`` lists, with rows (a view's needs)."""
        return all(getattr(self.optional, name) is not None for name in names)


class OptionalTables:
    """A run folder's tables read as attributes: table ``name`` is ``.name``, ``None`` when
    the folder lacks it or it has no rows."""

    def __init__(self, frames: Mapping[str, pd.DataFrame]) -> None:
        self._frames = frames

    def __getattr__(self, name: str) -> pd.DataFrame | None:
        if name.startswith("_"):  # not a table: copy, pickle and their kin ask for these
            raise AttributeError(name)
        frame = self._frames.get(name)
        return None if frame is None or len(frame) == 0 else frame


class NeededTables:
    """A run folder's tables read as attributes, each one a section needs (the report builds
    it only where the run holds its ``View.needs``): one the run lacks is a ``KeyError``."""

    def __init__(self, optional: OptionalTables) -> None:
        self._optional = optional

    def __getattr__(self, name: str) -> pd.DataFrame:
        frame = getattr(self._optional, name)
        if frame is None:
            raise KeyError(name)
        return frame
