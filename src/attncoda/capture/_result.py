"""The result of a capture: :class:`Capture`, built from a filled recorder, and its table.

:func:`assemble` turns a :class:`attncoda.capture.stats.Recorder` (padded positions)
into a :class:`Capture` in real-token coordinates; :func:`concatenate` joins the captures of
several batches; :func:`capture_frame` is the tidy table of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attncoda.capture.stats import COUNTS, STATISTICS

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BatchDocuments", "Capture", "assemble", "capture_frame", "concatenate"]


@dataclass(frozen=True, eq=False)
class Capture:
    """Row statistics of a batch of documents, in real-token coordinates.

    ``query_pos`` 0 is each document's first real (non-padding) token, so left and right
    padding give identical statistics. Entropies are in nats. Statistic arrays have shape
    ``(doc, layer, head, query_pos)``; entries outside ``query_mask`` are 0. Where
    ``has_content`` is False (no content key, e.g. query 0 when the sink is key 0)
    ``content_entropy`` and ``sink_balance`` hold 0.0 and must be masked; where ``has_sink``
    is False (no sink key visible) ``sink_mass``, ``within_sink_entropy`` and
    ``sink_balance`` are 0.

    Attributes
    ----------
    sink_mass, entropy, content_entropy, within_sink_entropy, sink_balance : numpy.ndarray
        float64 ``(doc, layer, head, query_pos)``: ``s``, ``H(p)``, ``H(q)``, ``H(p_S/s)``
        and the balance ``b`` (docs/design.md).
    n_keys : numpy.ndarray
        int64 ``(doc, layer, head, query_pos)``: keys the row attends to.
    has_content, has_sink : numpy.ndarray
        bool ``(doc, layer, head, query_pos)``.
    query_mask : numpy.ndarray
        bool ``(doc, query_pos)``: real queries.
    n_tokens : numpy.ndarray
        int64 ``(doc,)``.
    token_ids : numpy.ndarray
        int64 ``(doc, query_pos)``, -1 outside ``query_mask`` (BOS included if prepended).
    sink_positions : tuple of numpy.ndarray
        Per document, the sink key positions (relative to the first real token); with
        ``sink`` including ``"learned"``, the virtual key's column ``n_tokens`` too.
    row_positions : tuple of numpy.ndarray
        Per document, the query positions whose full rows were recorded.
    rows : tuple of numpy.ndarray
        Per document, float32 log-probabilities ``(layer, head, n_recorded, n_tokens)``,
        key 0 = first real token, ``-inf`` where the key is not visible to the query. For a
        model with learned sinks (``virtual_keys == 1``) each row has one more column, the
        virtual key, last: ``(layer, head, n_recorded, n_tokens + 1)``.
    outputs : numpy.ndarray or None
        float32 ``(doc, query_pos, width)``: logits or last hidden state (``keep_outputs``).
    outputs_kind : str
        ``"logits"``, ``"last_hidden_state"``, or ``"none"`` for given attention.
    token_logprob : numpy.ndarray or None
        float64 ``(doc, query_pos)``: ``log p(token[query_pos + 1] | tokens <= query_pos)``
        (nats) for causal language models with ``keep_outputs`` (a pass over the vocabulary,
        so not computed otherwise); valid where ``query_pos < n_tokens - 1``.
    causal : bool
        Whether the rows are causal (each query sees the keys up to itself).
    virtual_keys : int
        1 when the model's rows carry a learned sink (GPT-OSS ``s_aux``), a key that is no
        token and that every query sees; ``n_keys`` counts it. It is in the sink set when
        ``sink_spec`` includes ``"learned"`` and a content key otherwise.
    sink_spec, mode, zeros, model_class : str
        What produced the capture; ``mode`` is the one used (``"attention"`` or
        ``"outputs"``), also when ``"auto"`` was asked for, and ``"given"`` for attention a
        user handed to :func:`attncoda.capture.given.from_attentions`.
    n_floored : int
        Probabilities clipped to the dtype's tiny under ``zeros="floor"``.
    n_zero_keys : int
        Visible keys whose log-probability was ``-inf`` (a score of ``-inf``, or a
        probability that underflowed to 0), summed over rows: each was left out of its
        row's composition (and of ``n_keys``), so no statistic is NaN.
    bos_token_id : int or None
        The BOS id prepended to every document, None when none was.
    block_size, seed : int
    method : str
        ``"exact"`` or ``"fast"`` (:func:`capture`).
    kernel : str or None
        The kernel that served ``method="fast"``: its name (``triton``, ``sdpa``); None for the
        exact path.
    forward : str or None
        The attention implementation whose output the model's layers received, so the
        forward the statistics describe: ``"eager"`` (eager's op sequence, which the exact
        path and ``mode="outputs"`` run), ``"fast:<kernel>"`` (the fast kernel's own
        output) or ``"transformer_lens"`` (a bridge's own attention components), per layer
        where they differ (``"fast:cpp; eager on layer 3"``); None for attention given by the
        user. In bfloat16 and float16 two implementations are two forwards whose later
        layers differ (docs/design.md, "Which forward a capture follows").
    read_dtype : str or None
        Where the rows were read rather than computed from queries and keys
        (``mode="outputs"``, a bridge's score hooks, attention given by the user), the dtype
        of what was read: its rounding is in the rows (bfloat16 probabilities keep 8
        significant bits). None where capture computed the rows from float32 or wider scores
        of the layer's own queries and keys.
    n_prompt : numpy.ndarray or None
        int64 ``(doc,)`` for a :func:`attncoda.capture.live.recording`: the positions
        ``0 .. n_prompt - 1`` came from the pass that started the document (the prompt),
        the rest from passes that continued its KV cache (generated tokens). None for a
        capture that ran its own passes.
    """

    sink_mass: np.ndarray
    entropy: np.ndarray
    content_entropy: np.ndarray
    within_sink_entropy: np.ndarray
    sink_balance: np.ndarray
    n_keys: np.ndarray
    has_content: np.ndarray
    has_sink: np.ndarray
    query_mask: np.ndarray
    n_tokens: np.ndarray
    token_ids: np.ndarray
    sink_positions: tuple[np.ndarray, ...]
    row_positions: tuple[np.ndarray, ...]
    rows: tuple[np.ndarray, ...]
    outputs: np.ndarray | None
    outputs_kind: str
    token_logprob: np.ndarray | None
    causal: bool
    virtual_keys: int
    sink_spec: str
    mode: str
    zeros: str
    model_class: str
    n_floored: int
    n_zero_keys: int
    bos_token_id: int | None
    block_size: int
    seed: int
    method: str = "exact"
    kernel: str | None = None
    n_prompt: np.ndarray | None = None
    forward: str | None = None
    read_dtype: str | None = None

    def forward_facts(self) -> dict[str, str]:
        """``forward`` and ``read_dtype`` where set: what a run's unit facts (and so the
        manifest's model facts) record of the forward this capture followed (docs/design.md,
        "Which forward a capture follows")."""
        found = {"forward": self.forward, "read_dtype": self.read_dtype}
        return {name: value for name, value in found.items() if value is not None}

    @property
    def n_docs(self) -> int:
        return int(self.sink_mass.shape[0])

    @property
    def n_layers(self) -> int:
        return int(self.sink_mass.shape[1])

    @property
    def n_heads(self) -> int:
        return int(self.sink_mass.shape[2])

    @property
    def row_key_mask(self) -> tuple[np.ndarray, ...]:
        """Per document, bool, same shape as ``rows``: the keys visible to each query."""
        return tuple(np.isfinite(rows) for rows in self.rows)

    def to_frame(self) -> pd.DataFrame:
        """The tidy table of :func:`capture_frame`."""
        return capture_frame(self)


@dataclass(frozen=True)
class BatchDocuments:
    """The documents of one batch as its capture keeps them: per document its real token
    ids ``tokens``, its ``sinks`` and recorded rows ``record`` (real-token positions); and
    ``offsets``, int ``(doc,)``, each one's first real position in the padded batch."""

    tokens: Sequence[np.ndarray]
    sinks: Sequence[Any]
    record: Sequence[np.ndarray]
    offsets: torch.Tensor


def assemble(
    rec, documents: BatchDocuments, about: dict[str, Any], out=None, keep_outputs: bool = False
) -> Capture:
    """The :class:`Capture` of a filled :class:`Recorder`, in real-token coordinates.

    ``out`` is the model's output (None for attention given by the user; then nothing is
    kept), ``about`` the fields that say what produced the capture.
    """
    docs, offsets = documents.tokens, documents.offsets
    lengths = torch.tensor([len(doc) for doc in docs])
    width = int(lengths.max())
    query_mask = torch.arange(width)[None, :] < lengths[:, None]
    keep = query_mask[:, None, None, :]
    stats = _real_statistics(rec, offsets, query_mask)
    has_sink = (stats["n_sink"] > 0) & keep
    has_content = (stats["n_keys"] - stats["n_sink"] > 0) & keep
    arange = torch.arange(width)
    tokens_seen = stats["n_keys"] - about["virtual_keys"]
    causal = bool(((tokens_seen <= arange + 1) | ~keep).all())
    kind, outputs, token_logprob = _kept_outputs(out, keep_outputs, causal, documents, keep)
    token_ids = np.full((len(docs), width), -1, dtype=np.int64)
    for d, doc in enumerate(docs):
        token_ids[d, : len(doc)] = doc
    rows = tuple(torch.stack([layer[d] for layer in rec.rows]).numpy() for d in range(len(docs)))
    arrays: dict[str, Any] = {name: stats[name].numpy() for name in (*STATISTICS, "n_keys")}
    return Capture(
        **arrays,
        n_zero_keys=int(stats["n_zero"].sum()),
        has_content=has_content.numpy(),
        has_sink=has_sink.numpy(),
        query_mask=query_mask.numpy(),
        n_tokens=lengths.numpy().astype(np.int64),
        token_ids=token_ids,
        sink_positions=tuple(np.asarray(s, dtype=np.int64) for s in documents.sinks),
        row_positions=tuple(documents.record),
        rows=rows,
        outputs=outputs,
        outputs_kind=kind,
        token_logprob=token_logprob,
        causal=causal,
        **about,
    )


def _real_statistics(rec, offsets: torch.Tensor, query_mask: torch.Tensor) -> dict:
    """Each statistic and count of ``rec``, its layers stacked: ``(doc, layer, head,
    query_pos)`` in real-token coordinates (``query_mask`` bool ``(doc, query_pos)``), 0 off
    the real queries."""
    width = query_mask.shape[1]
    keep = query_mask[:, None, None, :]
    # An unpadded batch is already in real-token coordinates: no gather, no masking copy.
    unpadded = bool((offsets == 0).all()) and bool(query_mask.all())
    stats = {}
    for name in (*STATISTICS, *COUNTS):
        stacked = torch.stack([layer[name] for layer in rec.stats], dim=1)
        if unpadded and stacked.shape[-1] == width:
            stats[name] = stacked
        else:
            stats[name] = torch.where(keep, _to_real(stacked, offsets, width), 0)
    return stats


def _kept_outputs(out, keep_outputs: bool, causal: bool, documents: BatchDocuments, keep):
    """``(outputs_kind, outputs, token_logprob)`` of the :class:`Capture`: what the model's
    output ``out`` holds (``"none"`` where it is None), and where ``keep_outputs`` its float32
    values ``(doc, query_pos, ...)`` in real-token coordinates (``keep`` bool ``(doc, 1, 1,
    query_pos)``) and, for the logits of a ``causal`` batch, each next token's float64
    log-likelihood ``(doc, query_pos)`` in nats; else None."""
    if out is None:  # attention given by the user: no model outputs
        return "none", None, None
    kind = "logits" if getattr(out, "logits", None) is not None else "last_hidden_state"
    result = out.logits if kind == "logits" else out.last_hidden_state
    if not keep_outputs:
        return kind, None, None
    docs, offsets, width = documents.tokens, documents.offsets, keep.shape[-1]
    token_logprob: np.ndarray | None = None
    if kind == "logits" and causal:
        token_logprob = np.zeros((len(docs), width))
        for d, (doc, off) in enumerate(zip(docs, offsets.tolist(), strict=True)):
            # One logsumexp pass over the vocabulary (not a full log-softmax copy).
            logits = result[d, off : off + len(doc) - 1]
            target = torch.as_tensor(doc[1:], device=logits.device)[:, None]
            picked = logits.gather(-1, target)[:, 0].double() - logits.logsumexp(-1).double()
            token_logprob[d, : len(doc) - 1] = picked.cpu().numpy()
    moved = result.detach().to(torch.float32).cpu().transpose(1, 2)
    real = torch.where(keep[:, :, 0], _to_real(moved, offsets, width), 0.0)
    return kind, real.transpose(1, 2).numpy(), token_logprob


def _to_real(values: torch.Tensor, offsets: torch.Tensor, width: int) -> torch.Tensor:
    """Gather ``(..., pos)`` padded positions into ``(..., query_pos)`` real positions."""
    index = (offsets[:, None] + torch.arange(width)).clamp(max=values.shape[-1] - 1)
    index = index.view(index.shape[0], *([1] * (values.ndim - 2)), width)
    return torch.gather(values, -1, index.expand(*values.shape[:-1], width))


def _pad_to(array: np.ndarray, width: int, axis: int, fill) -> np.ndarray:
    extra = width - array.shape[axis]
    if extra == 0:
        return array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, extra)
    return np.pad(array, pad, constant_values=fill)


