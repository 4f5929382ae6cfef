"""The registered ``"attncoda"`` attention function and the per-row statistics it computes.

``transformers`` dispatches a layer's attention through ``AttentionInterface`` by the name
in ``config._attn_implementation``. :func:`routed` registers :func:`attncoda_attention`
under the name ``"attncoda"`` (with ``eager_mask`` as its mask function: without one the
function would receive no mask at all), switches the model to it and restores the previous
implementation afterwards.

The function runs each family's own eager float operations (``repeat_kv``, scores,
scaling, soft-capping, additive mask, softmax, cast, learned sinks, output matmul), so a
layer whose queries fit in one block gives outputs bit-identical to eager by construction
(docs/design.md, "Exactness"). Longer inputs are processed ``block_size`` queries at a time,
so a layer never holds more than ``batch x head x block x key_pos`` scores.

While a :class:`Recorder` is active, every block's rows are also turned into statistics:
float32 log-softmax of the scores, masked keys set to ``-inf``, re-closed (renormalised) in
float64 so the exact identities of the compositional split hold to float32 rounding.
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
from ..models.zoo import routable
from . import ablation as _ablation
from . import fast as _fast

__all__ = [
    "ATTENTION_NAME",
    "STATISTICS",
    "Recorder",
    "attncoda_attention",
    "register",
    "routable",
    "routed",
    "row_statistics",
]

ATTENTION_NAME = "attncoda"
#: Float statistics per (batch, head, query_pos), in the order of :func:`row_statistics`.
STATISTICS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
#: Integer counts per (batch, head, query_pos): keys, sink keys, keys of probability 0.
COUNTS = ("n_keys", "n_sink", "n_zero")

_ACTIVE: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "attncoda_recorder", default=None
)
_RECIPES: dict[type, _Recipe] = {}


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
    if not routable(model):
        raise AttncodaError(unroutable_message(model))
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    token = _ACTIVE.set(recorder)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        model.set_attn_implementation(previous)


@dataclass(frozen=True)
class _Recipe:
    """The dtype choices of a family's eager attention function, read from its source.

    ``upcast_softmax``: the softmax runs in float32 and casts back (Llama, OPT, GPT-NeoX,
    ...; GPT-2 and BERT take it in the scores' dtype). ``float32_scores``: the scores are a
    float32 matmul of upcast queries and keys (GPT-J, CodeGen, GPT-Neo). Both matter only
    for float16/bfloat16 weights.
    """

    upcast_softmax: bool
    float32_scores: bool


def _recipe(module) -> _Recipe:
    cls = type(module)
    if cls not in _RECIPES:
        eager = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        try:
            source = inspect.getsource(eager) if eager is not None else ""
        except (OSError, TypeError):
            source = ""
        _RECIPES[cls] = _Recipe(
            upcast_softmax="dtype=torch.float32" in source or not source,
            float32_scores="query.to(torch.float32)" in source,
        )
    return _RECIPES[cls]


#: Keywords that families pass to the attention function and that carry no arithmetic of
#: the eager path: the mask already encodes causality, padding and the sliding window, and
#: the rest is bookkeeping for caches and other kernels. Anything else is refused by name.
IGNORED_KEYWORDS = frozenset(
    {
        "sliding_window",
        "is_causal",
        "position_ids",
        "cache_position",
        "past_key_values",
        "past_key_value",
        "use_cache",
        "output_attentions",
        "layer_idx",
        "head_mask",
        "token_type_ids",
        "encoder_hidden_states",
        "encoder_attention_mask",
        "return_dict",
        "output_hidden_states",
        "output_router_logits",
    }
)
#: Keywords the function implements, as the families' eager functions do.
IMPLEMENTED_KEYWORDS = frozenset({"softcap", "s_aux"})


def _check_keywords(module, kwargs) -> None:
    for name, value in kwargs.items():
        if value is None or name in IGNORED_KEYWORDS or name in IMPLEMENTED_KEYWORDS:
            continue
        raise AttncodaError(
            f"{type(module).__name__} passes the attention keyword {name}={value!r}, which "
            f"the attncoda attention function does not implement: capture this model with "
            f"mode='outputs' (eager output_attentions)"
        )


def _repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """transformers' ``repeat_kv``: ``(batch, kv_head, pos, d)`` -> ``(batch, head, pos, d)``.

    The same expand-and-reshape as eager, so the score and output matmuls see the very
    tensors eager multiplies (bit-identical outputs by construction).
    """
    if groups == 1:
        return states
    b, kv, n, d = states.shape
    return states[:, :, None].expand(b, kv, groups, n, d).reshape(b, kv * groups, n, d)


def _scores(module, query, key_states, scaling, softcap):
    """Scores ``(batch, head, q, key_pos)`` exactly as the family's eager code computes them."""
    if _recipe(module).float32_scores:
        query, key_states = query.to(torch.float32), key_states.to(torch.float32)
    if getattr(module, "reorder_and_upcast_attn", False):
        # GPT-2's eager path for this flag: float32 baddbmm with the scale as alpha.
        b, h, q, d = query.shape
        k = key_states.shape[2]
        qf = query.reshape(-1, q, d).float()
        kf = key_states.transpose(-1, -2).reshape(-1, d, k).float()
        out = torch.empty(b * h, q, k, dtype=torch.float32, device=query.device)
        out = torch.baddbmm(out, qf, kf, beta=0, alpha=scaling)
        return out.reshape(b, h, q, k)
    scores = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:
        # Gemma 2's logit soft-capping, before the mask as in its eager function.
        scores = torch.tanh(scores / softcap) * softcap
    return scores


def _softmax(scores, s_aux, upcast: bool, query_dtype, value_dtype):
    """The family's softmax of one block: ``(probs over the token keys, float32 log-rows)``.

    With learned sinks (GPT-OSS ``s_aux``) the row has one more, virtual key: its logit is
    appended as the last column, as GPT-OSS's eager function does, and the log-rows keep
    that column so the statistics see the sink's mass.
    """
    if s_aux is not None:
        b, h, q, _ = scores.shape
        sinks = s_aux.reshape(1, -1, 1, 1).expand(b, -1, q, -1).to(scores.dtype)
        combined = torch.cat([scores, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = torch.softmax(combined, dim=-1, dtype=combined.dtype)
        return probs[..., :-1].to(value_dtype), combined
    if upcast:
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(query_dtype), scores
    return torch.softmax(scores, dim=-1).type(value_dtype), scores


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
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention;
        expanded once per layer exactly as eager's ``repeat_kv`` does.
    attention_mask : torch.Tensor or None
        Additive mask ``(batch, 1, query_pos, key_pos)`` from ``eager_mask``.
    scaling : float, optional
        Score scale; ``head_dim ** -0.5`` when None.
    **kwargs
        ``softcap`` (Gemma 2: ``tanh(z / c) * c`` before the mask) and ``s_aux`` (GPT-OSS:
        one learned sink logit per head, a virtual key that takes mass and has no value);
        the keywords of ``IGNORED_KEYWORDS``; any other keyword is refused.

    Returns
    -------
    attn_output : torch.Tensor
        ``(batch, query_pos, head, head_dim)``.
    attn_weights : torch.Tensor or None
        The probabilities ``(batch, head, query_pos, key_pos)`` when the layer fit in one
        block (as eager returns them), else None.

    Notes
    -----
    A layer whose queries fit in one block runs eager's own op sequence (see
    docs/design.md, "Exactness"), so outputs are bit-identical to eager by construction.
    Longer layers differ only by the row blocking of the two matmuls, within float32
    rounding.
    """
    if module.training:
        raise AttncodaError(
            f"{type(module).__name__} is in training mode: attention capture runs in eval mode "
            f"only (call model.eval())"
        )
    _check_keywords(module, kwargs)
    softcap = kwargs.get("softcap")
    s_aux = kwargs.get("s_aux")
    recorder = _ACTIVE.get()
    block = recorder.block_size if recorder is not None else 512
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    upcast = _recipe(module).upcast_softmax
    b, h, q_len, _ = query.shape
    k_len = key.shape[2]
    groups = h // key.shape[1]
    layer = (
        recorder.begin_layer(b, h, q_len, k_len, learned=s_aux is not None)
        if recorder is not None
        else -1
    )
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
    key_states = _repeat_kv(key, groups)
    value_states = _repeat_kv(value, groups)
    output = None
    probs = None
    for start in range(0, q_len, block):
        stop = min(start + block, q_len)
        single = start == 0 and stop == q_len
        # Key blocks the mask hides from every query of this block are skipped; a layer
        # that fits in one block (and an ablated layer) keeps every key, so the one-block
        # case stays eager's own op sequence.
        k_stop = (
            k_len
            if single or edit is not None
            else last_visible_key(attention_mask, start, stop, k_len)
        )
        block_query = query if single else query[:, :, start:stop]
        block_keys = key_states if k_stop == k_len else key_states[:, :, :k_stop]
        block_values = value_states if k_stop == k_len else value_states[:, :, :k_stop]
        scores = _scores(module, block_query, block_keys, scaling, softcap)
        visible = None
        if attention_mask is not None:
            mask = attention_mask if single else attention_mask[:, :, start:stop, :k_stop]
            if mask.dtype == torch.bool:
                visible = mask
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            else:
                visible = mask > torch.finfo(mask.dtype).min / 2
                scores = scores + mask
        probs, logits = _softmax(scores, s_aux, upcast, query.dtype, value_states.dtype)
        part = torch.matmul(probs, block_values)
        # >>> ablation hook: replace or gate the ablated heads' outputs of this block
        if edit is not None:
            part = edit(part, value, visible)
        # <<< ablation hook
        if recorder is not None:
            log_rows = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
            if s_aux is not None:
                # The virtual key is visible to every query; the layer's own probs lack it.
                if visible is not None:
                    visible = torch.cat([visible, visible.new_ones((*visible.shape[:3], 1))], -1)
                recorder.add_block(layer, start, log_rows, visible)
            else:
                recorder.add_block(layer, start, log_rows, visible, probs=probs)
        if single:
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
        bool ``(batch, 1, query_pos, key_pos)`` (or one mask per head, ``(batch, head,
        query_pos, key_pos)``): keys each query attends to. A visible key whose
        log-probability is ``-inf`` is left out of its row and counted in ``n_zero``.
    sink : torch.Tensor
        bool ``(batch, key_pos)``: the sink keys of each document.
    probs : torch.Tensor, optional
        The layer's own softmax of the same scores, exactly 0 off the visible keys (saves
        one pass); computed from ``log_rows`` when omitted or of another dtype.

    Returns
    -------
    dict
        ``(batch, head, query_pos)`` tensors: ``n_keys``, ``n_sink`` (int64 ``n`` and
        ``k``), ``n_zero`` (int64: visible keys of probability exactly 0, left out),
        ``sink_mass`` ``s``, ``entropy`` ``H(p)``, ``content_entropy`` ``H(q)`` with
        ``q = p_C/(1-s)``, ``within_sink_entropy`` ``H(p_S/s)`` and ``sink_balance``
        ``sqrt(k m / n) (mean_S log p - mean_C log p)`` (float64). Rows without content
        (``m == 0``) or without a visible sink (``k == 0``) get 0.0 where a quantity is
        undefined; the caller masks them with ``n_keys - n_sink`` and ``n_sink``.
    """
    f64 = torch.float64
    batch, heads, queries, keys = log_rows.shape
    shape = (batch, heads, queries)
    visible = visible.expand(batch, visible.shape[1], queries, keys)
    # A visible key whose log-probability is -inf (its probability is exactly 0: a score of
    # -inf, or an underflow) has no place in a composition: it leaves the row, per head,
    # and is counted, so no statistic becomes NaN.
    zero = visible & torch.isneginf(log_rows)
    n_zero = zero.sum(-1)
    if bool(n_zero.any()):
        visible = visible & ~zero
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
    cols = index[:, None, None, :].expand(batch, visible.shape[1], queries, index.shape[1])
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
        "n_zero": n_zero.expand(shape),
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
    learned : bool
        Whether the learned sink (the virtual key of a layer with ``s_aux``) belongs to the
        sink set ``S``; otherwise it is one more key of the content ``C``.
    method : {"exact", "fast"}
        ``"fast"`` takes the statistics from the fused kernel (:mod:`attncoda.capture.fast`).

    Attributes
    ----------
    stats : list of dict
        Per layer, :func:`row_statistics` outputs ``(batch, head, pos)`` in padded query
        coordinates (empty dicts in the ``auto`` pass).
    rows : list of list of torch.Tensor
        Per layer and document, float32 log-probabilities ``(head, n_recorded, n_real)``,
        key 0 = first real token, ``-inf`` off the visible keys; layers with a learned sink
        have one more column, the virtual key, last (``n_real + 1``).
    virtual : list of bool
        Per layer, whether its rows have the virtual key.
    received, received_count : torch.Tensor
        ``auto`` pass only: float64 ``(batch, pos)`` attention each key received, summed
        over layers, heads and real queries, and how many such rows could see it.
    """

    query_real: torch.Tensor
    offsets: torch.Tensor
    sink: torch.Tensor | None
    record: list[torch.Tensor]
    block_size: int = 512
    learned: bool = False
    method: str = "exact"
    stats: list[dict[str, torch.Tensor]] = field(default_factory=list)
    rows: list[list[torch.Tensor]] = field(default_factory=list)
    virtual: list[bool] = field(default_factory=list)
    received: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    received_count: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    fast_cache: dict = field(default_factory=dict, repr=False)

    def begin_layer(
        self, batch: int, heads: int, q_len: int, k_len: int, learned: bool = False
    ) -> int:
        """Allocate one layer's outputs; returns its index.

        ``learned`` says the layer has a learned sink logit per head (a virtual key).
        """
        if q_len != k_len or (batch, q_len) != tuple(self.query_real.shape):
            raise AttncodaError(
                f"attention capture needs one full forward pass over the batch without a "
                f"cache: got queries {q_len}, keys {k_len} for a batch of shape "
                f"{tuple(self.query_real.shape)}"
            )
        if self.learned and not learned:
            raise AttncodaError(
                f"sink 'learned' needs learned sink logits (s_aux), but attention call "
                f"{len(self.stats)} of this model has none: use a token sink such as 'first'"
            )
        self.virtual.append(learned)
        if self.sink is None:
            if self.received.numel() == 0:
                self.received = torch.zeros(batch, k_len, dtype=torch.float64)
                self.received_count = torch.zeros(batch, k_len, dtype=torch.float64)
            self.stats.append({})
            return len(self.stats) - 1
        layer = {name: torch.zeros(batch, heads, q_len, dtype=torch.float64) for name in STATISTICS}
        for name in COUNTS:
            layer[name] = torch.zeros(batch, heads, q_len, dtype=torch.int64)
        self.stats.append(layer)
        n_real = self.query_real.sum(-1).tolist()
        self.rows.append(
            [
                torch.full((heads, len(pos), n + int(learned)), -math.inf)
                for pos, n in zip(self.record, n_real, strict=True)
            ]
        )
        return len(self.stats) - 1

    def add_block(self, layer: int, start: int, log_rows, visible, probs=None) -> None:
        """Fold one block of log-softmax rows ``(batch, head, q, key_pos)`` in.

        ``probs``, when given, is the layer's own softmax of the same scores (it saves the
        statistics one exponential pass). In a layer with a learned sink, ``log_rows`` and
        ``visible`` have the virtual key as one more, last column.
        """
        stop = start + log_rows.shape[2]
        device = log_rows.device
        virtual = self.virtual[layer]
        if visible is None:
            visible = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
        b, _, q, k = log_rows.shape
        visible = visible.expand(b, 1, q, k)
        real_q = self.query_real[:, start:stop].to(device)
        if self.sink is None:
            tokens = k - int(virtual)
            seen = (visible & real_q[:, None, :, None])[..., :tokens]
            p = log_rows.exp() if probs is None or probs.dtype != log_rows.dtype else probs
            received = p[..., :tokens].masked_fill(~seen, 0.0).sum((1, 2), dtype=torch.float64)
            self.received[:, :tokens] += received.cpu()
            count = seen.sum((1, 2)).to(torch.float64) * log_rows.shape[1]
            self.received_count[:, :tokens] += count.cpu()
            return
        # A block that skipped hidden keys has fewer token columns than the document.
        tokens = k - int(virtual)
        sink = self.sink[:, :tokens].to(device)
        if virtual:
            sink = torch.cat([sink, sink.new_full((b, 1), self.learned)], dim=-1)
        stats = row_statistics(log_rows, visible, sink, probs=probs)
        for name, value in stats.items():
            self.stats[layer][name][:, :, start:stop] = value.cpu()
        for doc, positions in enumerate(self.record):
            inside = (positions >= start) & (positions < stop)
            if not bool(inside.any()):
                continue
            lo = int(self.offsets[doc])
            n = self.rows[layer][doc].shape[-1] - int(virtual)
            local = (positions[inside] - start).to(device)
            width = max(0, min(n, tokens - lo))  # the document's token columns here
            columns = torch.arange(lo, lo + width, device=device)
            if virtual:
                columns = torch.cat([columns, columns.new_full((1,), k - 1)])
            rows = log_rows[doc][:, local][..., columns].to(torch.float32)
            seen = visible[doc][:, local][..., columns]
            block_rows = rows.masked_fill(~seen, -math.inf).cpu()
            # The columns a block skipped stay -inf; the virtual key is the last column.
            self.rows[layer][doc][:, inside, :width] = block_rows[..., :width]
            if virtual:
                self.rows[layer][doc][:, inside, -1] = block_rows[..., -1]
