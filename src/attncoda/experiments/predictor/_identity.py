"""Which training model a model is: matched by weights hash, ``train-tiny`` recipe or name
(docs/design.md, "The experiments", predictor)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.training.identity import recipe_key

__all__ = [
    "MATCHES",
    "TrainingIdentity",
    "identities_from_file",
    "identities_to_file",
    "training_match",
]

#: How a model is matched to a training model, strongest first (:func:`training_match`).
MATCHES = ("weights", "recipe", "name")


@dataclass(frozen=True)
class TrainingIdentity:
    """What identifies one of a predictor's training models by content.

    Attributes
    ----------
    model : str
        The training model's name (one of :attr:`Predictor.training_models`).
    weights_sha256 : str or None
        :func:`attncoda.training.identity.weights_sha256` of it, as loaded by
        :func:`attncoda.load_model` in float32.
    recipe : str or None
        A ``train-tiny`` checkpoint's recipe (:func:`attncoda.training.identity.
        checkpoint_recipe`) as canonical JSON (:func:`~attncoda.training.identity.
        recipe_key`); ``None`` for a pretrained model.
    """

    model: str
    weights_sha256: str | None = None
    recipe: str | None = None


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
    for ident in identities:
        if weights is not None and ident.weights_sha256 == weights:
            return ident.model, "weights"
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
            "recipe": None if i.recipe is None else json.loads(i.recipe),
        }
        for i in identities
    }


def identities_from_file(
    value: Any, training_models: tuple[str, ...], where: str
) -> tuple[TrainingIdentity, ...]:
    """The ``training_identity`` object of a file (absent in files that record none)."""
    where = f"{where}: key 'training_identity'"
    if not isinstance(value, dict):
        raise AttncodaError(f"{where} must map training models to their identity; got {value!r}")
    found = []
    for model, ident in value.items():
        if model not in training_models:
            raise AttncodaError(f"{where} names {model!r}, which is no training model")
        if not isinstance(ident, dict) or set(ident) != {"weights_sha256", "recipe"}:
            raise AttncodaError(
                f"{where} for {model!r} must hold exactly 'weights_sha256' and 'recipe'; "
                f"got {ident!r}"
            )
        weights, recipe = ident["weights_sha256"], ident["recipe"]
        if weights is not None and not isinstance(weights, str):
            raise AttncodaError(
                f"{where} for {model!r}: weights_sha256 {weights!r} is not a string"
            )
        if recipe is not None and not isinstance(recipe, dict):
            raise AttncodaError(f"{where} for {model!r}: recipe {recipe!r} is not an object")
        found.append(TrainingIdentity(model, weights, recipe_key(recipe)))
    return tuple(found)
