"""What identifies a loaded model by content (the predictor matches training models by it)."""

from __future__ import annotations

from typing import Any

__all__ = ["identity_of"]


def identity_of(loaded: tuple) -> dict[str, Any]:
    """:func:`attncoda.training.identity.model_identity` of a loaded ``(model, tokenizer,
    info)``: its weights hash and, for a local ``train-tiny`` checkpoint, its recipe."""
    from attncoda.training.identity import model_identity

    model, _, info = loaded
    folder = info.name_or_path if getattr(info, "source", None) == "local" else None
    return model_identity(model, folder)
