"""Where a model takes its inputs, and the one helper that puts tensors there.

Every tensor attncoda hands to a model's forward (capture and its routing probe, recording
of a wrapper, the eager-outputs read, prune's held-out losses and gate gradients, the
training loop) goes through :func:`to_input_device` (docs/design.md, "Devices"). It sits at
the bottom of the layers so that training, below the model loaders, uses it too; torch is
imported only when a model is at hand.
"""

from __future__ import annotations

from typing import Any

__all__ = ["input_device", "to_input_device"]


def input_device(model: Any) -> Any:
    """The ``torch.device`` input ids go to: that of the first parameter not on ``meta``.

    A model placed by a device map keeps the weights of its disk-offloaded modules on the
    ``meta`` device until they run; accelerate's hooks move each module's inputs to where it
    runs, so any real device of the model takes the ids, and the CPU when every parameter of
    such a model is on ``meta``. A model whose every parameter is on ``meta`` and that no
    device map placed (no ``hf_device_map``) has no weights anywhere: its inputs go to
    ``meta`` too (it traces shapes only).
    """
    import torch

    first = None
    for param in model.parameters():
        if param.device.type != "meta":
            return param.device
        if first is None:
            first = param.device
    if first is not None and getattr(model, "hf_device_map", None) is None:
        return first
    return torch.device("cpu")


def to_input_device(model: Any, *tensors: Any) -> tuple[Any, ...]:
    """``tensors`` on ``model``'s :func:`input_device`, in order (None passes through).

    Parameters
    ----------
    model : torch.nn.Module
        The model (a Hugging Face model; a wrapper's inner model) the tensors are handed to.
    *tensors : torch.Tensor or None
        Token ids, attention masks, position ids, labels: any shape and dtype, kept.

    Returns
    -------
    tuple of torch.Tensor or None
        The same tensors, copied to the model's input device where they lie elsewhere
        (the same objects where they are there already).
    """
    device = input_device(model)
    return tuple(None if t is None else t.to(device) for t in tensors)
