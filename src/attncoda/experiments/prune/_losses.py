"""The evaluation passes of prune: each window's next-token loss under the current
ablation, and the gradient importance of Michel et al. (2019) (docs/design.md, "The
experiments", prune).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError

__all__ = [
    "check_batch_size",
    "check_windows",
    "gradient_importance",
    "window_ids",
    "window_losses",
]


def window_ids(window: Any) -> np.ndarray:
    """A window's token ids (an id sequence or a :class:`attncoda.data.corpus.Window`), int64."""
    return np.asarray(getattr(window, "input_ids", window), dtype=np.int64)


def check_windows(windows: object, name: str) -> list[np.ndarray]:
    """``windows`` as int64 id arrays of at least 2 tokens each; an error names ``name`` and
    the first window that is not."""
    if isinstance(windows, (str, bytes)) or not isinstance(windows, Sequence) or not windows:
        raise AttncodaError(f"{name} is empty: give at least one window of token ids")
    out = []
    for index, window in enumerate(windows):
        ids = window_ids(window)
        if ids.ndim != 1 or ids.size < 2:
            raise AttncodaError(
                f"{name} window {index} has {ids.size} tokens: a window needs at least 2 (one "
                f"predicted token)"
            )
        out.append(ids)
    return out


def check_batch_size(batch_size: object) -> int:
    """``batch_size`` as a positive int (windows per forward pass)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise AttncodaError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def window_losses(model, windows: Sequence[Any], *, batch_size: int = 8) -> np.ndarray:
    """Mean next-token NLL of each window, in nats (the current ablation applies).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal language model in eval mode (run inside :func:`ablate` to prune).
    windows : sequence
        Token windows of at least 2 tokens (padded on the right, positions from 0).
    batch_size : int

    Returns
    -------
    ndarray of float64, shape (window,)
        ``-mean_{t=1}^{n-1} log p(x_t | x_<t)``; perplexity is ``exp(mean)`` of it.
    """
    import torch

    from attncoda.capture import forward_kwargs, next_token_nll, pad

    batch_size = check_batch_size(batch_size)
    ids_list = check_windows(windows, "windows")
    out = []
    with torch.no_grad():
        for start in range(0, len(ids_list), batch_size):
            # forward_kwargs moves the batch to the model's input device
            ids, mask = pad(ids_list[start : start + batch_size], 0, left=False)
            result = model(**forward_kwargs(model, ids, mask))
            out.append(next_token_nll(result.logits, ids, mask).double().cpu().numpy())
    return np.concatenate(out)


def gradient_importance(model, windows: Sequence[Any], *, batch_size: int = 8) -> np.ndarray:
    """Head importance of Michel et al. (2019): ``sum_w |dL_w / dxi_{l,h}|`` at ``xi = 1``.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM in eval mode that :func:`attncoda.capture.routing.routed` can route.
    windows : sequence
        Profiling windows; ``L_w`` is each window's mean next-token NLL (nats).
    batch_size : int

    Returns
    -------
    ndarray of float64, shape (layer, head)
        Summed absolute gate gradients (one gate per window and head, so the absolute value
        is taken per window, as in Michel et al.). Parameters get no gradient.
    """
    import torch

    from attncoda.capture import forward_kwargs, next_token_nll, pad
    from attncoda.capture.ablation import head_counts, head_gates
    from attncoda.models.placement import input_device

    batch_size = check_batch_size(batch_size)
    ids_list = check_windows(windows, "windows")
    device = input_device(model)
    n_layers, n_heads = head_counts(model)
    total = torch.zeros((n_layers, n_heads), dtype=torch.float64)
    frozen = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in frozen:
            p.requires_grad_(False)
        with torch.enable_grad():
            for start in range(0, len(ids_list), batch_size):
                # forward_kwargs moves the batch to the model's input device
                ids, mask = pad(ids_list[start : start + batch_size], 0, left=False)
                gates = torch.ones(
                    (ids.shape[0], n_layers, n_heads), device=device, requires_grad=True
                )
                with head_gates(model, gates):
                    logits = model(**forward_kwargs(model, ids, mask)).logits
                (grad,) = torch.autograd.grad(next_token_nll(logits, ids, mask).sum(), gates)
                total += grad.abs().sum(0).double().cpu()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return total.numpy()
