"""One document of a corpus: what :mod:`attncoda.data.corpus` reads and
:mod:`attncoda.data.windows` cuts into windows (its own module, so neither imports the other
back)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Document"]


@dataclass(frozen=True)
class Document:
    """One document of a corpus.

    Attributes
    ----------
    id : str
        Identifier, unique within the corpus.
    text : str
        The document text.
    title : str
        A human-readable title; ``""`` when the source has none.
    """

    id: str
    text: str
    title: str = ""
