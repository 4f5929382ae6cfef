"""What identifies a loaded model by content (the predictor matches training models by it)."""

from __future__ import annotations

from typing import Any

__all__ = ["identity_of"]


def identity_of(loaded: tuple) -> dict[str, Any]:
    """:func:`attncoda.training.identity.model_identity` of a loaded ``(model, tokenizer,
    info)``: its weights hash and, for a local or shipped ``train-tiny`` checkpoint, its
    recipe."""
    from attncoda.training.identity import model_identity

    model, _, info = loaded
    source = getattr(info, "source", None)
    folder = info.name_or_path if source == "local" else None
    if source == "shipped":  # recorded as name@stepN, as a hub revision is
        from attncoda.models.shipped import checkpoint_folder
        from attncoda.models.spec import parse_spec

        spec = parse_spec(info.name_or_path)
        folder = str(checkpoint_folder(spec.name, spec.revision))
    return model_identity(model, folder)
