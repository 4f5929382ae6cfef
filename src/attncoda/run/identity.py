"""What identifies a loaded model by content (the predictor matches training models by it)."""

from __future__ import annotations

from typing import Any

__all__ = ["identity_of"]


def identity_of(loaded: tuple) -> dict[str, Any]:
    """:func:`attncoda.training.identity.model_identity` of a loaded ``(model, tokenizer,
    info)``: its weights hash and sketch and, for a ``train-tiny`` checkpoint read from a
    folder (a local one, or one attncoda ships: ``bigram-backcopy@step1000``), its recipe,
    which says which run it belongs to."""
    from attncoda.training.identity import model_identity

    model, _, info = loaded
    source = getattr(info, "source", None)
    folder = None
    if source == "local":
        folder = info.name_or_path
    elif source == "shipped":  # recorded as "bigram-backcopy@step1000"
        from attncoda.models.shipped import checkpoint_folder

        name, _, step = info.name_or_path.partition("@")
        folder = str(checkpoint_folder(name, step or None))
    return model_identity(model, folder)
