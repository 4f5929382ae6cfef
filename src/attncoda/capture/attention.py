"""The registered ``"attncoda"`` attention function and the per-row statistics it computes.

``transformers`` dispatches a layer's attention through ``AttentionInterface`` by the name
in ``config._attn_implementation``. :func:`routed` registers :func:`attncoda_attention`
under the name ``"attncoda"`` (with ``eager_mask`` as its mask function: without one the
function would receive no mask at all), switches the model to it and restores the previous
implementation afterwards.

The function reproduces each family's eager float operations (scores, scaling, additive
mask, softmax, cast, output matmul), so a model's outputs are bit-identical to eager when a
layer's queries fit in one block. Longer inputs are processed ``block_size`` queries at a
time, so a layer never holds more than ``batch x head x block x key_pos`` scores. Keys and
values arrive unexpanded under grouped-query attention and are never repeated: queries are
grouped per key/value head instead.

While a :class:`Recorder` is active, every block's rows are also turned into statistics:
float32 log-softmax of the scores, masked keys set to ``-inf``, re-closed (renormalised) in
float64 so the exact identities of the compositional split hold to float64 precision.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from .._errors import AttncodaError
from . import ablation as _ablation
from . import fast as _fast

__all__ = [
    "ATTENTION_NAME",
    "STATISTICS",
    "Recorder",
    "attncoda_attention",
    "register",
    "routed",
    "row_statistics",
]

ATTENTION_NAME = "attncoda"
#: Float statistics per (batch, head, query_pos), in the order of :func:`row_statistics`.
STATISTICS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")

_ACTIVE: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "attncoda_recorder", default=None
)
_UPCAST_CACHE: dict[type, bool] = {}


def register() -> None:
    """Register ``"attncoda"`` in transformers' attention and attention-mask interfaces.

    Idempotent. The mask function is transformers' ``eager_mask`` (additive float mask,
    ``0`` where a key is visible and the dtype's minimum where it is not).
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, attncoda_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)


def unroutable_message(model: object) -> str:
    """The error message for a model whose attention cannot be routed."""
    name = type(model).__name__
    return (
        f"{name} does not route its attention through transformers' AttentionInterface, "
        f"so capture cannot read its scores: use mode='outputs' (eager output_attentions "
        f"with an explicit zero policy)"
    )


@contextlib.contextmanager
def routed(model, recorder: Recorder | None = None) -> Iterator[None]:
    """Run ``model`` with the ``"attncoda"`` attention function inside the block.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model in eval mode whose attention layers use ``ALL_ATTENTION_FUNCTIONS``.
    recorder : Recorder, optional
        Collects statistics for the forward passes run inside the block.

    Raises
    ------
    AttncodaError
        When the model class does not use the AttentionInterface (e.g. Bloom, Falcon).
    """
    register()
    can_set = getattr(type(model), "_can_set_attn_implementation", None)
    if can_set is None or not can_set():
        raise AttncodaError(unroutable_message(model))
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    token = _ACTIVE.set(recorder)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        model.set_attn_implementation(previous)


def _upcasts_softmax(module) -> bool:
    """Whether the family's eager function takes the softmax in float32 then casts back.

    GPT-2 and BERT take the softmax in the scores' dtype; Llama, OPT, GPT-NeoX, ... pass
    ``dtype=torch.float32``. Identical for float32 models; matters for float16/bfloat16.
    """
    cls = type(module)
    if cls not in _UPCAST_CACHE:
        eager = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        try:
            source = inspect.getsource(eager) if eager is not None else ""
        except (OSError, TypeError):
            source = ""
        _UPCAST_CACHE[cls] = "dtype=torch.float32" in source or not source
    return _UPCAST_CACHE[cls]


