"""The sink/content split of a row from a fused kernel's sums (docs/design.md, "The fast
path"), shared by the two fast kernels (:mod:`attncoda.capture.kernels._sdpa`,
:mod:`attncoda.capture.kernels._triton`).

The content keys arrive summarised (their log-sum-exp, their entropy and their summed
scores); the few sink keys arrive as scores. ``log(1 - s)`` is ``lse_C - lse``, so the
content entropy is never divided by ``1 - s``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = ["ContentSummary", "split_rows"]


class ContentSummary(NamedTuple):
    """A fused kernel's summary of each row's content keys, float64 ``(batch, head,
    query_pos)`` each, read only where the row has content: ``lse`` (their log-sum-exp),
    ``entropy`` (``H(q)`` in nats) and ``score_sum`` (their summed scores)."""

    lse: torch.Tensor
    entropy: torch.Tensor
    score_sum: torch.Tensor


def split_rows(z_sink, in_sink, k, n, content: ContentSummary):
    """The statistics of every row from its content summary and its sink scores.

    Parameters
    ----------
    z_sink : torch.Tensor
        float64 ``(batch, head, query_pos, sink)``: the sink keys' scores (a learned sink's
        logit last), meaningful where ``in_sink``.
    in_sink : torch.Tensor
        bool, ``z_sink``'s shape or broadcastable to it: which sink columns are visible keys
        of the row.
    k, n : torch.Tensor
        int64 ``(batch, head, query_pos)``: the visible sink keys of each row, and all its
        visible keys, sinks included.
    content : ContentSummary
        The content keys' log-sum-exp, the entropy of ``q`` and their summed scores.

    Returns
    -------
    p_s : torch.Tensor
        float64, the shape of ``z_sink``: each sink key's probability (0 where not visible).
    content_share : torch.Tensor
        float64 ``(batch, head, query_pos)``: ``1 - s`` (0 for a row without content).
    stats : dict of str to torch.Tensor
        ``n_keys``, ``n_sink``, ``sink_mass``, ``entropy``, ``content_entropy``,
        ``within_sink_entropy`` and ``sink_balance``, each ``(batch, head, query_pos)``.
    """
    f64 = torch.float64
    lse_c, content_entropy, content_sum = content
    m = n - k
    has_content = m > 0
    lse_c = torch.where(has_content, lse_c, -math.inf)
    content_entropy = torch.where(has_content, content_entropy, 0.0)

    z_in = z_sink.masked_fill(~in_sink, -math.inf)
    lse_s = torch.logsumexp(z_in, -1)  # -inf where no sink is visible
    lse = torch.logaddexp(lse_c, lse_s)
    safe_lse = torch.where(torch.isfinite(lse), lse, 0.0)
    log_ps = torch.where(in_sink, z_sink - safe_lse[..., None], 0.0)
    p_s = torch.where(in_sink, log_ps.exp(), 0.0)
    sink_mass = p_s.sum(-1)
    sink_plogp = (p_s * log_ps).sum(-1)
    log_content = torch.where(has_content, lse_c - safe_lse, 0.0)  # log(1 - s)
    content_share = torch.where(has_content, log_content.exp(), 0.0)
    entropy = -sink_plogp + content_share * (content_entropy - log_content)
    # H(p_S / s) from the sink logs alone (exactly 0 for a one-key sink).
    log_q = torch.where(in_sink, z_sink - torch.where(k > 0, lse_s, 0.0)[..., None], 0.0)
    within = torch.where(k > 1, -(log_q.exp() * log_q).masked_fill(~in_sink, 0.0).sum(-1), 0.0)
    mean_sink = log_ps.sum(-1) / k.clamp(min=1)
    mean_content = content_sum / m.clamp(min=1) - safe_lse
    factor = torch.sqrt(k.to(f64) * m.to(f64) / n.clamp(min=1).to(f64))
    balance = torch.where(has_content & (k > 0), factor * (mean_sink - mean_content), 0.0)
    stats = {
        "n_keys": n,
        "n_sink": k,
        "sink_mass": sink_mass,
        "entropy": entropy,
        "content_entropy": content_entropy,
        "within_sink_entropy": within + 0.0,
        "sink_balance": balance + 0.0,
    }
    return p_s, content_share, stats
