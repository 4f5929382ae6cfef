"""The forward pass over a padded batch: padding, positions, keywords, the next-token NLL.

Every forward pass of the package goes through here: :func:`pad` makes the batch (with
:func:`bos_id` when a BOS is prepended), :func:`check_batch` checks one that is handed in,
:func:`forward_kwargs` gives a model the positions each document would have alone
(docs/design.md, "Positions"), and :func:`next_token_nll` is the one mean next-token loss of
a batch (nats).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attncoda._devices import to_input_device
from attncoda._errors import AttncodaError

__all__ = [
    "bos_id",
    "check_batch",
    "first_position",
    "forward",
    "forward_kwargs",
    "next_token_nll",
    "pad",
    "position_ids",
]


def check_batch(input_ids, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` as int64 CPU tensors ``(batch, pos)``, checked: 2-D, matching shapes, a
    0/1 mask, every document with one contiguous run of real tokens."""
    ids = torch.as_tensor(input_ids, dtype=torch.long).cpu()
    if ids.ndim != 2:
        raise AttncodaError(f"input_ids must be 2-D (batch, pos), got shape {tuple(ids.shape)}")
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask).cpu()
    if tuple(mask.shape) != tuple(ids.shape):
        raise AttncodaError(
            f"attention_mask has shape {tuple(mask.shape)}, input_ids has shape "
            f"{tuple(ids.shape)}: they must match"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise AttncodaError("attention_mask must hold only 0 and 1")
    mask = mask.to(torch.long)
    for doc in range(mask.shape[0]):
        row = mask[doc]
        if int(row.sum()) == 0:
            raise AttncodaError(f"document {doc} has no real tokens (its attention_mask row is 0)")
        # One contiguous run of real tokens changes value only where padding begins or ends.
        if int((row[1:] != row[:-1]).sum()) != int(row[0] == 0) + int(row[-1] == 0):
            raise AttncodaError(
                f"document {doc} has padding between real tokens: pad on the left or the right only"
            )
    return ids, mask


def pad(
    docs: Sequence[Sequence[int] | np.ndarray], pad_id: int, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token-id documents into one batch ``(ids, mask)``.

    Parameters
    ----------
    docs : sequence of sequence of int
        At least one document, each its token ids without padding.
    pad_id : int
        Id written at padding positions (masked, so any id works).
    left : bool
        Pad on the left (each document ends at the last position) instead of the right.

    Returns
    -------
    ids, mask : torch.Tensor
        int64 CPU tensors ``(batch, pos)``, ``pos`` the longest document; ``mask`` is 1 on
        the real tokens and 0 on the padding.
    """
    width = max(len(doc) for doc in docs)
    ids = torch.full((len(docs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for index, doc in enumerate(docs):
        span = slice(width - len(doc), width) if left else slice(0, len(doc))
        ids[index, span] = torch.as_tensor(np.asarray(doc), dtype=torch.long)
        mask[index, span] = 1
    return ids, mask


def bos_id(tokenizer, model) -> int:
    """The BOS id ``prepend_bos=True`` writes: the tokenizer's, else the model config's.

    Raises
    ------
    AttncodaError
        Neither defines an integer ``bos_token_id``.
    """
    for source in (tokenizer, getattr(model, "config", None)):
        bos = getattr(source, "bos_token_id", None)
        if isinstance(bos, int):
            return bos
    raise AttncodaError(
        "prepend_bos=True needs a BOS id: neither the tokenizer nor the model config defines "
        "bos_token_id"
    )


def first_position(model) -> int:
    """The position id a model gives the first token of an unpadded input.

    0 for most families; ``padding_idx + 1`` for those whose position embedding reserves a
    padding row (RoBERTa, XLM-R, CamemBERT, MPNet, ...), which number positions from there.
    """
    for module in model.modules():
        table = getattr(module, "position_embeddings", None)
        if isinstance(table, torch.nn.Embedding) and table.padding_idx is not None:
            return int(table.padding_idx) + 1
    return 0


def position_ids(model, mask: torch.Tensor) -> torch.Tensor | None:
    """Position ids that give every left-padded document the positions it has alone.

    None when no document is left-padded: then the model's own positions are already
    those of each document run alone (padding only follows the real tokens), and passing
    none keeps the model's own computation, whatever its numbering.

    Parameters
    ----------
    model : transformers.PreTrainedModel
    mask : torch.Tensor
        ``(batch, pos)`` of 0/1, each row's real tokens contiguous.

    Returns
    -------
    torch.Tensor or None
        int64 ``(batch, pos)``: ``first_position(model) + 0..n-1`` on the real tokens;
        padding gets the first position minus one, clamped at 0 (it is masked anyway).
    """
    if not bool((mask[:, 0] == 0).any()):
        return None
    start = first_position(model)
    counted = mask.cumsum(-1) - 1
    return torch.where(mask.bool(), counted + start, max(start - 1, 0)).long()


def forward_kwargs(
    model, ids, mask, output_attentions: bool = False, logits: bool = True
) -> dict[str, Any]:
    """The keyword arguments of one cache-free forward pass over a padded batch.

    ``input_ids`` and ``attention_mask``; ``position_ids`` only where left padding would
    shift them (:func:`position_ids`); ``use_cache=False`` where the model takes it. The
    three go to the model's input device (:func:`attncoda._devices.to_input_device`), so
    every forward built here, probes included, gets its inputs where the model runs. With
    ``logits=False``, ``logits_to_keep=1`` where the model takes it: a language model then
    projects only the last position onto its vocabulary (at 32k tokens and a 262k-token
    vocabulary the full logits are 32 GiB of float32). The hidden states and the attention
    are the same either way.
    """
    params = inspect.signature(model.forward).parameters
    # Positions from the mask where it lies (the CPU, for the package's own batches): the
    # left-padding test reads it on the host.
    positions = position_ids(model, mask) if "position_ids" in params else None
    ids, mask, positions = to_input_device(model, ids, mask, positions)
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
    if positions is not None:
        kwargs["position_ids"] = positions
    if "use_cache" in params:
        kwargs["use_cache"] = False
    if output_attentions:
        kwargs["output_attentions"] = True
    if not logits and "logits_to_keep" in params:
        kwargs["logits_to_keep"] = 1
    return kwargs


def forward(model, ids, mask, output_attentions: bool = False, logits: bool = True) -> Any:
    """One cache-free forward pass without gradients, with :func:`forward_kwargs`.

    Returns the model's output object (``logits`` or ``last_hidden_state``, and the
    attention probabilities with ``output_attentions``); ``logits=False`` keeps the logits
    of the last position only.
    """
    with torch.no_grad():
        return model(**forward_kwargs(model, ids, mask, output_attentions, logits))


def next_token_nll(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of each document's next tokens, in nats.

    Token ``t`` (``t = 1..n-1`` of the real tokens) is scored by the logits at ``t - 1``:
    ``-mean_t log p(x_t | x_<t)``, with ``log p = z[x_t] - logsumexp(z)`` in float32. A
    pair counts only where both tokens are real, so right padding is left out.

    Parameters
    ----------
    logits : torch.Tensor
        ``(batch, pos, vocab)``, any float dtype (cast to float32).
    ids, mask : torch.Tensor
        int ``(batch, pos)``: the token ids and the 0/1 real-token mask of the same batch.

    Returns
    -------
    torch.Tensor
        float32 ``(batch,)``; differentiable in ``logits``.
    """
    # The logits lie where the model's last module ran (another device than its inputs'
    # under a device map): the ids and mask follow them.
    ids, mask = ids.to(logits.device), mask.to(logits.device)
    logits = logits[:, :-1].float()
    target = ids[:, 1:]
    picked = logits.gather(-1, target[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)
    valid = (mask[:, 1:] * mask[:, :-1]).to(picked.dtype)
    return -(picked * valid).sum(-1) / valid.sum(-1)
