"""Model specs: the one parser of ``name@revision`` and of hub ids (docs/design.md, "Models").

A model spec is one of:

- an embedded model name (``smollm2``; ``attncoda models`` lists them);
- a local folder with ``config.json``, or a ``.gguf`` file;
- a hub id ``owner/name``, optionally at a revision: ``owner/name@step512``;
- a shipped checkpoint series (:mod:`attncoda.models.shipped`), optionally at a checkpoint:
  ``bigram-backcopy@step512``.

Only a hub id or a shipped series takes a revision, and the revision is everything after the
*first* ``@`` (so ``a/b@x@y`` is ``a/b`` at revision ``x@y``, which the hub then refuses by
name). A path that exists is never split, even when its name holds an ``@``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HUB_ID", "NO_REVISION", "ModelSpec", "is_hub_id", "join_spec", "parse_spec"]

#: What tables write for a model with no revision.
NO_REVISION = "-"

_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
#: A hub id ``owner/name``: letters, digits, ``._-``, neither part starting or ending with
#: punctuation.
HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")


def is_hub_id(text: str) -> bool:
    """Whether ``text`` is a hub id ``owner/name`` (no revision, no ``--`` or ``..``)."""
    return bool(HUB_ID.fullmatch(text)) and "--" not in text and ".." not in text


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec.

    Attributes
    ----------
    name : str
        The spec without its revision (the hub id, the path or the embedded name).
    revision : str or None
        The text after the first ``@`` of a hub id; ``None`` when there is none. An empty
        revision (``owner/name@``) is kept as ``""`` so that the loader can refuse it.
    """

    name: str
    revision: str | None = None

    @property
    def label(self) -> str:
        """The revision as tables write it (:data:`NO_REVISION` when there is none)."""
        return NO_REVISION if self.revision is None else self.revision

    def __str__(self) -> str:
        return join_spec(self.name, self.revision)


def parse_spec(spec: str) -> ModelSpec:
    """Split ``spec`` into its name and revision.

    Examples
    --------
    >>> parse_spec("EleutherAI/pythia-70m@step512")
    ModelSpec(name='EleutherAI/pythia-70m', revision='step512')
    >>> parse_spec("smollm2")
    ModelSpec(name='smollm2', revision=None)
    >>> parse_spec("a/b@x@y").revision
    'x@y'
    >>> parse_spec("bigram-backcopy@step512")
    ModelSpec(name='bigram-backcopy', revision='step512')
    """
    from attncoda.models.shipped import is_shipped

    if "@" not in spec or Path(spec).expanduser().exists():
        return ModelSpec(spec)
    name, _, revision = spec.partition("@")
    if not (is_hub_id(name) or is_shipped(name)):
        return ModelSpec(spec)
    return ModelSpec(name, revision)


def join_spec(name: str, revision: str | None) -> str:
    """``name@revision``; ``name`` alone for no revision or :data:`NO_REVISION`."""
    return name if revision in (None, NO_REVISION) else f"{name}@{revision}"
