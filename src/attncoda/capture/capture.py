"""The public entry point: run a model over token windows and keep per-row statistics.

``mode="attention"`` routes every layer through the registered ``"attncoda"`` attention
function (exact, bounded memory). ``mode="outputs"`` runs eager with
``output_attentions=True`` and reads the returned probabilities, for architectures that do
not use transformers' AttentionInterface (e.g. MPNet, Bloom, Falcon); exact zeros then need
a policy (``zeros="raise"`` or ``"floor"``) because the statistics take logs.
``mode="auto"`` (the default) routes a model that can be routed and reads the others'
eager outputs; ``Capture.mode`` records which was used.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from .._errors import AttncodaError
from .attention import COUNTS, STATISTICS, Recorder, routable, routed, unroutable_message
from .names import METHODS, MODES
from .sinks import auto_sinks, parse_sink, resolve_sinks

__all__ = [
    "METHODS",
    "MODES",
    "Capture",
    "assemble",
    "capture",
    "capture_frame",
    "capture_windows",
    "check_batch",
    "first_position",
    "forward_kwargs",
    "position_ids",
    "record_plan",
]


_ROWS_AUTO = 128
_CALLS_ROUTED: dict[type, bool] = {}


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

    def to_frame(self):
        """The tidy table of :func:`capture_frame`."""
        return capture_frame(self)


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


def _pad(docs: Sequence[np.ndarray], pad_id: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(doc) for doc in docs)
    ids = torch.full((len(docs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for index, doc in enumerate(docs):
        span = slice(width - len(doc), width) if left else slice(0, len(doc))
        ids[index, span] = torch.as_tensor(np.asarray(doc), dtype=torch.long)
        mask[index, span] = 1
    return ids, mask


def _bos_id(tokenizer, model) -> int:
    for source in (tokenizer, getattr(model, "config", None)):
        bos = getattr(source, "bos_token_id", None)
        if isinstance(bos, int):
            return bos
    raise AttncodaError(
        "prepend_bos=True needs a BOS id: neither the tokenizer nor the model config defines "
        "bos_token_id"
    )


def record_plan(lengths: Sequence[int], record_rows, seed: int, first_doc: int):
    """Per document, the sorted query positions whose full rows are kept (``record_rows`` as
    in :func:`capture`; samples seeded by ``(seed, first_doc + index)``)."""
    if record_rows is None or record_rows == "none":
        return [np.zeros(0, dtype=np.int64) for _ in lengths]
    if record_rows == "all":
        limit = None
    elif record_rows == "auto":
        limit = _ROWS_AUTO
    elif isinstance(record_rows, (int, np.integer)) and not isinstance(record_rows, bool):
        if record_rows < 0:
            raise AttncodaError(
                f"record_rows must be 'auto', 'all', 'none' or a non-negative integer, "
                f"got {record_rows!r}"
            )
        limit = int(record_rows)
    else:
        raise AttncodaError(
            f"record_rows must be 'auto', 'all', 'none' or a non-negative integer, "
            f"got {record_rows!r}"
        )
    plan = []
    for index, n in enumerate(lengths):
        if limit is None or n <= limit:
            plan.append(np.arange(n, dtype=np.int64))
        else:
            rng = np.random.default_rng([seed, first_doc + index])
            plan.append(np.sort(rng.choice(n, size=limit, replace=False)).astype(np.int64))
    return plan


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


def forward_kwargs(model, ids, mask, output_attentions: bool = False) -> dict[str, Any]:
    """The keyword arguments of one cache-free forward pass over a padded batch.

    ``input_ids`` and ``attention_mask``; ``position_ids`` only where left padding would
    shift them (:func:`position_ids`); ``use_cache=False`` where the model takes it.
    """
    params = inspect.signature(model.forward).parameters
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
    positions = position_ids(model, mask) if "position_ids" in params else None
    if positions is not None:
        kwargs["position_ids"] = positions
    if "use_cache" in params:
        kwargs["use_cache"] = False
    if output_attentions:
        kwargs["output_attentions"] = True
    return kwargs


def _forward(model, ids, mask, output_attentions: bool = False):
    with torch.no_grad():
        return model(**forward_kwargs(model, ids, mask, output_attentions))


def _log_probs(probs, layer, visible, offsets, zeros: str) -> tuple[torch.Tensor, int]:
    """float64 log of eager probabilities ``(batch, head, pos, pos)``, with the zero policy."""
    zero = visible & (probs == 0)
    floored = int(zero.sum())
    if floored:
        tiny = torch.finfo(probs.dtype).tiny
        if zeros == "raise":
            doc, head, query, key = (int(v) for v in zero.nonzero()[0])
            off = int(offsets[doc])
            raise AttncodaError(
                f"attention probability is exactly 0 at layer {layer}, head {head}, document "
                f"{doc}, query_pos {query - off}, key_pos {key - off}: its log is -inf; pass "
                f"zeros='floor' to clip zeros to {tiny:g} (the smallest normal "
                f"{str(probs.dtype).removeprefix('torch.')}) and count them"
            )
        probs = torch.where(zero, torch.full((), tiny, dtype=probs.dtype), probs)
    # Off the visible keys the log is set to 0 (not -inf): the statistics ignore those keys
    # and need finite entries there.
    logs = torch.log(probs.to(torch.float64))
    return logs.masked_fill(~visible.expand_as(logs), 0.0), floored


def _is_causal(atts, real: torch.Tensor) -> bool:
    length = real.shape[1]
    upper = torch.ones(length, length, dtype=torch.bool, device=real.device).triu(1)
    future = upper & real[:, None, :, None] & real[:, None, None, :]
    return all(bool((probs.masked_select(future) == 0).all()) for probs in atts)


@contextlib.contextmanager
def _eager(model) -> Iterator[None]:
    """Every config of ``model`` set to eager attention inside the block, then restored.

    Set on the configs directly: classes outside the AttentionInterface (Falcon) still read
    ``config._attn_implementation`` to choose their mask, and only eager masks are additive.
    """
    found = (getattr(module, "config", None) for module in model.modules())
    configs: dict[int, Any] = {id(c): c for c in found if hasattr(c, "_attn_implementation")}
    previous = {key: c._attn_implementation for key, c in configs.items()}
    try:
        for c in configs.values():
            c._attn_implementation = "eager"
        yield
    finally:
        for key, c in configs.items():
            c._attn_implementation = previous[key]


def _run(model, ids, mask, sinks, record, mode, zeros, block_size, learned=False, method="exact"):
    """One forward pass; returns (recorder, model output, n_floored)."""
    real = mask.bool()
    offsets = real.long().argmax(-1)
    record_padded = [
        torch.as_tensor(r) + int(o) for r, o in zip(record, offsets.tolist(), strict=True)
    ]
    sink_mask = None
    if sinks is not None:
        sink_mask = torch.zeros_like(real)
        for doc, (pos, off) in enumerate(zip(sinks, offsets.tolist(), strict=True)):
            sink_mask[doc, torch.as_tensor(pos) + off] = True

    def recorder(sink_mask, record_padded):
        return Recorder(
            real.cpu(),
            offsets.cpu(),
            sink_mask,
            record_padded,
            block_size,
            learned=learned,
            method=method,
        )

    if mode == "attention":
        rec = recorder(sink_mask, record_padded)
        with routed(model, rec):
            out = _forward(model, ids, mask)
        return rec, out, 0
    with _eager(model):
        out = _forward(model, ids, mask, output_attentions=True)
    atts = getattr(out, "attentions", None)
    if not atts or any(a is None for a in atts):
        raise AttncodaError(
            f"{type(model).__name__} returned no attention probabilities with "
            f"output_attentions=True"
        )
    causal = _is_causal(atts, real)
    visible = real[:, None, :, None] & real[:, None, None, :]
    if causal:
        visible = visible & torch.ones_like(visible[0, 0]).tril()
    rec, floored = recorder(sink_mask, record_padded), 0
    for layer, probs in enumerate(atts):
        _check_closed(probs, layer, visible, model)
        log_rows, zeros_here = _log_probs(probs, layer, visible, offsets, zeros)
        floored += zeros_here
        b, h, q, k = log_rows.shape
        rec.add_block(rec.begin_layer(b, h, q, k), 0, log_rows, visible)
    return rec, out, floored


def _check_closed(probs, layer: int, visible, model) -> None:
    """Refuse eager rows that do not sum to 1: their missing mass sits on no token."""
    total = probs.to(torch.float64).masked_fill(~visible.expand_as(probs), 0.0).sum(-1)
    rows = visible.any(-1).expand_as(total)
    gap = (total - 1.0).abs().masked_fill(~rows, 0.0)
    worst = float(gap.max()) if gap.numel() else 0.0
    if worst > 1e-3:
        raise AttncodaError(
            f"{type(model).__name__}'s eager attention rows of layer {layer} sum to "
            f"{1.0 - worst:.6g}, not 1: the missing mass sits on no token (learned sinks?); "
            f"capture it with mode='attention', which reads the sink logits"
        )


def _routes_a_call(model, ids, mask, block_size: int) -> bool:
    """Whether a forward pass of one short document reaches the attention function.

    Some classes pass transformers' source heuristic yet compute attention themselves;
    one forward of a few tokens tells (cached per class).
    """
    cls = type(model)
    if cls not in _CALLS_ROUTED:
        probe = Recorder(
            torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, dtype=torch.long), None, [], 2
        )
        with routed(model, probe):
            _forward(model, ids[:1, -2:], torch.ones_like(mask[:1, -2:]))
        _CALLS_ROUTED[cls] = bool(probe.stats)
    return _CALLS_ROUTED[cls]


def _to_real(values: torch.Tensor, offsets: torch.Tensor, width: int) -> torch.Tensor:
    """Gather ``(..., pos)`` padded positions into ``(..., query_pos)`` real positions."""
    index = (offsets[:, None] + torch.arange(width)).clamp(max=values.shape[-1] - 1)
    index = index.view(index.shape[0], *([1] * (values.ndim - 2)), width)
    return torch.gather(values, -1, index.expand(*values.shape[:-1], width))


def capture(
    model,
    input_ids,
    attention_mask=None,
    *,
    sink="first",
    tokenizer=None,
    block_size: int = 512,
    record_rows="auto",
    seed: int = 0,
    mode: str = "auto",
    zeros: str = "raise",
    prepend_bos: bool = False,
    method: str = "exact",
    keep_outputs: bool = False,
    _first_doc: int = 0,
) -> Capture:
    """Run ``model`` over a padded batch and capture per-row attention statistics.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        In eval mode.
    input_ids : array-like
        int ``(batch, pos)``.
    attention_mask : array-like, optional
        ``(batch, pos)`` of 0/1; each row's real tokens must be contiguous (left or right
        padding). All ones when omitted.
    sink : str, int or sequence of int
        ``"first"``, ``"auto"``, positions (``"0,1"``), a token (``"[CLS]"``,
        ``"id:101"``), ``"learned"``, or a token spec with ``",learned"``; see
        :mod:`attncoda.capture.sinks`.
    tokenizer : optional
        For token sinks and the BOS id.
    block_size : int
        Queries per block in ``mode="attention"``; layers hold at most
        ``batch x head x block_size x pos`` scores. Layers with ``pos <= block_size`` are
        bit-identical to eager.
    record_rows : {"auto", "all", "none"} or int
        Which query rows to keep in full: ``"auto"`` keeps every row of a document with at
        most 128 tokens and a seeded sample of 128 otherwise; an int ``k`` does the same
        with ``k``.
    seed : int
        Seeds the row sample (per document: ``(seed, document index)``).
    mode : {"auto", "attention", "outputs"}
        Routed attention function, eager ``output_attentions`` probabilities, or (``"auto"``)
        the first for models that route their attention through transformers'
        AttentionInterface and the second for the others.
    zeros : {"raise", "floor"}
        ``mode="outputs"`` only: what to do with a visible key of probability exactly 0.
    prepend_bos : bool
        Prepend the BOS id (tokenizer's, else the model config's) to every document.
    method : {"exact", "fast"}
        ``"exact"`` (the reference) computes every row; ``"fast"`` takes the statistics from
        the fused attention kernel's log-sum-exp (:mod:`attncoda.capture.fast`), within
        float32 rounding of the exact path, and only the recorded rows in full. The ``auto``
        sink pass, ablations and softcapped or learned-sink layers use the exact path.
    keep_outputs : bool
        Keep the logits (or last hidden state) in ``Capture.outputs``, and for causal
        language models the next-token log-likelihoods in ``Capture.token_logprob``.

    Returns
    -------
    Capture

    Raises
    ------
    AttncodaError
        Bad arguments, a model whose attention cannot be routed (``mode="attention"``), a
        zero probability under ``zeros="raise"``, sink specs that do not fit a document.
    """
    if mode not in MODES:
        raise AttncodaError(
            f"unknown mode {mode!r}: use 'auto' (route when possible), 'attention' (routed, "
            f"exact) or 'outputs' (eager output_attentions)"
        )
    if zeros not in ("raise", "floor"):
        raise AttncodaError(f"unknown zero policy {zeros!r}: use 'raise' or 'floor'")
    if method not in METHODS:
        raise AttncodaError(f"unknown method {method!r}: use 'exact' (the reference) or 'fast'")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise AttncodaError(f"block_size must be a positive integer, got {block_size!r}")
    if model.training:
        raise AttncodaError(
            f"{type(model).__name__} is in training mode: capture runs in eval mode only "
            f"(call model.eval())"
        )
    spec = parse_sink(sink)
    asked_auto = mode == "auto"
    if asked_auto:
        mode = "attention" if routable(model) else "outputs"
    if spec.learned and mode == "outputs":
        raise AttncodaError(
            f"sink {spec.text!r} needs the learned sink logits, which eager outputs do not "
            f"carry: capture {type(model).__name__} with mode='attention'"
        )
    ids, mask = check_batch(input_ids, attention_mask)
    docs = [ids[b][mask[b].bool()].numpy() for b in range(ids.shape[0])]
    bos = None
    if prepend_bos:
        bos = _bos_id(tokenizer, model)
        docs = [np.concatenate([[bos], doc]).astype(np.int64) for doc in docs]
        ids, mask = _pad(docs, 0, bool((mask[:, 0] == 0).any()))
    sinks = None if spec.kind == "auto" else resolve_sinks(spec, docs, tokenizer)
    if mode == "attention" and not _routes_a_call(model, ids, mask, block_size):
        if not asked_auto:
            raise AttncodaError(unroutable_message(model))
        mode = "outputs"
    if method == "fast" and mode != "attention":
        raise AttncodaError(
            f"method='fast' reads the routed attention; {type(model).__name__} is read with "
            f"mode={mode!r}: use method='exact'"
        )
    lengths = [len(doc) for doc in docs]
    record = record_plan(lengths, record_rows, seed, _first_doc)
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    offsets = mask.argmax(-1).cpu()
    if sinks is None:
        first, _, _ = _run(
            model, ids, mask, None, [r[:0] for r in record], mode, zeros, block_size, spec.learned
        )
        received, count = first.received.numpy(), first.received_count.numpy()
        sinks = [
            auto_sinks(received[d, o : o + n], count[d, o : o + n])
            for d, (o, n) in enumerate(zip(offsets.tolist(), lengths, strict=True))
        ]
    rec, out, floored = _run(
        model, ids, mask, sinks, record, mode, zeros, block_size, spec.learned, method
    )
    virtual = int(any(rec.virtual))
    if virtual and not all(rec.virtual):
        raise AttncodaError(
            f"{type(model).__name__} has learned sink logits in some layers only: capture "
            f"needs them in every layer or in none"
        )
    if spec.learned:
        sinks = [np.append(s, len(doc)) for s, doc in zip(sinks, docs, strict=True)]
    about: dict[str, Any] = {
        "virtual_keys": virtual,
        "sink_spec": spec.text,
        "mode": mode,
        "zeros": zeros,
        "model_class": type(model).__name__,
        "n_floored": floored,
        "bos_token_id": bos,
        "block_size": block_size,
        "seed": seed,
        "method": method,
    }
    return assemble(rec, out, docs, sinks, record, offsets, keep_outputs, about)


def assemble(rec, out, docs, sinks, record, offsets, keep_outputs, about: dict[str, Any]):
    """The :class:`Capture` of a filled :class:`Recorder`, in real-token coordinates.

    ``out`` is the model's output (None for attention given by the user), ``about`` the
    fields that say what produced the capture.
    """
    lengths = torch.tensor([len(doc) for doc in docs])
    width = int(lengths.max())
    query_mask = torch.arange(width)[None, :] < lengths[:, None]
    keep = query_mask[:, None, None, :]
    stats = {}
    for name in (*STATISTICS, *COUNTS):
        stacked = torch.stack([layer[name] for layer in rec.stats], dim=1)
        stats[name] = torch.where(keep, _to_real(stacked, offsets, width), 0)
    has_sink = (stats["n_sink"] > 0) & keep
    has_content = (stats["n_keys"] - stats["n_sink"] > 0) & keep
    arange = torch.arange(width)
    tokens_seen = stats["n_keys"] - about["virtual_keys"]
    causal = bool(((tokens_seen <= arange + 1) | ~keep).all())
    if out is None:  # attention given by the user: no model outputs
        kind, result, keep_outputs = "none", None, False
    else:
        kind = "logits" if getattr(out, "logits", None) is not None else "last_hidden_state"
        result = out.logits if kind == "logits" else out.last_hidden_state
    outputs: np.ndarray | None = None
    token_logprob: np.ndarray | None = None
    if keep_outputs and kind == "logits" and causal:
        token_logprob = np.zeros((len(docs), width))
        for d, (doc, off) in enumerate(zip(docs, offsets.tolist(), strict=True)):
            # One logsumexp pass over the vocabulary (not a full log-softmax copy).
            logits = result[d, off : off + len(doc) - 1]
            target = torch.as_tensor(doc[1:], device=logits.device)[:, None]
            picked = logits.gather(-1, target)[:, 0].double() - logits.logsumexp(-1).double()
            token_logprob[d, : len(doc) - 1] = picked.cpu().numpy()
    if keep_outputs:
        moved = result.detach().to(torch.float32).cpu().transpose(1, 2)
        real = torch.where(keep[:, :, 0], _to_real(moved, offsets, width), 0.0)
        outputs = real.transpose(1, 2).numpy()
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
        sink_positions=tuple(np.asarray(s, dtype=np.int64) for s in sinks),
        row_positions=tuple(record),
        rows=rows,
        outputs=outputs,
        outputs_kind=kind,
        token_logprob=token_logprob,
        causal=causal,
        **about,
    )


def _pad_to(array: np.ndarray, width: int, axis: int, fill) -> np.ndarray:
    extra = width - array.shape[axis]
    if extra == 0:
        return array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, extra)
    return np.pad(array, pad, constant_values=fill)


def _concatenate(parts: Sequence[Capture]) -> Capture:
    width = max(int(p.query_mask.shape[1]) for p in parts)
    merged: dict[str, Any] = {}
    for f in fields(Capture):
        values = [getattr(p, f.name) for p in parts]
        first = values[0]
        if isinstance(first, tuple):
            merged[f.name] = tuple(v for value in values for v in value)
        elif f.name == "n_tokens":
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


def capture_windows(
    model,
    windows: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    pad_token_id: int | None = None,
    padding_side: str = "right",
    progress: bool = False,
    **kwargs,
) -> Capture:
    """Capture a list of token windows in padded batches and concatenate the results.

    Parameters
    ----------
    model : transformers.PreTrainedModel
    windows : sequence of sequence of int
        Token ids of each document, without padding.
    batch_size : int
        Documents per forward pass.
    pad_token_id : int, optional
        Id written at padding positions (masked, so any id works); the tokenizer's or
        model config's pad id, else 0.
    padding_side : {"right", "left"}
    progress : bool
        Show a tqdm progress bar over batches.
    **kwargs
        Passed to :func:`capture` (``sink``, ``tokenizer``, ``record_rows``, ...).

    Returns
    -------
    Capture
        Documents in the order of ``windows``; row samples are seeded by the global
        document index, so they do not depend on ``batch_size``.
    """
    if padding_side not in ("right", "left"):
        raise AttncodaError(f"unknown padding_side {padding_side!r}: use 'right' or 'left'")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise AttncodaError(f"batch_size must be a positive integer, got {batch_size!r}")
    if len(windows) == 0:
        raise AttncodaError("windows is empty: give at least one window of token ids")
    for index, window in enumerate(windows):
        if len(window) == 0:
            raise AttncodaError(f"window {index} is empty")
    if pad_token_id is None:
        found = (getattr(s, "pad_token_id", None) for s in (kwargs.get("tokenizer"), model.config))
        pad_token_id = next((value for value in found if isinstance(value, int)), 0)
    starts = range(0, len(windows), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="capture", unit="batch")
    parts = []
    for start in starts:
        chunk = [np.asarray(w, dtype=np.int64) for w in windows[start : start + batch_size]]
        ids, mask = _pad(chunk, pad_token_id, padding_side == "left")
        parts.append(capture(model, ids, mask, _first_doc=start, **kwargs))
    return _concatenate(parts)


def capture_frame(cap: Capture):
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
