"""The evaluation passes of prune: each window's next-token loss under the current
ablation, and the gradient importance of Michel et al. (2019) (docs/design.md, "The
experiments", prune).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF
from attncoda.experiments.prune._nll import LogitRows, logit_rows, nll_rounding

__all__ = [
    "check_batch_size",
    "check_windows",
    "gradient_importance",
    "gradient_rounding",
    "WindowNLL",
    "window_ids",
    "window_losses",
    "window_nll",
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


@dataclass(frozen=True, eq=False)
class WindowNLL:
    """Each evaluation window's mean next-token NLL and the bound of its rounding.

    Attributes
    ----------
    losses : ndarray of float64, shape (window,)
        ``-mean_{t=1}^{n-1} log p(x_t | x_<t)`` in nats: the log-sum-exp in float64 over the
        float32 logits (:mod:`attncoda.experiments.prune._nll`).
    rounding : ndarray of float64, shape (window,)
        How far float32 rounding of the language-model head's product and of the
        log-sum-exp can move each loss, nats
        (:func:`~attncoda.experiments.prune._nll.nll_rounding`).
    """

    losses: np.ndarray
    rounding: np.ndarray


def window_nll(
    model, windows: Sequence[Any], *, batch_size: int = 8, rows: LogitRows | None = None
) -> WindowNLL:
    """Mean next-token NLL of each window, and its rounding bound, in nats (the current
    ablation applies).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal language model in eval mode (run inside :func:`ablate` to prune), with a
        language-model head (``get_output_embeddings()``).
    windows : sequence
        Token windows of at least 2 tokens (padded on the right, positions from 0).
    batch_size : int
    rows : LogitRows, optional
        :func:`~attncoda.experiments.prune._nll.logit_rows` of ``model``, when known (its
        rows' norms are computed once per model).

    Returns
    -------
    WindowNLL
        Perplexity is ``exp(mean)`` of :attr:`WindowNLL.losses`.
    """
    import torch

    from attncoda.capture import forward_kwargs, pad

    batch_size = check_batch_size(batch_size)
    ids_list = check_windows(windows, "windows")
    rows = rows or logit_rows(model)
    seen: list = []

    def keep_input(module, args):
        seen.append(args[0])

    losses, rounding = [], []
    handle = rows.module.register_forward_pre_hook(keep_input)
    try:
        with torch.no_grad():
            for start in range(0, len(ids_list), batch_size):
                # forward_kwargs moves the batch to the model's input device
                ids, mask = pad(ids_list[start : start + batch_size], 0, left=False)
                seen.clear()
                result = model(**forward_kwargs(model, ids, mask))
                if len(seen) != 1:
                    raise AttncodaError(
                        f"the language-model head of {type(model).__name__} ran {len(seen)} "
                        f"times in one forward pass: prune bounds the NLL of a head that runs "
                        f"once"
                    )
                nll, bound = nll_rounding(result.logits, seen[0], ids, mask, rows)
                losses.append(nll)
                rounding.append(bound)
    finally:
        handle.remove()
    return WindowNLL(np.concatenate(losses), np.concatenate(rounding))


def window_losses(model, windows: Sequence[Any], *, batch_size: int = 8) -> np.ndarray:
    """Mean next-token NLL of each window, in nats (the current ablation applies):
    :attr:`WindowNLL.losses` of :func:`window_nll`.

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
    return window_nll(model, windows, batch_size=batch_size).losses


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


def gradient_rounding(importance: np.ndarray, model, windows: Sequence[Any]) -> np.ndarray:
    """How far float32 rounding can move each head's :func:`gradient_importance`:
    ``u (N + 2) I_h``, ``N = T d_head`` (docs/design.md, "The same evidence, by one rule").

    A gate's gradient ``dL_w / dxi_h = sum_{t,i} g_ti o_ti`` is a float32 sum over the
    ``N`` products of the head's output ``o`` (``T`` positions of the longest window, ``d_head``
    units) and its upstream gradient ``g``, which accumulates up to ``(N + 2) u`` of what it
    adds; ``I_h = sum_w |dL_w / dxi_h|`` is summed in float64. The magnitude taken is
    ``I_h`` itself, as a row statistic's is its own: products that cancel within the sum are
    not covered, nor is the backward pass through the layers after the head.

    Parameters
    ----------
    importance : ndarray of float64, shape (layer, head)
        :func:`gradient_importance` of ``model`` on ``windows``.
    model : transformers.PreTrainedModel
        Its config gives ``d_head`` (``head_dim``, else ``hidden_size / num_attention_heads``).
    windows : sequence
        The profiling windows (``T`` is the longest).

    Returns
    -------
    ndarray of float64, shape (layer, head)
        Non-negative.
    """
    config = model.config.get_text_config()
    d_head = getattr(config, "head_dim", None)
    if not isinstance(d_head, int) or d_head < 1:
        hidden, heads = getattr(config, "hidden_size", None), config.num_attention_heads
        if not isinstance(hidden, int) or hidden < 1:
            raise AttncodaError(
                f"cannot read head_dim or hidden_size from the config of "
                f"{type(model).__name__}: the rounding of gradient importance needs the head "
                f"dimension"
            )
        d_head = hidden // heads
    terms = max(len(ids) for ids in check_windows(windows, "windows")) * d_head
    return FLOAT32_UNIT_ROUNDOFF * (terms + 2) * np.abs(np.asarray(importance, np.float64))
