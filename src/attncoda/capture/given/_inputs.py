"""Attention as a user hands it in, read into per-document tensors.

A Hugging Face ``outputs.attentions`` tuple, a TransformerLens ``ActivationCache``, one
array or tensor, or a list of per-document arrays becomes a list of ``(layer, head,
query_pos, key_pos)`` float32 or float64 CPU tensors (:func:`as_documents`); documents of
different lengths are padded into one batch (:func:`pad_documents`), and the
``attention_mask`` and ``tokens`` a user gives are checked against the batch
(:func:`batch_mask`, :func:`token_documents`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from attncoda._errors import AttncodaError
from attncoda.capture._forward import check_batch

__all__ = [
    "as_documents",
    "batch_mask",
    "input_dtype",
    "pad_documents",
    "to_tensor",
    "token_documents",
    "transformer_lens_layers",
]

_TL_SCORES = re.compile(r"^blocks\.(\d+)\.attn\.hook_attn_scores$")
_TL_PATTERN = re.compile(r"^blocks\.(\d+)\.attn\.hook_pattern$")


def to_tensor(array: Any, what: str) -> torch.Tensor:
    """``array`` on the CPU in float32 (half, bfloat16 and float32 input: exact) or float64
    (anything else). Each layer is taken to float64 only when its statistics are computed,
    so the whole input is never held in float64 at once."""
    if isinstance(array, torch.Tensor):
        keep = array.dtype in (torch.float16, torch.bfloat16, torch.float32)
        return array.detach().to("cpu", torch.float32 if keep else torch.float64)
    try:
        found = np.asarray(array)
        keep = found.dtype in (np.float16, np.float32)
        return torch.as_tensor(np.asarray(found, dtype=np.float32 if keep else np.float64))
    except (TypeError, ValueError) as err:
        raise AttncodaError(f"{what} is not a numeric array: {err}") from None


def transformer_lens_layers(cache: Any) -> tuple[list[torch.Tensor], str] | None:
    """The per-layer tensors of a TransformerLens ``ActivationCache`` (or any mapping with
    its hook names): exact scores when every layer has them, else patterns."""
    keys = list(cache.keys()) if hasattr(cache, "keys") else []
    for pattern, kind in ((_TL_SCORES, "logits"), (_TL_PATTERN, "probs")):
        found = {int(m.group(1)): k for k in keys if (m := pattern.match(str(k)))}
        if found:
            if sorted(found) != list(range(len(found))):
                raise AttncodaError(
                    f"the cache has {kind} for layers {sorted(found)}: give every layer from 0"
                )
            return [cache[found[layer]] for layer in range(len(found))], kind
    return None


def as_documents(attn: Any, kind: str) -> tuple[list[torch.Tensor], str, str]:
    """Per document ``(layer, head, query_pos, key_pos)`` float32 or float64 tensors, the kind, and
    what the input was."""
    if isinstance(attn, Mapping) or type(attn).__name__ == "ActivationCache":
        found = transformer_lens_layers(attn)
        if found is None:
            raise AttncodaError(
                "the cache holds no 'blocks.{l}.attn.hook_attn_scores' or "
                "'blocks.{l}.attn.hook_pattern': run the model with run_with_cache and keep "
                "the attention hooks"
            )
        layers, kind = found
        stacked = torch.stack([to_tensor(a, f"layer {i}") for i, a in enumerate(layers)], 1)
        return list(stacked), kind, type(attn).__name__
    if isinstance(attn, tuple):
        if not attn:
            raise AttncodaError("the attentions tuple is empty: give one tensor per layer")
        layers = [to_tensor(a, f"layer {i}") for i, a in enumerate(attn)]
        shapes = {tuple(a.shape) for a in layers}
        if len(shapes) != 1 or layers[0].ndim != 4:
            raise AttncodaError(
                f"the attentions tuple must hold one (batch, head, query_pos, key_pos) tensor "
                f"per layer, all of one shape; got shapes {sorted(shapes)}"
            )
        return list(torch.stack(layers, 1)), kind, "tuple"
    if isinstance(attn, list):
        if not attn:
            raise AttncodaError("the list of documents is empty: give at least one array")
        docs = [to_tensor(a, f"document {i}") for i, a in enumerate(attn)]
        for i, doc in enumerate(docs):
            if doc.ndim != 4 or doc.shape[-1] != doc.shape[-2]:
                raise AttncodaError(
                    f"document {i} has shape {tuple(doc.shape)}: each document must be "
                    f"(layer, head, query_pos, key_pos) with query_pos == key_pos"
                )
        return docs, kind, "list"
    array = to_tensor(attn, "attn")
    if array.ndim == 4:
        array = array[None]
    if array.ndim != 5:
        raise AttncodaError(
            f"attn has shape {tuple(array.shape)}: give (batch, layer, head, query_pos, "
            f"key_pos) or (layer, head, query_pos, key_pos)"
        )
    return list(array), kind, type(attn).__name__


def input_dtype(attn: Any) -> str:
    """The dtype of the attention a user handed in (its first array), e.g. ``"bfloat16"``:
    the rounding its rows carry, which capture records (``Capture.read_dtype``)."""
    first = attn
    if isinstance(attn, Mapping) or type(attn).__name__ == "ActivationCache":
        found = transformer_lens_layers(attn)
        first = found[0][0] if found and found[0] else None
    elif isinstance(attn, (tuple, list)) and attn:
        first = attn[0]
    dtype = getattr(first, "dtype", None)
    if dtype is None:
        dtype = np.asarray(first).dtype
    return str(dtype).removeprefix("torch.")


def pad_documents(docs: list[torch.Tensor], kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch ``(batch, layer, head, pos, pos)`` and its 0/1 mask."""
    layers, heads = docs[0].shape[:2]
    for i, doc in enumerate(docs):
        if tuple(doc.shape[:2]) != (layers, heads):
            raise AttncodaError(
                f"document {i} has {doc.shape[0]} layers x {doc.shape[1]} heads, document 0 "
                f"has {layers} x {heads}: every document must come from one model"
            )
    width = max(int(doc.shape[-1]) for doc in docs)
    fill = 0.0 if kind == "probs" else -math.inf
    dtype = torch.float64 if any(d.dtype == torch.float64 for d in docs) else torch.float32
    batch = torch.full((len(docs), layers, heads, width, width), fill, dtype=dtype)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for i, doc in enumerate(docs):
        n = doc.shape[-1]
        batch[i, :, :, :n, :n] = doc
        mask[i, :n] = 1
    return batch, mask


