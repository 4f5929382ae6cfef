"""Attention a user already has: Hugging Face outputs, TransformerLens caches, arrays.

:func:`from_attentions` turns attention computed elsewhere into the same :class:`Capture`
a model run gives, so every experiment that needs no model (profile, flips, cluster,
safety, predictor apply, collapse) runs on it. The statistics are those of
:func:`attncoda.capture.stats.row_statistics`, computed in float64 from the given rows; the
input forms are read into documents by :mod:`attncoda.capture.given._inputs`.

Masked keys are structural, never zeros: keys outside ``attention_mask``, keys after the
query in a causal row, and ``-inf`` logits (TransformerLens fills masked scores with
``-inf``) are not keys of the row. A probability of exactly 0 on a key that is visible
follows the zero policy (``zeros="raise"`` or ``"floor"``), because the statistics take logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from attncoda._errors import AttncodaError, check_choice
from attncoda.capture._result import BatchDocuments, Capture
from attncoda.capture._result import assemble as assemble_capture
from attncoda.capture.names import ATTENTION_FILES, ZEROS
from attncoda.capture.sinks import auto_sinks, parse_sink, resolve_sinks
from attncoda.capture.stats import PassPlan, Recorder, record_plan

from ._inputs import as_documents, batch_mask, input_dtype, pad_documents, token_documents

__all__ = ["ATTENTION_FILES", "KINDS", "from_attentions"]

#: What the given numbers are: probabilities, log-probabilities or pre-softmax logits.
KINDS = ("probs", "log_probs", "logits")
# Scores at or below this are masked keys (transformers adds the dtype's minimum).
_MASKED = torch.finfo(torch.float32).min / 2


def _visible(values, kind: str, real: torch.Tensor, causal: bool | None):
    """bool ``(batch, layer, 1, pos, pos)``: the keys each query sees; and causality.

    Keys outside the mask, later keys of a causal row, and (logits and log-probabilities)
    ``-inf`` entries are structural. The statistics take one key mask per layer, so the
    heads of a layer must agree on their ``-inf`` entries (a causal mask or a sliding
    window do).
    """
    length = real.shape[1]
    pair = real[:, None, None, :, None] & real[:, None, None, None, :]
    upper = torch.ones(length, length, dtype=torch.bool).triu(1)
    if kind == "probs":
        hidden = None
        blank = values == 0
    else:
        blank = ~(values > _MASKED)
        hidden = blank & pair
        if not bool((hidden.all(2) == hidden.any(2)).all()):
            layer = int((hidden.all(2) != hidden.any(2)).nonzero()[0][1])
            raise AttncodaError(
                f"the heads of layer {layer} mask different keys (-inf): give every head of "
                f"a layer the same mask, or probabilities with kind='probs'"
            )
    looks_causal = bool((blank | ~(pair & upper)).all())
    if causal is None:
        causal = looks_causal
    elif causal and not looks_causal:
        raise AttncodaError(
            "causal=True, but some query gives weight to a later key: pass causal=False, or "
            "give causal attention"
        )
    visible = pair & ~upper if causal else pair
    if hidden is not None:
        visible = visible & ~hidden.any(2, keepdim=True)
    b, n_layers, _, q, k = values.shape
    return visible.expand(b, n_layers, 1, q, k), causal


def _log_rows(values, kind: str, visible, zeros: str, layer: int) -> tuple[torch.Tensor, int]:
    """float64 log-probabilities ``(batch, head, pos, pos)`` of one layer (``values``, with
    its ``visible`` keys ``(batch, 1, pos, pos)``), 0 off the visible keys; and how many
    zeros were floored."""
    values = values.to(torch.float64)
    floored = 0
    if kind == "logits":
        logits = values.masked_fill(~visible, -math.inf)
        logs = torch.log_softmax(logits, dim=-1)
    elif kind == "log_probs":
        logs = values.masked_fill(~visible, -math.inf)
    else:
        if bool((values < 0).any()) or not bool(torch.isfinite(values).all()):
            raise AttncodaError(
                "attention probabilities must be finite and non-negative: pass "
                "kind='logits' or kind='log_probs' for other numbers"
            )
        zero = visible & (values == 0)
        floored = int(zero.sum())
        if floored and zeros == "raise":
            doc, head, query, key = (int(v) for v in zero.nonzero()[0])
            raise AttncodaError(
                f"attention probability is exactly 0 at document {doc}, layer {layer}, head "
                f"{head}, query_pos {query}, key_pos {key} on a visible key: its log is -inf; "
                f"pass zeros='floor' to clip zeros to {torch.finfo(torch.float64).tiny:g} and "
                f"count them, or give kind='logits' with -inf on masked keys"
            )
        tiny = torch.finfo(torch.float64).tiny
        logs = torch.log(torch.where(zero, tiny, values)).masked_fill(~visible, -math.inf)
    rows = visible.any(-1)
    total = torch.logsumexp(logs, -1).masked_fill(~rows, 0.0)
    worst = float(total.abs().max()) if total.numel() else 0.0
    if kind != "logits" and worst > 1e-3:
        raise AttncodaError(
            f"attention rows sum to {math.exp(-worst):.6g} on their visible keys, not 1 (within "
            f"1e-3): pass kind='logits' for unnormalised scores, or give the attention_mask "
            f"that the rows were computed with"
        )
    return logs.masked_fill(~visible, 0.0), floored


def from_attentions(  # params: the public entry point, each keyword one a caller sets
    attn: Any, *, kind: str = "probs", sink: Any = "first", tokens: Any = None,
    attention_mask: Any = None, causal: bool | None = None, method: str = "exact",
    zeros: str = "raise", record_rows: Any = "auto", tokenizer: Any = None, seed: int = 0,
) -> Capture:  # fmt: skip
    """The :class:`Capture` of attention computed elsewhere.

    Parameters
    ----------
    attn : tuple, ActivationCache, array, tensor or list
        A Hugging Face ``outputs.attentions`` tuple (layer -> ``(batch, head, query_pos,
        key_pos)``); a TransformerLens ``ActivationCache`` (``blocks.{l}.attn.
        hook_attn_scores``, exact logits with ``-inf`` on masked keys, when present, else
        ``hook_pattern``); a numpy array or torch tensor ``(batch, layer, head, query_pos,
        key_pos)`` or ``(layer, head, query_pos, key_pos)``; or a list of per-document
        ``(layer, head, n, n)`` arrays of different lengths.
    kind : {"probs", "log_probs", "logits"}
        What the numbers are. Ignored for an ActivationCache (its hook says).
    sink : str, int or sequence of int
        As in :func:`attncoda.capture.capture`; token sinks need ``tokens``.
    tokens : array-like, optional
        int token ids ``(batch, pos)`` (or one list per document).
    attention_mask : array-like, optional
        ``(batch, pos)`` of 0/1, real tokens contiguous (left or right padding).
    causal : bool, optional
        Whether each query sees only keys up to itself; inferred from the pattern when None
        (causal when every later key has probability 0, or a ``-inf`` logit).
    method : {"exact"}
        Statistics from the given rows (the only method: the rows are already there).
    zeros : {"raise", "floor"}
        A visible key of probability exactly 0 (``kind="probs"``).
    record_rows : {"auto", "all", "none"} or int
        Which query rows to keep in full, as in capture.
    tokenizer : optional
        For token sinks given as strings (``"[CLS]"``).
    seed : int
        Seeds the row sample.

    Returns
    -------
    Capture
        ``mode="given"``, ``model_class`` names the input type; statistics in nats,
        ``(doc, layer, head, query_pos)`` in real-token coordinates.

    Raises
    ------
    AttncodaError
        An unknown kind, method or zero policy; shapes that do not fit; rows that do not sum
        to 1; a zero under ``zeros="raise"``; a token sink without ``tokens``.
    """
    spec = _checked_sink(sink, kind, method, zeros)
    docs, kind, source = as_documents(attn, kind)
    batch, mask = _one_batch(docs, kind, attention_mask)
    real = mask.bool()
    token_docs = token_documents(tokens, mask)
    if spec.kind == "token" and token_docs is None:
        raise AttncodaError(f"sink {spec.text!r} names a token: pass tokens= (the token ids)")
    visible, causal = _visible(batch, kind, real, causal)
    given = _Given(batch, kind, real, visible, zeros)
    lengths = real.sum(-1).tolist()
    id_docs = token_docs or [np.zeros(n, dtype=np.int64) for n in lengths]
    record = record_plan(lengths, record_rows, seed, 0)
    offsets = given.offsets
    record_padded = [torch.as_tensor(r) + int(o) for r, o in zip(record, offsets, strict=True)]
    if spec.kind == "auto":
        first, _ = given.recorded(None, [r[:0] for r in record_padded])
        received, count = first.received.numpy(), first.received_count.numpy()
        sinks = [
            auto_sinks(received[d, o : o + n], count[d, o : o + n])
            for d, (o, n) in enumerate(zip(offsets.tolist(), lengths, strict=True))
        ]
    else:
        sinks = resolve_sinks(spec, id_docs, tokenizer)
    rec, floored = given.recorded(given.sink_mask(sinks), record_padded)
    about: dict[str, Any] = {
        "virtual_keys": 0, "sink_spec": spec.text, "mode": "given", "zeros": zeros,
        "model_class": source, "n_floored": floored, "bos_token_id": None,
        "block_size": int(batch.shape[-1]), "seed": seed, "forward": None,
        "read_dtype": input_dtype(attn),
    }  # fmt: skip
    cap = assemble_capture(rec, BatchDocuments(id_docs, sinks, record, offsets), about)
    if token_docs is None:
        cap = replace(cap, token_ids=np.full_like(cap.token_ids, -1))
    if cap.causal != causal and bool(cap.query_mask.sum()):
        cap = replace(cap, causal=causal)
    return cap


def _checked_sink(sink, kind: str, method: str, zeros: str):
    """The parsed sink spec of :func:`from_attentions`, once ``kind``, ``method``, ``zeros``
    and the sink itself are checked against what given attention can be read with."""
    check_choice("kind", kind, KINDS)
    if method != "exact":
        raise AttncodaError(
            f"method {method!r} does not apply to given attention: the rows are already "
            f"materialised, so use method='exact'"
        )
    check_choice("zero policy", zeros, ZEROS)
    spec = parse_sink(sink)
    if spec.learned:
        raise AttncodaError(
            "sink 'learned' needs the learned sink logits, which given attention does not "
            "carry: use a token sink such as 'first'"
        )
    return spec


def _one_batch(docs: list[torch.Tensor], kind: str, attention_mask) -> tuple:
    """The documents ``(layer, head, n, n)`` as one batch ``(batch, layer, head, pos, pos)``
    in one dtype (float64 where they differ) and its 0/1 mask ``(batch, pos)``: padded here
    where their lengths differ, else stacked under the caller's ``attention_mask``."""
    if len({d.dtype for d in docs}) > 1:  # float32 and float64 documents: one dtype
        docs = [d.to(torch.float64) for d in docs]
    if len(docs) > 1 and len({tuple(d.shape) for d in docs}) > 1:
        batch, mask = pad_documents(docs, kind)
        if attention_mask is not None:
            raise AttncodaError(
                "attention_mask is for one padded array: documents of different lengths are "
                "padded here, so leave attention_mask out"
            )
        return batch, mask
    batch = torch.stack(docs)
    if batch.shape[-1] != batch.shape[-2]:
        raise AttncodaError(
            f"attention has {batch.shape[-2]} queries and {batch.shape[-1]} keys: give "
            f"self-attention over one sequence (query_pos == key_pos)"
        )
    return batch, batch_mask(attention_mask, batch, docs)


