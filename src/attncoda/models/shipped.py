"""The shipped Bigram-Backcopy checkpoints: a training series read as the paper read Pythia's.

attncoda ships, as package data under ``attncoda/models/assets/``, checkpoints trained once
with ``train-tiny`` on the Bigram-Backcopy task (Guo et al. 2024), on which a BOS sink grows:

- ``bigram-backcopy``: the demo's series, seed 0 with the task's defaults, its 13 checkpoints
  ``step0`` .. ``step2000`` on Pythia's schedule; ``collapse`` reads it;
- the unseen runs, their last checkpoint each: runs the shipped predictor never saw, to which
  the demo applies it (:data:`UNSEEN`).

Each checkpoint is a Hugging Face folder (safetensors, config, tokenizer and the
``attncoda_train.json`` record of its recipe). ``manifest.json`` beside them gives every
checkpoint's recipe, step and the sha256 of each file, and the CPU, torch and transformers
that trained them (``scripts/ship_checkpoints.py`` wrote it). Training is not bit-identical
across CPU vendors (docs/design.md, "Shipped checkpoints"): the demo, ``reproduce`` and the
predictor read these files, so their figures do not depend on the machine that runs them.

Specs name them as hub revisions are named: ``bigram-backcopy`` is the series (for
``collapse``) or, as one model, its last checkpoint, as a hub repository's ``main`` is;
``bigram-backcopy@step512`` is one checkpoint; ``bigram-backcopy-seed2`` an unseen run's.

**The unseen runs' seeds.** The predictor's training runs used seeds 0 and 1
(``experiments/data/PROVENANCE.md``). Each unseen run takes a seed of its own that no training
run used, chosen on 2026-12-02 before the predictor was applied to any of them: seed 2 (the
defaults), seed 3 (5 trigger tokens), seed 4 (the small size). So no unseen run shares a seed,
a checkpoint or a recipe with a training run: none shares its lineage.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError

__all__ = [
    "ASSETS",
    "MANIFEST",
    "SERIES",
    "SHIPPED",
    "UNSEEN",
    "ShippedRun",
    "checkpoint_folder",
    "is_shipped",
    "manifest",
    "shipped_table",
    "verify",
]

#: Where the shipped checkpoints are, inside the installed package.
ASSETS = Path(__file__).resolve().parent / "assets"
#: The manifest's file name, in :data:`ASSETS`.
MANIFEST = "manifest.json"
#: The demo's series.
SERIES = "bigram-backcopy"
_TASK = "bigram-backcopy"
#: Pythia's schedule for 2000 steps (:func:`attncoda.training.train.checkpoint_steps`).
_SERIES_STEPS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000)


@dataclass(frozen=True)
class ShippedRun:
    """One shipped training run.

    Attributes
    ----------
    recipe : dict
        Its :class:`attncoda.training.train.TrainConfig` fields.
    steps : tuple of int
        The checkpoints shipped, increasing.
    role : str
        ``"series"`` (the demo's collapse series) or ``"unseen"`` (a run the shipped
        predictor never saw; only its last checkpoint ships).
    """

    recipe: dict[str, Any]
    steps: tuple[int, ...]
    role: str

    @property
    def last(self) -> int:
        """The last shipped step."""
        return self.steps[-1]


#: The unseen runs: name -> TrainConfig fields (seeds chosen before any verdict, see above).
UNSEEN: dict[str, dict[str, Any]] = {
    "bigram-backcopy-seed2": {"task": _TASK, "seed": 2, "steps": 1000},
    "bigram-backcopy-triggers5": {"task": _TASK, "seed": 3, "triggers": 5, "steps": 1000},
    "bigram-backcopy-small": {"task": _TASK, "seed": 4, "size": "small", "steps": 500},
}
#: Every shipped run by name: the series, then the unseen runs.
SHIPPED: dict[str, ShippedRun] = {
    SERIES: ShippedRun({"task": _TASK, "seed": 0}, _SERIES_STEPS, "series"),
    **{
        name: ShippedRun(recipe, (int(recipe["steps"]),), "unseen")
        for name, recipe in UNSEEN.items()
    },
}


def is_shipped(name: str) -> bool:
    """Whether ``name`` (a spec without its ``@stepN``) names a shipped run."""
    return name in SHIPPED


@functools.lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    """The shipped checkpoints' ``manifest.json``.

    Raises
    ------
    AttncodaError
        When the package holds no manifest (an install without its package data).
    """
    path = ASSETS / MANIFEST
    if not path.is_file():
        raise AttncodaError(
            f"the shipped checkpoints' manifest {path} is missing: reinstall attncoda with its "
            f"package data (pip install -e .)"
        )
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def checkpoint_folder(name: str, revision: str | None = None) -> Path:
    """The folder of shipped checkpoint ``name@revision``.

    Parameters
    ----------
    name : str
        A shipped run (:data:`SHIPPED`).
    revision : str, optional
        ``"stepN"``; None: the run's last checkpoint (as a hub repository's ``main``).

    Raises
    ------
    AttncodaError
        An unknown run, a revision that is not ``stepN``, or a step that is not shipped (the
        message lists those that are).
    """
    run = SHIPPED.get(name)
    if run is None:
        raise AttncodaError(f"{name!r} is no shipped checkpoint series: use one of {_names()}")
    step = run.last
    if revision is not None:
        text = revision.removeprefix("step")
        if not revision.startswith("step") or not text.isdigit():
            raise AttncodaError(
                f"shipped checkpoint {name}@{revision}: {revision!r} is not a checkpoint name "
                f"stepN; use one of {_steps(name)}"
            )
        step = int(text)
    if step not in run.steps:
        raise AttncodaError(
            f"shipped series {name!r} has no checkpoint step{step}: use one of {_steps(name)}"
        )
    return ASSETS / name / f"step{step}"


def verify() -> list[str]:
    """The shipped files whose sha256 is not the manifest's, or that are missing, as text.

    Returns
    -------
    list of str
        Empty when every file of every shipped checkpoint matches its manifest.
    """
    from attncoda.models.gguf import sha256_file

    wrong = []
    for entry in manifest()["checkpoints"]:
        folder = ASSETS / entry["name"] / f"step{entry['step']}"
        for file, digest in entry["files"].items():
            path = folder / file
            if not path.is_file():
                wrong.append(f"{path}: missing")
            elif sha256_file(path) != digest:
                wrong.append(f"{path}: sha256 is not the manifest's")
    return wrong


def shipped_table() -> list[dict[str, Any]]:
    """One row per shipped run, for ``attncoda models``: its spec, role, recipe and
    checkpoints."""
    rows = []
    for name, run in SHIPPED.items():
        recipe = ", ".join(f"{k} {v}" for k, v in run.recipe.items() if k != "task")
        rows.append(
            {
                "spec": name,
                "role": run.role,
                "recipe": recipe,
                "checkpoints": (
                    f"{len(run.steps)}: step{run.steps[0]} .. step{run.last}"
                    if len(run.steps) > 1
                    else f"step{run.last}"
                ),
            }
        )
    return rows


def _names() -> str:
    return ", ".join(SHIPPED)


def _steps(name: str) -> str:
    return ", ".join(f"step{s}" for s in SHIPPED[name].steps)
