"""What a report section reads: the run folder's tables, its sink spec and its settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Context"]


@dataclass(frozen=True)
class Context:
    """What every section reads.

    Attributes
    ----------
    tables : mapping of str to pandas.DataFrame
        The run folder's tables by name.
    sink : str
        The sink spec of the run (manifest ``config.sink``), named in every convention.
    settings : mapping of str to Settings
        Each experiment's settings as the run recorded them (its frozen ``Settings``), where
        a section states one (prune's window length).
    """

    tables: Mapping[str, pd.DataFrame]
    sink: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def need(self, name: str) -> pd.DataFrame:
        """Table ``name``, which the section's caller found present (:meth:`get`)."""
        frame = self.get(name)
        if frame is None:
            raise KeyError(name)
        return frame

    def get(self, name: str) -> pd.DataFrame | None:
        """Table ``name``, or ``None`` when the run folder lacks it or it has no rows."""
        frame = self.tables.get(name)
        return None if frame is None or len(frame) == 0 else frame