def _scores(module, query, key, scaling):
    """Scores ``(batch, head, q, key_pos)`` exactly as the family's eager code computes them.

    Queries are grouped per key/value head: ``(batch, kv_head, group*q, head_dim)`` against
    the unexpanded keys, so K is never repeated.
    """
    b, h, q, d = query.shape
    kv = key.shape[1]
    if getattr(module, "reorder_and_upcast_attn", False):
        # GPT-2's eager path for this flag: float32 baddbmm with the scale as alpha.
        qf = query.reshape(-1, q, d).float()
        kf = key.transpose(-1, -2).reshape(-1, d, key.shape[2]).float()
        out = torch.empty(b * h, q, key.shape[2], dtype=torch.float32, device=query.device)
        out = torch.baddbmm(out, qf, kf, beta=0, alpha=scaling)
        return out.reshape(b, h, q, key.shape[2])
    if kv != h:
        query = query.reshape(b, kv, (h // kv) * q, d)
    scores = torch.matmul(query, key.transpose(-1, -2))
    return scores.reshape(b, h, q, key.shape[2]) * scaling


def last_visible_key(attention_mask, start: int, stop: int, k_len: int) -> int:
    """One past the last key any query in ``start:stop`` of any document can see.

    Keys after it are hidden from the whole block (the causal mask hides every key after
    the block's last query), so the block's scores, softmax and value product skip them:
    their probabilities are exactly 0 either way. ``k_len`` when there is no mask, and when
    a query of the block sees no key at all (a left-padding query: eager spreads its row
    over every key, so every key is kept).
    """
    if attention_mask is None:
        return k_len
    mask = attention_mask[:, :, start:stop]
    seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    if not bool(seen.any(-1).all()):
        return k_len
    cols = torch.nonzero(seen.any(dim=(0, 1, 2)))
    return int(cols[-1, 0]) + 1


def _weighted_values(probs, value):
    """``probs @ value`` per key/value head, ``(batch, head, q, head_dim)``."""
    b, h, q, k = probs.shape
    kv = value.shape[1]
    if kv != h:
        return torch.matmul(probs.reshape(b, kv, (h // kv) * q, k), value).reshape(b, h, q, -1)
    return torch.matmul(probs, value)


def attncoda_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """Eager-exact attention in query blocks, recording row statistics when asked.

    Parameters
    ----------
    module : torch.nn.Module
        The attention layer (must be in eval mode).
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``.
    key, value : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention.
    attention_mask : torch.Tensor or None
        Additive mask ``(batch, 1, query_pos, key_pos)`` from ``eager_mask``.
    scaling : float, optional
        Score scale; ``head_dim ** -0.5`` when None.

    Returns
    -------
    attn_output : torch.Tensor
        ``(batch, query_pos, head, head_dim)``.
    attn_weights : torch.Tensor or None
        The probabilities ``(batch, head, query_pos, key_pos)`` when the layer fit in one
        block (as eager returns them), else None.
    """
    if module.training:
        raise AttncodaError(
            f"{type(module).__name__} is in training mode: attention capture runs in eval mode "
            f"only (call model.eval())"
        )
    for name in ("softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise AttncodaError(
                f"{type(module).__name__} passes {name}={kwargs[name]!r}, which the attncoda "
                f"attention function does not implement: use mode='outputs'"
            )
    recorder = _ACTIVE.get()
    block = recorder.block_size if recorder is not None else 512
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    upcast = _upcasts_softmax(module)
    b, h, q_len, _ = query.shape
    k_len = key.shape[2]
    layer = recorder.begin_layer(b, h, q_len, k_len) if recorder is not None else -1
    # >>> ablation hook (attncoda.capture.ablation): None unless ablate()/head_gates() is active
    edit = _ablation.layer_edit(module, query, attention_mask)
    # <<< ablation hook
    # >>> fast path (attncoda.capture.fast): statistics from the fused kernel's log-sum-exp;
    # the exact path below stays the reference (auto-sink pass, ablations, masks with a bias)
    if recorder is not None and recorder.method == "fast" and recorder.sink is not None:
        if edit is None and kwargs.get("softcap") is None and kwargs.get("s_aux") is None:
            fast = _fast.record_layer(
                recorder, layer, module, query, key, value, attention_mask, scaling
            )
            if fast is not None:
                return fast, None
    # <<< fast path
    output = None
    probs = None
    for start in range(0, q_len, block):
        stop = min(start + block, q_len)
        # Key blocks the mask hides from every query of this block are skipped (a layer
        # that fits in one block keeps every key, so it stays bit-identical to eager).
        whole = (start == 0 and stop == q_len) or edit is not None
        k_stop = k_len if whole else last_visible_key(attention_mask, start, stop, k_len)
        scores = _scores(module, query[:, :, start:stop], key[:, :, :k_stop], scaling)
        visible = None
        if attention_mask is not None:
            mask = attention_mask[:, :, start:stop, :k_stop]
            if mask.dtype == torch.bool:
                visible = mask
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            else:
                visible = mask > torch.finfo(mask.dtype).min / 2
                scores = scores + mask
        if upcast:
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        else:
            probs = torch.softmax(scores, dim=-1).type(value.dtype)
        part = _weighted_values(probs, value[:, :, :k_stop])
        # >>> ablation hook: replace or gate the ablated heads' outputs of this block
        if edit is not None:
            part = edit(part, value, visible)
        # <<< ablation hook
        if recorder is not None:
            log_rows = torch.log_softmax(scores, dim=-1, dtype=torch.float32)
            recorder.add_block(layer, start, log_rows, visible, probs=probs)
        if start == 0 and stop == q_len:
            output = part
        else:
            if output is None:
                output = part.new_empty((b, h, q_len, part.shape[-1]))
            output[:, :, start:stop] = part
            probs = None
    return output.transpose(1, 2).contiguous(), probs


def _sink_columns(sink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sink key indices ``(batch, k_max)`` padded with 0, and which of them are real."""
    counts = sink.sum(-1)
    width = max(int(counts.max()) if counts.numel() else 0, 1)
    # A stable sort puts each document's sink positions first, in order.
    index = torch.argsort((~sink).to(torch.int8), dim=-1, stable=True)[:, :width]
    valid = torch.arange(width, device=sink.device)[None, :] < counts[:, None]
    return index, valid.to(sink.device)


def row_statistics(
    log_rows: torch.Tensor,
    visible: torch.Tensor,
    sink: torch.Tensor,
    probs: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Compositional row statistics, in nats, from log-softmax rows.

    The full rows are read by four fused reductions in their own dtype (float32 for a
    float32 model): ``sum p log p`` and ``sum_visible log p`` (batched dot products),
    ``sum_C p`` (a matmul) and the sink columns; every statistic is then derived in float64
    from those sums and the few sink columns. ``log(1-s)`` is the log of the content mass
    summed over the content keys, never a subtraction from 1. Identities such as
    ``H = h(s) + s H(p_S/s) + (1-s) H(q)`` hold to float32 rounding (about 1e-7 nats).

    Parameters
    ----------
    log_rows : torch.Tensor
        Log-probabilities ``(batch, head, query_pos, key_pos)``; used as scratch (entries
        off the visible keys are set to 0 in place).
    visible : torch.Tensor
        bool ``(batch, 1, query_pos, key_pos)``: keys each query attends to.
    sink : torch.Tensor
        bool ``(batch, key_pos)``: the sink keys of each document.
    probs : torch.Tensor, optional
        The layer's own softmax of the same scores, exactly 0 off the visible keys (saves
        one pass); computed from ``log_rows`` when omitted or of another dtype.

    Returns
    -------
    dict
        ``(batch, head, query_pos)`` tensors: ``n_keys``, ``n_sink`` (int64 ``n`` and
        ``k``), ``sink_mass`` ``s``, ``entropy`` ``H(p)``, ``content_entropy`` ``H(q)``
        with ``q = p_C/(1-s)``, ``within_sink_entropy`` ``H(p_S/s)`` and ``sink_balance``
        ``sqrt(k m / n) (mean_S log p - mean_C log p)`` (float64). Rows without content
        (``m == 0``) or without a visible sink (``k == 0``) get 0.0 where a quantity is
        undefined; the caller masks them with ``n_keys - n_sink`` and ``n_sink``.
    """
    f64 = torch.float64
    batch, heads, queries, keys = log_rows.shape
    shape = (batch, heads, queries)
    visible = visible.expand(batch, 1, queries, keys)
    if probs is None or probs.dtype != log_rows.dtype:
        probs = log_rows.exp().masked_fill(~visible, 0.0)
    # Off the visible keys the logs become 0 (in place: the caller's rows are scratch), so
    # every full-row sum below is a batched matmul or dot product.
    logs = log_rows.masked_fill_(~visible, 0.0)
    plogp = torch.einsum("bhqk,bhqk->bhq", probs, logs).to(f64)
    ones = torch.ones((keys, 1), dtype=logs.dtype, device=logs.device)
    sum_log = torch.matmul(logs, ones)[..., 0].to(f64)
    content_cols = (~sink).to(probs.dtype)[:, None, :, None]
    content_mass = torch.matmul(probs, content_cols)[..., 0].to(f64)
    # The sink columns (few): gathered once; the rest derives from them.
    index, valid = _sink_columns(sink)
    cols = index[:, None, None, :].expand(batch, 1, queries, index.shape[1])
    in_sink = torch.gather(visible, -1, cols) & valid[:, None, None, :]
    cols = cols.expand(batch, heads, -1, -1)
    sink_logs = torch.gather(logs, -1, cols).to(f64).masked_fill(~in_sink, 0.0)
    sink_p = torch.gather(probs, -1, cols).to(f64).masked_fill(~in_sink, 0.0)
    k = in_sink.sum(-1).expand(shape)
    n = visible.sum(-1).expand(shape)
    m = n - k
    sink_mass = sink_p.sum(-1)
    sink_plogp = (sink_p * sink_logs).sum(-1)
    # H(p_S/s) from the sink logs alone (exactly 0 for a one-key sink).
    log_in = sink_logs.masked_fill(~in_sink, -math.inf)
    log_s = log_in.logsumexp(-1, keepdim=True)
    log_q = torch.where(in_sink, log_in - torch.where(k[..., None] > 0, log_s, 0.0), 0.0)
    within = torch.where(k > 1, -(log_q.exp() * log_q).masked_fill(~in_sink, 0.0).sum(-1), 0.0)
    has_content = m > 0
    lost = has_content & (content_mass == 0)
    safe_c = torch.where(content_mass > 0, content_mass, 1.0)
    content_entropy = torch.log(safe_c) - (plogp - sink_plogp) / safe_c
    if bool(lost.any()):
        # Every content probability underflowed: the content part again, in log space.
        in_content = visible & ~sink[:, None, None, :]
        log_c = torch.where(in_content, logs.to(f64), -math.inf).logsumexp(-1)
        logq = torch.where(in_content, logs.to(f64) - log_c.unsqueeze(-1), 0.0)
        content_entropy = torch.where(lost, -(logq.exp() * logq).sum(-1), content_entropy)
    # Closure: the float32 softmax sums to 1 only up to rounding; s + C is the row's mass.
    total = sink_mass + content_mass
    total = torch.where(total > 0, total, 1.0)
    mean_sink = sink_logs.sum(-1) / k.clamp(min=1)
    mean_content = (sum_log - sink_logs.sum(-1)) / m.clamp(min=1)
    factor = torch.sqrt(k.to(f64) * m.to(f64) / n.clamp(min=1).to(f64))
    return {
        "n_keys": n,
        "n_sink": k,
        "sink_mass": sink_mass / total,
        "entropy": torch.log(total) - plogp / total,
        "content_entropy": torch.where(has_content, content_entropy, 0.0),
        "within_sink_entropy": within + 0.0,
        "sink_balance": factor * (mean_sink - mean_content) + 0.0,
    }


@dataclass
class Recorder:
    """Collects row statistics for one forward pass of a padded batch.

    Positions are padded ``(batch, pos)`` coordinates; layers are numbered in call order.

    Parameters
    ----------
    query_real : torch.Tensor
        bool ``(batch, pos)``: real (non-padding) tokens.
    offsets : torch.Tensor
        int64 ``(batch,)``: padded position of each document's first real token.
    sink : torch.Tensor or None
        bool ``(batch, pos)``: sink keys. None runs the ``auto`` first pass, which only
        sums the attention each key receives.
    record : list of torch.Tensor
        Per document, the sorted padded query positions whose full rows are kept.
    block_size : int
        Queries per block.
    method : {"exact", "fast"}
        ``"fast"`` takes the statistics from the fused kernel (:mod:`attncoda.capture.fast`).

    Attributes
    ----------
    stats : list of dict
        Per layer, :func:`row_statistics` outputs ``(batch, head, pos)`` in padded query
        coordinates (empty dicts in the ``auto`` pass).
    rows : list of list of torch.Tensor
        Per layer and document, float32 log-probabilities ``(head, n_recorded, n_real)``,
        key 0 = first real token, ``-inf`` off the visible keys.
    received, received_count : torch.Tensor
        ``auto`` pass only: float64 ``(batch, pos)`` attention each key received, summed
        over layers, heads and real queries, and how many such rows could see it.
    """

    query_real: torch.Tensor
    offsets: torch.Tensor
    sink: torch.Tensor | None
    record: list[torch.Tensor]
    block_size: int = 512
    method: str = "exact"
    stats: list[dict[str, torch.Tensor]] = field(default_factory=list)
    rows: list[list[torch.Tensor]] = field(default_factory=list)
    received: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    received_count: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    fast_cache: dict = field(default_factory=dict, repr=False)

    def begin_layer(self, batch: int, heads: int, q_len: int, k_len: int) -> int:
        """Allocate one layer's outputs; returns its index."""
        if q_len != k_len or (batch, q_len) != tuple(self.query_real.shape):
            raise AttncodaError(
                f"attention capture needs one full forward pass over the batch without a "
                f"cache: got queries {q_len}, keys {k_len} for a batch of shape "
                f"{tuple(self.query_real.shape)}"
            )
        if self.sink is None:
            if self.received.numel() == 0:
                self.received = torch.zeros(batch, k_len, dtype=torch.float64)
                self.received_count = torch.zeros(batch, k_len, dtype=torch.float64)
            self.stats.append({})
            return len(self.stats) - 1
        layer = {name: torch.zeros(batch, heads, q_len, dtype=torch.float64) for name in STATISTICS}
        layer["n_keys"] = torch.zeros(batch, heads, q_len, dtype=torch.int64)
        layer["n_sink"] = torch.zeros(batch, heads, q_len, dtype=torch.int64)
        self.stats.append(layer)
        n_real = self.query_real.sum(-1).tolist()
        self.rows.append(
            [
                torch.full((heads, len(pos), n), -math.inf)
                for pos, n in zip(self.record, n_real, strict=True)
            ]
        )
        return len(self.stats) - 1

    def add_block(self, layer: int, start: int, log_rows, visible, probs=None) -> None:
        """Fold one block of log-softmax rows ``(batch, head, q, key_pos)`` in.

        ``probs``, when given, is the layer's own softmax of the same scores (it saves the
        statistics one exponential pass).
        """
        stop = start + log_rows.shape[2]
        device = log_rows.device
        if visible is None:
            visible = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
        b, _, q, k = log_rows.shape
        visible = visible.expand(b, 1, q, k)
        real_q = self.query_real[:, start:stop].to(device)
        if self.sink is None:
            seen = visible & real_q[:, None, :, None]
            p = log_rows.exp() if probs is None or probs.dtype != log_rows.dtype else probs
            received = p.masked_fill(~seen, 0.0).sum((1, 2), dtype=torch.float64)
            self.received[:, :k] += received.cpu()
            count = seen.sum((1, 2)).to(torch.float64) * log_rows.shape[1]
            self.received_count[:, :k] += count.cpu()
            return
        stats = row_statistics(log_rows, visible, self.sink[:, :k].to(device), probs=probs)
        for name, value in stats.items():
            self.stats[layer][name][:, :, start:stop] = value.cpu()
        for doc, positions in enumerate(self.record):
            inside = (positions >= start) & (positions < stop)
            if not bool(inside.any()):
                continue
            lo = int(self.offsets[doc])
            n = self.rows[layer][doc].shape[-1]
            local = (positions[inside] - start).to(device)
            rows = log_rows[doc, :, local, lo : lo + n].to(torch.float32)
            seen = visible[doc, :, local, lo : lo + n]
            # A block that skipped hidden keys has fewer columns; the rest stay -inf.
            width = rows.shape[-1]
            block_rows = rows.masked_fill(~seen, -math.inf).cpu()
            self.rows[layer][doc][:, inside, :width] = block_rows