def concatenate(parts: Sequence[Capture]) -> Capture:
    """The captures of consecutive batches as one: documents in order, statistics padded to the
    widest batch (0, ``token_ids`` -1), counts summed, ``causal`` only if every part is."""
    width = max(int(p.query_mask.shape[1]) for p in parts)
    merged: dict[str, Any] = {}
    for f in fields(Capture):
        values = [getattr(p, f.name) for p in parts]
        first = values[0]
        if isinstance(first, tuple):
            merged[f.name] = tuple(v for value in values for v in value)
        elif f.name == "n_tokens" or (
            f.name == "n_prompt" and all(value is not None for value in values)
        ):
            merged[f.name] = np.concatenate(values)
        elif f.name in ("n_floored", "n_zero_keys"):
            merged[f.name] = sum(values)
        elif f.name == "causal":
            merged[f.name] = all(values)
        elif any(value is None for value in values):
            merged[f.name] = None
        elif isinstance(first, np.ndarray):
            axis = 1 if f.name in ("outputs", "token_logprob", "query_mask", "token_ids") else 3
            fill = -1 if f.name == "token_ids" else 0
            merged[f.name] = np.concatenate([_pad_to(v, width, axis, fill) for v in values])
        else:
            merged[f.name] = first
    return replace(parts[0], **merged)


