"""Live model objects capture accepts: a Hugging Face model and the wrappers around one.

A TransformerLens 4 ``TransformerBridge`` holds its Hugging Face model as
``original_model`` and computes attention in its own components, whose
``hook_attn_scores`` carry the masked logits; an nnsight ``LanguageModel`` (or
``TransformersModel``) holds it as ``_module`` and runs its forward as it is. Both are
recognised by class name, so neither package is imported here (docs/design.md, "Live
models").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from attncoda._devices import to_input_device
from attncoda._errors import AttncodaError

__all__ = ["KINDS", "bridge_score_hooks", "kind_of", "live_model", "run_live"]

#: What :func:`kind_of` tells apart.
KINDS = ("hf", "bridge", "nnsight")


def _names(obj: object) -> set[str]:
    return {cls.__name__ for cls in type(obj).__mro__}


def kind_of(model: object) -> str:
    """``"bridge"``, ``"nnsight"`` or ``"hf"``; anything else is refused by name.

    Raises
    ------
    AttncodaError
        Neither a Hugging Face model nor a wrapper of one.
    """
    names = _names(model)
    if "TransformerBridge" in names and isinstance(
        getattr(model, "original_model", None), torch.nn.Module
    ):
        return "bridge"
    if "NNsight" in names or "Envoy" in names:
        inner = getattr(model, "_module", None)
        if isinstance(inner, torch.nn.Module) and hasattr(inner, "config"):
            return "nnsight"
    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        return "hf"
    raise AttncodaError(
        f"cannot capture a {type(model).__name__}: pass a Hugging Face model, a "
        f"TransformerLens TransformerBridge or an nnsight LanguageModel"
    )


def live_model(model: Any) -> torch.nn.Module:
    """The Hugging Face model inside ``model`` (``model`` itself for a plain one)."""
    kind = kind_of(model)
    if kind == "bridge":
        return model.original_model
    if kind == "nnsight":
        return model._module
    assert isinstance(model, torch.nn.Module)
    return model


def bridge_score_hooks(bridge) -> Iterator[torch.nn.Module]:
    """The ``hook_attn_scores`` hook points of a bridge's attention components, in module
    order (the order the layers run)."""
    for name, module in bridge.named_modules():
        if name.endswith(".hook_attn_scores") and isinstance(module, torch.nn.Module):
            yield module


def run_live(model, ids: torch.Tensor, mask: torch.Tensor) -> None:
    """One forward pass of a wrapper over a padded batch, as its users call it: a bridge's
    ``forward``, an nnsight ``trace``; ``ids`` and ``mask`` go to the input device of the
    Hugging Face model inside (:func:`attncoda._devices.to_input_device`)."""
    kind = kind_of(model)
    ids, mask = to_input_device(live_model(model), ids, mask)
    with torch.no_grad():
        if kind == "bridge":
            model(ids, attention_mask=mask, return_type=None)
        elif kind == "nnsight":
            with model.trace({"input_ids": ids, "attention_mask": mask}):
                pass
        else:
            model(input_ids=ids, attention_mask=mask)
