r"""A window's next-token NLL and the bound of its float32 rounding (docs/design.md, "The
same evidence, by one rule").

Token ``t`` of a window is scored by the logits ``z = W h_t (+ b)`` of the language-model
head, ``W`` its ``(vocab, d)`` weight and ``h_t`` its input, and ``NLL_t = LSE(z) - z_y``,
``y`` the next token. Two roundings are bounded here, to first order:

*The head's product.* Each logit is a sum over the ``d`` hidden units (a bias is one more
unit of ``h``, equal to 1). Its float32 accumulation is bounded probabilistically (Higham
and Mary, "A New Approach to Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput.
41(5), 2019, Theorem 3.1: the rounding errors independent, of mean zero): by
``gamma_j = lambda sqrt(d + 2) u sum_i |W_ji h_i| <= lambda sqrt(d + 2) u ||W_j|| ||h_t||``
(Cauchy-Schwarz: one norm per vocabulary row, computed once per model; the ``+ 2`` the
rounding of ``h`` itself and of the result), each sum failing with probability at most
``2 (d + 2) exp(-lambda^2 (1 - u)^2 / 2)``: 1.6e-11 for Gemma 3's ``d = 640`` at
``lambda = 8`` (:data:`LAMBDA`). The worst case over every summation order, ``(d + 2) u``,
is 3.2 times larger there (3.0 times for SmolLM2's ``d = 576``), and moves a ratio's
allowance above 1% on the demo's rows (1.3% to 2.3%), where a ratio moved by 1% would then
pass unnoticed; the drift measured between CPUs is about 700 times below
even the probabilistic bound (docs/design.md, "The same evidence, by one rule"). Since
``dNLL_t / dz_j = p_j - [j = y]``, the NLL moves by at most

.. math::

    \sum_{j \ne y} p_j \gamma_j + (1 - p_y) \gamma_y
    = \lambda \sqrt{d + 2}\, u \|h_t\| \Bigl(\sum_j p_j \|W_j\| + (1 - 2 p_y) \|W_y\|\Bigr).

*The log-sum-exp.* ``LSE(z) = m + log S``, ``m = max z``, ``S = sum_j exp(z_j - m)``, with
each ``exp(z_j - m)`` in float32 and ``S`` summed in float32 blocks of :data:`BLOCK` terms,
the blocks' sums in float64. A float32 accumulation over the whole vocabulary would move
``S`` by up to ``(V - 1) u`` of itself (0.016 nats for Gemma 3's 262,144 rows); here ``S``
moves by at most ``u (BLOCK + 1 + log V)`` of itself: ``BLOCK - 1`` float32 additions per
term, its ``exp`` within one ulp (``2 u``), and the rounded difference ``z_j - m``, which
brings in ``u sum_j p_j |z_j - m| <= u H(p) <= u log V``. So ``LSE`` moves by as much, in
nats. A final-logit soft cap ``c tanh(z / c)`` does not enlarge a logit's rounding (its
slope is at most 1) and adds its own, ``4 u c`` per logit.

A window's bound is the mean of its tokens' bounds (its NLL is their mean, in float64). The
layers before the head (18 to 30 in the demo's models) round too; no derivation here bounds
how that propagates, and their rounding is not covered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF

__all__ = ["BLOCK", "LAMBDA", "LogitRows", "logit_rows", "nll_rounding"]

#: The float32 block of the log-sum-exp's sum (the blocks' sums are added in float64).
BLOCK = 64
#: The probabilistic accumulation bound's ``lambda`` (the module docstring): a logit's
#: ``d``-term sum exceeds ``lambda sqrt(d + 2) u`` of its magnitudes with probability at most
#: ``2 (d + 2) exp(-lambda^2 (1 - u)^2 / 2)``, 1.6e-11 at ``d = 640``.
LAMBDA = 8.0


@dataclass(frozen=True, eq=False)
class LogitRows:
    """What the bound of a window's NLL reads of a model's language-model head.

    Attributes
    ----------
    module : torch.nn.Module
        The head (``model.get_output_embeddings()``), whose input is ``h``.
    norms : torch.Tensor
        float32 ``(vocab,)``: each row's norm ``||W_j||`` (with its bias, where it has one).
    width : int
        The terms of each logit's sum: ``d``, plus 1 with a bias.
    unit : float
        The unit roundoff of the head's weights (``2**-24`` in float32).
    cap : float
        The final-logit soft cap ``c`` (0: none).
    """

    module: Any
    norms: Any
    width: int
    unit: float
    cap: float

    @property
    def bias(self) -> bool:
        """Whether the head adds a bias (``h`` then has one more unit, equal to 1)."""
        return getattr(self.module, "bias", None) is not None


def logit_rows(model: Any) -> LogitRows:
    """The head of ``model`` and its rows' norms (computed once per model).

    Raises
    ------
    AttncodaError
        A model without output embeddings, or whose head has no 2-D ``weight``.
    """
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise AttncodaError(
            f"{type(model).__name__} has no language-model head with a 2-D weight "
            f"(get_output_embeddings()): prune bounds each window's NLL through it; use a "
            f"causal language model of transformers"
        )
    with torch.no_grad():
        norms = torch.linalg.vector_norm(weight.detach(), dim=-1, dtype=torch.float32)
        bias = getattr(head, "bias", None)
        if bias is not None:
            norms = torch.hypot(norms, bias.detach().float())
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    cap = getattr(config, "final_logit_softcapping", None) or 0.0
    return LogitRows(
        module=head,
        norms=norms,
        width=int(weight.shape[1]) + (bias is not None),
        unit=float(torch.finfo(weight.dtype).eps) / 2,
        cap=float(cap),
    )


def nll_rounding(logits: Any, hidden: Any, ids: Any, mask: Any, rows: LogitRows) -> tuple:
    """Each window's mean next-token NLL (float64 from the float32 logits) and its bound.

    Parameters
    ----------
    logits : torch.Tensor
        ``(batch, pos, vocab)``: the head's output for the batch.
    hidden : torch.Tensor
        ``(batch, pos, d)``: the head's input ``h``.
    ids, mask : torch.Tensor
        int ``(batch, pos)``: the token ids and the 0/1 real-token mask; a pair ``(t - 1, t)``
        counts where both are real (right padding is left out).
    rows : LogitRows
        :func:`logit_rows` of the model.

    Returns
    -------
    nll, rounding : ndarray of float64, shape (batch,)
        ``-mean_t log p(x_t | x_<t)`` in nats, and how far float32 rounding of the head's
        product and of the log-sum-exp can move it (the module docstring), in nats.
    """
    import torch

    if hidden.shape[:-1] != logits.shape[:-1] or hidden.shape[-1] + rows.bias != rows.width:
        raise AttncodaError(
            f"the language-model head read hidden states of shape {tuple(hidden.shape)} for "
            f"logits of shape {tuple(logits.shape)}: prune bounds the NLL of a head that maps "
            f"each position's hidden state to its logits"
        )
    # Position t - 1 scores token t.
    logits, hidden = logits[:, :-1], hidden[:, :-1]
    device = logits.device
    ids, mask = ids.to(device), mask.to(device)
    target = ids[:, 1:]
    valid = (mask[:, 1:] * mask[:, :-1]).to(torch.float64)
    norms = rows.norms.to(device)
    vocab = logits.shape[-1]
    whole = vocab - vocab % BLOCK
    # The float32 log-sum-exp's share, whatever the model's dtype (the module docstring).
    lse_rounding = FLOAT32_UNIT_ROUNDOFF * (BLOCK + 1 + math.log(vocab))
    nll, rounding = [], []
    with torch.no_grad():
        size = hidden.detach().to(torch.float64).square().sum(-1)
        h_norm = (size + (1.0 if rows.bias else 0.0)).sqrt()
        for b in range(logits.shape[0]):
            z = logits[b].detach().float()
            top = z.amax(-1, keepdim=True)
            terms = (z - top).exp_()
            blocks = terms[:, :whole].reshape(z.shape[0], -1, BLOCK).sum(-1).double().sum(-1)
            total = blocks + terms[:, whole:].sum(-1).double()
            lse = top[:, 0].double() + total.log()
            z_y = z.gather(-1, target[b][:, None])[:, 0].double()
            p_y = torch.exp(z_y - lse)
            mean_norm = (terms @ norms).double() / total
            norm_y = norms[target[b]].double()
            scale = LAMBDA * math.sqrt(rows.width + 2) * rows.unit
            product = scale * h_norm[b] * (mean_norm + (1 - 2 * p_y) * norm_y)
            token = product + lse_rounding + 8 * rows.unit * rows.cap
            count = valid[b].sum()
            nll.append(float(((lse - z_y) * valid[b]).sum() / count))
            rounding.append(float((token * valid[b]).sum() / count))
    return np.asarray(nll, dtype=np.float64), np.asarray(rounding, dtype=np.float64)