def capture_frame(cap: Capture) -> pd.DataFrame:
    """One row per (doc, layer, head, query_pos) real query: a tidy pandas DataFrame.

    Columns: ``doc, layer, head, query_pos, n_keys, sink_mass, entropy, content_entropy,
    within_sink_entropy, sink_balance, has_content, has_sink``. ``content_entropy`` and
    ``sink_balance`` are nullable ``Float64`` with ``<NA>`` where ``has_content`` is False.
    """
    import pandas as pd

    shape = cap.sink_mass.shape
    keep = np.broadcast_to(cap.query_mask[:, None, None, :], shape)
    doc, layer, head, query = np.nonzero(keep)
    has_content = cap.has_content[keep]
    table = {
        "doc": doc.astype(np.int64),
        "layer": layer.astype(np.int64),
        "head": head.astype(np.int64),
        "query_pos": query.astype(np.int64),
        "n_keys": cap.n_keys[keep],
        "sink_mass": cap.sink_mass[keep],
        "entropy": cap.entropy[keep],
        "content_entropy": pd.array(cap.content_entropy[keep], dtype="Float64"),
        "within_sink_entropy": cap.within_sink_entropy[keep],
        "sink_balance": pd.array(cap.sink_balance[keep], dtype="Float64"),
        "has_content": has_content,
        "has_sink": cap.has_sink[keep],
    }
    frame = pd.DataFrame(table)
    frame.loc[~has_content, ["content_entropy", "sink_balance"]] = pd.NA
    return frame
