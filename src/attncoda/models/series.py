"""Checkpoint series: Pythia-style hub revisions, the shipped series, or a local folder of
``step{N}`` checkpoints.

A *series spec* names at least two checkpoints of one model, in one of three forms:

- ``"owner/name@rev,rev,..."``: hub revisions of one repository, each ``stepN``, e.g.
  ``"EleutherAI/pythia-70m@step0,step512,step143000"``; every point's spec is
  ``"owner/name@stepN"``, which :func:`attncoda.models.load.load_model` reads;
- a shipped series (:mod:`attncoda.models.shipped`): ``"bigram-backcopy"`` is all its
  checkpoints, ``"bigram-backcopy@step0,step2000"`` some of them, named as hub revisions;
- a local folder holding ``step{N}`` checkpoint folders (what
  :func:`attncoda.training.train.train_tiny` writes).

Points are returned in increasing step order.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from attncoda._errors import AttncodaError
from attncoda.models.shipped import SHIPPED, is_shipped
from attncoda.models.spec import is_hub_id, parse_spec

__all__ = ["SeriesPoint", "parse_series", "pythia_revisions"]

_STEP = re.compile(r"step(\d+)")
_FORMS = (
    "write 'owner/name@step0,step512,...' (hub revisions named stepN, at least two), name a "
    "shipped series ('bigram-backcopy', or 'bigram-backcopy@step0,step2000') or give a local "
    "folder of step<N> checkpoint folders"
)


@dataclass(frozen=True)
class SeriesPoint:
    """One checkpoint of a series.

    Attributes
    ----------
    step : int
        Training step (the ``N`` of ``stepN``).
    label : str
        ``"stepN"``.
    spec : str
        What :func:`attncoda.models.load.load_model` loads: ``"owner/name@stepN"`` or
        the checkpoint folder's path.
    """

    step: int
    label: str
    spec: str


def pythia_revisions() -> list[str]:
    """The 154 checkpoint revisions of every Pythia model, in training order.

    ``step0``; the powers of two ``step1``, ``step2``, ``step4``, ..., ``step512`` (10
    names); then ``step1000``, ``step2000``, ..., ``step143000`` every 1000 steps (143
    names). ``step143000`` is the final model (the ``main`` branch).

    Returns
    -------
    list of str
        154 distinct names, increasing in step.

    Examples
    --------
    >>> names = pythia_revisions()
    >>> len(names), names[:4], names[-1]
    (154, ['step0', 'step1', 'step2', 'step4'], 'step143000')
    """
    steps = [0, *(2**i for i in range(10)), *range(1000, 143001, 1000)]
    return [f"step{step}" for step in steps]


def _single(spec: str) -> AttncodaError:
    return AttncodaError(
        f"series spec {spec!r} names a single checkpoint: a series needs at least 2 "
        f"checkpoints; {_FORMS}"
    )


def parse_series(spec: str | os.PathLike[str]) -> list[SeriesPoint]:
    """Parse a series spec into its checkpoints, ordered by step.

    Parameters
    ----------
    spec : str or path-like
        ``"owner/name@stepA,stepB,..."`` or a local folder of ``step{N}`` folders (see the
        module docstring). Revisions may be given in any order; any ``stepN`` is accepted
        (Pythia's are :func:`pythia_revisions`).

    Returns
    -------
    list of SeriesPoint
        At least two points, increasing in step.

    Raises
    ------
    AttncodaError
        For a revision that is not ``stepN``, a repeated step, a spec that names fewer than
        two checkpoints, or anything that is neither a hub id with revisions nor a folder of
        ``step{N}`` folders.
    """
    text = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
    if not isinstance(text, str) or not text.strip():
        raise AttncodaError(f"series spec must be a non-empty string, got {spec!r}; {_FORMS}")
    path = Path(text).expanduser()
    if path.is_dir():
        return _local(text, path)
    if "@" not in text and is_shipped(text):
        steps = SHIPPED[text].steps
        if len(steps) < 2:
            raise _single(text)
        return [SeriesPoint(s, f"step{s}", f"{text}@step{s}") for s in steps]
    if "@" not in text:
        from attncoda.models.load import embedded_models

        if is_hub_id(text) or text in embedded_models() or path.is_file():
            raise _single(text)
        raise AttncodaError(f"cannot read series spec {text!r}: {_FORMS}")
    parsed = parse_spec(text)
    if parsed.revision is None:
        repo = text.partition("@")[0]
        raise AttncodaError(
            f"series spec {text!r}: {repo!r} before '@' is not a hub id 'owner/name' nor a "
            f"shipped series; {_FORMS}"
        )
    repo, revisions = parsed.name, parsed.revision
    points: dict[int, SeriesPoint] = {}
    for raw in revisions.split(","):
        name = raw.strip()
        match = _STEP.fullmatch(name)
        if match is None:
            raise AttncodaError(
                f"series spec {text!r}: revision {name!r} is not a checkpoint name stepN "
                f"(Pythia's are step0, step1, step2, step4, ..., step512, step1000, ..., "
                f"step143000)"
            )
        step = int(match.group(1))
        if step in points:
            raise AttncodaError(f"series spec {text!r}: step {step} is named twice")
        points[step] = SeriesPoint(step, f"step{step}", f"{repo}@step{step}")
    if len(points) < 2:
        raise _single(text)
    return [points[step] for step in sorted(points)]


def _local(text: str, path: Path) -> list[SeriesPoint]:
    from attncoda.training.checkpoints import list_checkpoints

    if (path / "config.json").is_file():
        raise _single(text)
    found = list_checkpoints(path)
    if len(found) < 2:
        raise _single(text)
    return [SeriesPoint(step, f"step{step}", str(folder)) for step, folder in found]
