"""The registered ``"attncoda"`` attention function and the per-row statistics it computes.

The function runs each family's own eager float operations (``repeat_kv``, scores,
scaling, soft-capping, additive mask, softmax, cast, learned sinks, output matmul), so a
layer whose queries fit in one block gives outputs bit-identical to eager by construction
(docs/design.md, "Exactness"). Longer inputs are processed ``block_size`` queries at a time,
so a layer never holds more than ``batch x head x block x key_pos`` scores; a block skips the
keys its mask hides from all its queries. Every block's scores, softmax and log-softmax are
written into the buffers of one :class:`attncoda.capture.stats.Workspace` per forward
pass instead of fresh allocations (docs/design.md, "The attention function").

Where the function is bound to a pass's :class:`attncoda.capture.stats.Recorder` (a
:class:`attncoda.capture.routing.Route`), every block's rows are also turned into
statistics (:func:`attncoda.capture.stats.row_statistics`): float32 log-softmax of the
scores, masked keys set to ``-inf``, re-closed (renormalised) in float64 so the exact
identities of the compositional split hold to float32 rounding. In a bfloat16 or float16
layer the statistics take float32 scores of the layer's own queries and keys instead of its
rounded ones, while the output stays eager's (docs/design.md, "Precision per dtype").
"""

from __future__ import annotations

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.kernels import LayerCall, recorded_rows, serve
from attncoda.capture.stats import Workspace

from ._head_edit import layer_edit
from ._precision import HALF_DTYPES, statistics_logits
from ._recipe import recipe

__all__ = ["IGNORED_KEYWORDS", "IMPLEMENTED_KEYWORDS", "attncoda_attention", "last_visible_key"]


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


def _scores(call, query, key_states, space=None, capacity=0):
    """Scores ``(batch, head, q, key_pos)`` exactly as the family's eager code computes them
    (``call``: the layer's, for its module, scaling and soft-capping).

    With a workspace the matmul writes into its ``"scores"`` buffer and the scaling and
    soft-capping run in place: the same kernels, so the same values, without allocating.
    Without one (autograd needs the graph's tensors intact) every op allocates, as eager's.
    """
    module, scaling, softcap = call.module, call.scaling, call.softcap
    if recipe(module, call.query, call.key).float32_scores:
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
    b, h, q, _ = query.shape
    shape = (b, h, q, key_states.shape[2])
    if space is None:
        scores = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if softcap is not None:
            # Gemma 2's logit soft-capping, before the mask as in its eager function.
            scores = torch.tanh(scores / softcap) * softcap
        return scores
    out = space.take("scores", shape, query.dtype, query.device, capacity)
    scores = torch.matmul(query, key_states.transpose(2, 3), out=out).mul_(scaling)
    if softcap is not None:
        scores = scores.div_(softcap).tanh_().mul_(softcap)
    return scores