def batch_mask(attention_mask, batch: torch.Tensor, docs: list[torch.Tensor]) -> torch.Tensor:
    """The 0/1 mask ``(batch, pos)`` of one padded ``batch``: the user's ``attention_mask``,
    checked against it (:func:`attncoda.capture._forward.check_batch`), or all ones."""
    width = batch.shape[-1]
    if attention_mask is None:
        return torch.ones((batch.shape[0], width), dtype=torch.long)
    mask = torch.as_tensor(np.asarray(attention_mask)).to(torch.long)
    if tuple(mask.shape) != (batch.shape[0], width):
        raise AttncodaError(
            f"attention_mask has shape {tuple(mask.shape)}, the attention gives "
            f"{batch.shape[0]} documents of {width} positions: they must match"
        )
    return check_batch(torch.zeros_like(mask), mask)[1]


def token_documents(tokens, mask: torch.Tensor) -> list[np.ndarray] | None:
    """Each document's int64 token ids on its real positions of ``mask``, from ``tokens``
    ``(batch, pos)`` or one list per document; None without ``tokens``."""
    if tokens is None:
        return None
    if isinstance(tokens, list) and tokens and np.ndim(tokens[0]) == 1:
        found = [np.asarray(t, dtype=np.int64) for t in tokens]
    else:
        array = np.asarray(tokens, dtype=np.int64)
        if array.ndim == 1:
            array = array[None]
        if array.shape != tuple(mask.shape):
            raise AttncodaError(
                f"tokens have shape {array.shape}, the attention gives {tuple(mask.shape)} "
                f"(document, position): they must match"
            )
        found = [array[d][mask[d].bool().numpy()] for d in range(len(array))]
    lengths = mask.sum(-1).tolist()
    for d, (t, n) in enumerate(zip(found, lengths, strict=True)):
        if len(t) != n:
            raise AttncodaError(f"document {d} has {n} real positions but {len(t)} tokens")
    return found