@dataclass(frozen=True)
class _Given:
    """Given attention as one padded batch, checked: ``values`` ``(batch, layer, head, pos,
    pos)`` of ``kind``, ``real`` bool ``(batch, pos)`` its real tokens, ``visible`` bool
    ``(batch, layer, 1, pos, pos)`` the keys each query sees, ``zeros`` the zero policy."""

    values: torch.Tensor
    kind: str
    real: torch.Tensor
    visible: torch.Tensor
    zeros: str

    @property
    def offsets(self) -> torch.Tensor:
        """int ``(batch,)``: each document's first real position."""
        return self.real.long().argmax(-1)

    def sink_mask(self, sinks) -> torch.Tensor:
        """bool ``(batch, pos)``: the sink positions ``sinks`` (real-token coordinates, per
        document) as padded positions."""
        sink_mask = torch.zeros_like(self.real)
        for d, (pos, off) in enumerate(zip(sinks, self.offsets.tolist(), strict=True)):
            sink_mask[d, torch.as_tensor(pos, dtype=torch.long) + off] = True
        return sink_mask

    def recorded(self, sink_mask, plan) -> tuple[Recorder, int]:
        """A :class:`Recorder` filled with every layer's rows (``sink_mask`` bool ``(batch,
        pos)`` or None before the sinks are found, ``plan`` the padded rows to keep), and how
        many zeros were floored."""
        # One layer's float64 rows at a time: the input's size once, not in float64 copies
        # (sink="auto" makes them twice, once to find the sinks: time for memory).
        values, visible, real = self.values, self.visible, self.real
        rec = Recorder(PassPlan(real, self.offsets, sink_mask, plan, block_size=values.shape[-1]))
        b, n_layers, h, q, k = values.shape
        floored = 0
        for layer in range(n_layers):
            rows, zeros_here = _log_rows(
                values[:, layer], self.kind, visible[:, layer], self.zeros, layer
            )
            floored += zeros_here
            index = rec.begin_layer(b, h, q, k)
            rec.add_block(index, 0, rows, visible[:, layer])  # rows: its scratch, fresh
        return rec, floored