def _softmax(scores, s_aux, upcast: bool, query_dtype, value_dtype, out=None):
    """The family's softmax of one block: ``(probs over the token keys, its logits)``.

    ``out`` (float32, used only for float32 scores and values) receives the probabilities.

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
    if out is not None and scores.dtype == value_dtype == torch.float32:
        return torch.softmax(scores, dim=-1, dtype=torch.float32, out=out), scores
    if upcast:
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(query_dtype), scores
    return torch.softmax(scores, dim=-1).type(value_dtype), scores


def causal_mask(q_len: int, k_len: int, device) -> torch.Tensor:
    """bool ``(1, 1, q_len, k_len)``: causal rows, the queries the last ``q_len`` keys (what
    a skipped mask means for a causal layer, as transformers' SDPA reads it)."""
    keys = torch.arange(k_len, device=device)
    rows = torch.arange(k_len - q_len, k_len, device=device)
    return (keys[None, :] <= rows[:, None])[None, None]


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


def attncoda_attention(  # params: transformers' interface, and the route # long: its docs
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, *, route=None, **kwargs
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
    route : Route, optional
        What :func:`attncoda.capture.routing.routed` bound the function to: the pass's
        recorder (its plan says what to record) and the head edit. None: nothing is
        recorded or edited.
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
    rounding. The statistics of a bfloat16 or float16 layer are computed from float32
    scores of the same queries and keys (:func:`statistics_logits`), not from the
    half-precision scores its output uses. The call is one
    :class:`attncoda.capture.kernels.LayerCall`, handed whole to the fast path
    (:func:`attncoda.capture.kernels.serve`) and to the exact path.
    """
    if module.training:
        raise AttncodaError(
            f"{type(module).__name__} is in training mode: attention capture runs in eval mode "
            f"only (call model.eval())"
        )
    _check_keywords(module, kwargs)
    rec = None if route is None else route.current()
    b, h, q_len, _ = query.shape
    k_len = key.shape[2]
    learned = kwargs.get("s_aux") is not None
    layer = rec.begin_layer(b, h, q_len, k_len, learned) if rec is not None else -1
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    plan, masks = (None, None) if rec is None else (rec.plan, rec.masks)
    call = LayerCall(plan, layer, module, query, key, value, attention_mask, scaling, kwargs, masks)
    # The fast path serves the layers whose keys are the pass's own queries (not those
    # that continue a cache).
    fast = plan is not None and plan.method == "fast" and plan.past == 0 and q_len == k_len
    # The fast path's masks are skipped where transformers skips them for SDPA (plain
    # causal rows, no padding): the layer's own is_causal then says what a query sees, and
    # the exact path, where it serves, gets that pattern as a boolean mask.
    causal = bool(getattr(module, "is_causal", False))
    skipped = attention_mask is None and fast and q_len > 1 and causal
    # An ablated layer takes the exact path. Its edit reads the keys a query sees through
    # the mask; a skipped mask (no padding) lets every query see key 0, as its causal
    # pattern does, so the edit is the same either way: one call, which counts the layer.
    edit = layer_edit(None if route is None else route.edit, query, attention_mask)
    if fast and plan.sink is not None:
        out = _fast(call, rec, edit)
        if out is not None:
            return out, None
    mask = causal_mask(q_len, k_len, query.device) if skipped else attention_mask
    return _exact(call, rec, mask, edit)


def _fast(call, rec, edit):
    """The fast path: the layer's output, its statistics from the kernel that serves it
    (:func:`attncoda.capture.kernels.serve`) and its recorded rows into ``rec``; None where
    the exact path serves it (an edited layer, one the kernels decline), as ``rec.ran`` says."""
    chosen = None
    if edit is None:
        chosen, notes = serve(call)
        for line in notes:
            rec.say(line)
    if chosen is None:
        rec.ran[call.layer] = "exact"
        return None
    out, stats = chosen.kernel.run(chosen)
    rec.keep(call.layer, stats, recorded_rows(chosen))
    rec.ran[call.layer] = chosen.served
    return out.transpose(1, 2).contiguous()


def _exact(call, recorder, attention_mask, edit):  # long: eager's op sequence, block by block
    """The exact path: eager's op sequence, ``block_size`` queries at a time, each block's
    rows into ``recorder`` (the pass's, or None); ``(attn_output, attn_weights)`` as
    :func:`attncoda_attention` returns them.

    ``attention_mask`` is the call's, or the causal pattern as a boolean mask where the fast
    path skipped it; ``edit`` the layer's head edit (None: none). Prior validation is
    assumed.
    """
    layer, module, query = call.layer, call.module, call.query
    value, s_aux = call.value, call.s_aux
    block = call.plan.block_size if recorder is not None else 512
    upcast = recipe(module, query, call.key).upcast_softmax
    b, h, q_len, _ = query.shape
    k_len = call.key.shape[2]
    groups = h // call.key.shape[1]
    key_states = _repeat_kv(call.key, groups)
    value_states = _repeat_kv(value, groups)
    # One workspace per forward pass (the recorder's), else per call: the scores, softmax
    # and log-softmax of every block are written into its buffers (see stats/_workspace.py).
    # Not under autograd (gates with gradients): out= kernels and in-place ops refuse it.
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, call.key, value))
    space = None if grad else recorder.workspace if recorder is not None else Workspace()
    rows = min(block, q_len)
    capacity = b * h * rows * k_len
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
        shape = (b, h, stop - start, k_stop)
        block_query = query if single else query[:, :, start:stop]
        block_keys = key_states if k_stop == k_len else key_states[:, :, :k_stop]
        block_values = value_states if k_stop == k_len else value_states[:, :, :k_stop]
        scores = _scores(call, block_query, block_keys, space, capacity)
        visible = None
        block_mask = None
        mask = None
        if attention_mask is not None:
            if recorder is not None and space is not None:
                block_mask = space.mask(attention_mask, start, stop, k_stop, torch.float32)
                visible = block_mask.visible
            mask = attention_mask if single else attention_mask[:, :, start:stop, :k_stop]
            in_place = space is not None
            if mask.dtype == torch.bool:
                visible = mask
                fill = torch.finfo(scores.dtype).min
                scores = (
                    scores.masked_fill_(~mask, fill)
                    if in_place
                    else scores.masked_fill(~mask, fill)
                )
            else:
                if visible is None:
                    visible = mask > torch.finfo(mask.dtype).min / 2
                in_place = in_place and mask.dtype == scores.dtype
                scores = scores.add_(mask) if in_place else scores + mask
        # The probabilities of a one-block layer are returned (eager's attention weights),
        # so they get their own tensor; a longer layer's are written into the workspace.
        probs_out = None
        reuse = space is not None and not single and s_aux is None
        if reuse and scores.dtype == value_states.dtype == torch.float32:
            probs_out = space.take("probs", shape, torch.float32, scores.device, capacity)
        probs, logits = _softmax(
            scores, s_aux, upcast, query.dtype, value_states.dtype, out=probs_out
        )
        part = torch.matmul(probs, block_values)
        if edit is not None:  # replace or gate the ablated heads' outputs of this block
            part = edit(part, value, visible)
        if recorder is not None:
            if scores.dtype in HALF_DTYPES:
                # Statistics from float32 scores of the same q and k: a score rounded to
                # bfloat16 before the softmax costs up to 4e-2 nats of entropy.
                logits = statistics_logits(call, block_query, block_keys, mask, space, capacity)
            log_out = None
            if space is not None and logits.dtype == torch.float32 and logits.shape == shape:
                log_out = space.take("log_rows", shape, torch.float32, scores.device, capacity)
            log_rows = torch.log_softmax(logits, dim=-1, dtype=torch.float32, out=log_out)
            if s_aux is not None:
                # The virtual key is visible to every query; the layer's own probs lack it.
                if visible is not None:
                    visible = torch.cat([visible, visible.new_ones((*visible.shape[:3], 1))], -1)
                recorder.add_block(layer, start, log_rows, visible)
            else:
                recorder.add_block(layer, start, log_rows, visible, probs=probs, mask=block_mask)
        if single:
            output = part
        else:
            if output is None:
                output = part.new_empty((b, h, q_len, part.shape[-1]))
            output[:, :, start:stop] = part
            probs = None
    return output.transpose(1, 2).contiguous(), probs
