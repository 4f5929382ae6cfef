"""Which training model a model is, matched by weights hash, weights sketch (a near copy),
``train-tiny`` recipe or name, and which run a model belongs to (docs/design.md, "The
experiments", predictor)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.training.identity import NEAR_COPY, SKETCH_SIZE, recipe_key, sketch_distance

__all__ = [
    "BY_WEIGHTS",
    "MATCHES",
    "RELATIONS",
    "Relation",
    "TrainingIdentity",
    "identities_from_file",
    "identities_to_file",
    "relation_to_training",
    "run_of",
    "training_match",
    "training_runs",
]

#: How a model is matched to a training model, strongest first (:func:`training_match`).
MATCHES = ("weights", "near copy", "recipe", "name")
#: The matches by the weights themselves (their hash, or their sketch within rounding): such
#: a model *is* a training model, one of the points its support is made of, so it is never
#: subject to abstention (:meth:`~attncoda.experiments.predictor.Predictor.apply`).
BY_WEIGHTS = ("weights", "near copy")
#: How a model stands to a predictor's training models (:func:`relation_to_training`): one of
#: them; a checkpoint of a run that gave training models, between two of them or outside
#: them; or held out (unseen by content, of no such run). Only held-out models test it.
RELATIONS = ("training", "interpolated", "same run", "held out")
#: A checkpoint named by its run and step: ``run@step512``, ``run step512``, ``run/step512``.
_CHECKPOINT_NAME = re.compile(r"^(?P<run>.+?)(?:@|/| )step(?P<step>\d+)$")


@dataclass(frozen=True)
class TrainingIdentity:
    """What identifies one of a predictor's training models by content.

    Attributes
    ----------
    model : str
        The training model's name (one of :attr:`Predictor.training_models`).
    weights_sha256 : str or None
        :func:`attncoda.training.identity.weights_sha256` of its canonical (float32)
        weights.
    recipe : str or None
        A ``train-tiny`` checkpoint's recipe (:func:`attncoda.training.identity.
        checkpoint_recipe`) as canonical JSON (:func:`~attncoda.training.identity.
        recipe_key`); ``None`` for a pretrained model.
    weights_sketch : tuple of float or None
        :func:`attncoda.training.identity.weights_sketch` of its canonical weights, shape
        (SKETCH_SIZE,), to recognise a near copy (the same weights in bfloat16, say);
        ``None`` when the weights were not at hand to sketch.
    """

    model: str
    weights_sha256: str | None = None
    recipe: str | None = None
    weights_sketch: tuple[float, ...] | None = None


def training_match(
    identities: Sequence[TrainingIdentity],
    training_models: Sequence[str],
    names: Sequence[str],
    identity: Mapping[str, Any] | None = None,
) -> tuple[str, str] | None:
    """The training model a model is, and how it was matched; ``None`` when unseen
    (:meth:`attncoda.experiments.predictor.Predictor.training_match` documents it)."""
    weights = (identity or {}).get("weights_sha256")
    recipe = recipe_key((identity or {}).get("recipe"))
    sketch = (identity or {}).get("weights_sketch")
    for ident in identities:
        if weights is not None and ident.weights_sha256 == weights:
            return ident.model, "weights"
    if sketch is not None:
        near = [
            (sketch_distance(sketch, ident.weights_sketch), ident.model)
            for ident in identities
            if ident.weights_sketch is not None
        ]
        close = min(near, default=None)
        if close is not None and close[0] <= NEAR_COPY:
            return close[1], "near copy"
    for ident in identities:
        if recipe is not None and ident.recipe == recipe:
            return ident.model, "recipe"
    for model in training_models:
        if model in names:
            return model, "name"
    return None


def identities_to_file(identities: Sequence[TrainingIdentity]) -> dict[str, Any]:
    """The ``training_identity`` object of a predictor file."""
    return {
        i.model: {
            "weights_sha256": i.weights_sha256,
            "weights_sketch": None if i.weights_sketch is None else list(i.weights_sketch),
            "recipe": None if i.recipe is None else json.loads(i.recipe),
        }
        for i in identities
    }


def identities_from_file(
    value: Any, training_models: tuple[str, ...], where: str
) -> tuple[TrainingIdentity, ...]:
    """The ``training_identity`` object of a file."""
    where = f"{where}: key 'training_identity'"
    if not isinstance(value, dict):
        raise AttncodaError(f"{where} must map training models to their identity; got {value!r}")
    found = []
    for model, ident in value.items():
        if model not in training_models:
            raise AttncodaError(f"{where} names {model!r}, which is no training model")
        keys = {"weights_sha256", "weights_sketch", "recipe"}
        if not isinstance(ident, dict) or set(ident) != keys:
            raise AttncodaError(
                f"{where} for {model!r} must hold exactly 'weights_sha256', 'weights_sketch' "
                f"and 'recipe'; got {ident!r}"
            )
        weights, recipe, sketch = ident["weights_sha256"], ident["recipe"], ident["weights_sketch"]
        if weights is not None and not isinstance(weights, str):
            raise AttncodaError(
                f"{where} for {model!r}: weights_sha256 {weights!r} is not a string"
            )
        if recipe is not None and not isinstance(recipe, dict):
            raise AttncodaError(f"{where} for {model!r}: recipe {recipe!r} is not an object")
        if sketch is not None and not (
            isinstance(sketch, list)
            and len(sketch) == SKETCH_SIZE
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sketch)
        ):
            raise AttncodaError(
                f"{where} for {model!r}: weights_sketch must be a list of {SKETCH_SIZE} "
                f"numbers or null; got {str(sketch)[:60]}"
            )
        found.append(
            TrainingIdentity(
                model,
                weights,
                recipe_key(recipe),
                None if sketch is None else tuple(float(v) for v in sketch),
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class Relation:
    """How a model stands to a predictor's training models.

    Attributes
    ----------
    relation : str
        One of :data:`RELATIONS`.
    models : tuple of str
        The training model it is (``"training"``), or the training models of its run
        (``"interpolated"``, ``"same run"``); empty when held out.
    how : str
        How it was matched (:data:`MATCHES`; a run by its recipe or its name); ``""`` when
        held out.
    """

    relation: str
    models: tuple[str, ...] = ()
    how: str = ""

    @property
    def held_out(self) -> bool:
        """Whether the model tests the predictor: unseen by content, of no training run."""
        return self.relation == "held out"


def relation_to_training(
    identities: Sequence[TrainingIdentity],
    training_models: Sequence[str],
    names: Sequence[str],
    identity: Mapping[str, Any] | None = None,
) -> Relation:
    """How a model stands to the training models (:data:`RELATIONS`).

    A model is a training model when :func:`training_match` finds it (weights, recipe,
    name). Otherwise, when it is a checkpoint of a run that gave training models (the same
    ``train-tiny`` config at another step, or the same run name, ``run@stepN``), it is
    ``"interpolated"`` when its step lies between two of that run's training checkpoints
    and ``"same run"`` when outside them (e.g. step 0 before the first): either way its
    verdict is no out-of-sample test. Else it is ``"held out"``.
    """
    matched = training_match(identities, training_models, names, identity)
    if matched is not None:
        return Relation("training", (matched[0],), matched[1])
    step, runs, how = None, [], ""
    recipe = (identity or {}).get("recipe")
    if isinstance(recipe, Mapping) and "config" in recipe and "step" in recipe:
        config = json.loads(json.dumps(recipe["config"]))  # as a file reads it back
        for ident in identities:
            theirs = json.loads(ident.recipe) if ident.recipe is not None else None
            if isinstance(theirs, dict) and theirs.get("config") == config:
                runs.append((ident.model, int(theirs["step"])))
        step, how = int(recipe["step"]), "recipe"
    if not runs:
        for name in names:
            found = _CHECKPOINT_NAME.match(name)
            if found is None:
                continue
            for model in training_models:
                theirs = _CHECKPOINT_NAME.match(model)
                if theirs is not None and theirs["run"] == found["run"]:
                    runs.append((model, int(theirs["step"])))
            if runs:
                step, how = int(found["step"]), "name"
                break
    if not runs or step is None:
        return Relation("held out")
    steps = [s for _, s in runs]
    inside = min(steps) <= step <= max(steps)
    models = tuple(m for m, _ in sorted(runs, key=lambda r: r[1]))
    return Relation("interpolated" if inside else "same run", models, how)


def run_of(model: str) -> str:
    """The run a model's name says it belongs to: ``series`` for a checkpoint named
    ``series@stepN`` (or ``series stepN``, ``series/stepN``), else the name itself (a
    pretrained model is a run of its own)."""
    found = _CHECKPOINT_NAME.match(model)
    return model if found is None else found["run"]


def training_runs(
    models: Sequence[str], recipes: Sequence[Mapping[str, Any] | None]
) -> tuple[str, ...]:
    """The run of each training model, the unit the predictor's interval leaves out.

    Two models are of one run when :func:`run_of` gives both the same name, or when both are
    ``train-tiny`` checkpoints of the same recipe config (task, size, seed, schedule: the
    recipe without its step), however they are named; the relation is closed transitively.
    A run is labelled by the :func:`run_of` name of its first model.

    Parameters
    ----------
    models : sequence of str, shape (n,)
    recipes : sequence of mapping or None, shape (n,)
        Each model's ``train-tiny`` recipe (``{"config", "step"}``), or ``None``.

    Returns
    -------
    tuple of str, shape (n,)
    """
    parent = list(range(len(models)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, (model, recipe) in enumerate(zip(models, recipes, strict=True)):
        keys = [f"name:{run_of(model)}"]
        if isinstance(recipe, Mapping) and "config" in recipe:
            keys.append("config:" + json.dumps(recipe["config"], sort_keys=True))
        for key in keys:
            if key in first:
                parent[root(i)] = root(first[key])
            else:
                first[key] = i
    labels: dict[int, str] = {}
    for i, model in enumerate(models):
        labels.setdefault(root(i), run_of(model))
    return tuple(labels[root(i)] for i in range(len(models)))
