r"""The squared Aitchison distance between heads and its sink term, and the two coordinates
of every triplet the safety map bins (docs/design.md, "The mathematics" and "The
experiments").

For heads ``A, B`` over the used rows (every sink key present, ``m >= 2``) ``T(A, B)`` is the
mean of ``d_A(p_A, p_B)^2`` and ``S(A, B)`` the mean of its sink term ``(b_A - b_B)^2``
(``b`` the sink balance), both in nats². A triplet ``(A; B, C)`` has the sink share

.. math:: \sigma(A; B, C) = \frac{S(A, B) + S(A, C)}{T(A, B) + T(A, C)}

and the sink-mass gap ``|s_B - s_C|`` of the two heads being ranked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import HeadRows

__all__ = ["SquaredSplit", "mean_squared_split", "triplet_coordinates"]

BLOCK_ELEMS = 1 << 22  # triplets per block of heads A


@dataclass(frozen=True)
class SquaredSplit:
    """Head-by-head means of squared Aitchison distances and of their sink term.

    Attributes
    ----------
    total : ndarray, shape (head, head)
        ``T(A, B)``: mean over used rows (every sink key present, ``m >= 2``) of
        ``d_A(p_A, p_B)^2``, in nats².
    sink : ndarray, shape (head, head)
        ``S(A, B)``: mean over the same rows of ``(b_A - b_B)^2``, in nats²;
        ``0 <= S <= T``.
    n_rows : int
        The used rows (per head).
    """

    total: np.ndarray
    sink: np.ndarray
    n_rows: int

    @property
    def sink_share(self) -> float:
        """Share of all pairwise ``d_A^2`` that is the sink term: ``sum S / sum T`` over pairs."""
        total = float(self.total.sum())
        return float(self.sink.sum()) / total if total > 0 else 0.0


def mean_squared_split(head_rows: HeadRows) -> SquaredSplit:
    r"""Means over rows of ``d_A^2`` and of its sink term for every pair of heads.

    The Aitchison distance splits as ``d_A^2 = (b - b')^2 + d_A(p_S, p'_S)^2 + d_A(q, q')^2``
    (docs/design.md, "The mathematics"). This averages ``d_A^2`` and ``(b - b')^2`` (not the
    distances) over the rows :func:`attncoda.head_distances` uses — every sink key present, at least
    two content keys — pooled over documents. Per document both are Gram matrices of the flattened
    clr rows and of the sink balances: ``sum_r ||x_a - x_b||^2 = |x_a|^2 + |x_b|^2 - 2 x_a.x_b``.

    Parameters
    ----------
    head_rows : HeadRows
        Recorded log-probability rows (log-probabilities or logits: both terms are
        shift-invariant).

    Returns
    -------
    SquaredSplit
        ``total`` and ``sink`` of shape (head, head), in nats².

    Raises
    ------
    AttncodaError
        When a present key has a non-finite log-probability, or no row has content.
    """
    n = head_rows.n_layers * head_rows.n_heads
    total = np.zeros((n, n))
    sink = np.zeros((n, n))
    n_rows = 0
    for i, doc in enumerate(head_rows.docs):
        mask = np.asarray(doc.key_mask, dtype=bool)
        is_sink = np.zeros(mask.shape[1], dtype=bool)
        is_sink[list(doc.sink)] = True
        k = len(doc.sink)
        used = mask[:, is_sink].all(axis=1) & (mask.sum(axis=1) - k >= 2)
        if not used.any():
            continue
        mask = mask[used]
        z = np.asarray(doc.logp, dtype=np.float64)[:, used, :]
        bad = mask[None] & ~np.isfinite(z)
        if bad.any():
            raise AttncodaError(
                f"document {i} of {head_rows.model!r} has a non-finite log-probability at "
                f"(head, row, key) {tuple(int(j) for j in np.argwhere(bad)[0])} of a used "
                "row: the Aitchison split needs every present key to have positive mass"
            )
        z = np.where(mask[None], z, 0.0)
        content = mask & ~is_sink
        n_keys, m = mask.sum(axis=1), content.sum(axis=1)
        clr = np.where(mask[None], z - (z.sum(axis=2) / n_keys)[..., None], 0.0)
        mean_s = (z * is_sink).sum(axis=2) / k
        mean_c = (z * content).sum(axis=2) / m
        balance = np.sqrt(k * m / (k + m)) * (mean_s - mean_c)  # (head, row)
        total += _gram_sq_sums(clr.reshape(n, -1))
        sink += _gram_sq_sums(balance)
        n_rows += int(used.sum())
    if n_rows == 0:
        raise AttncodaError(
            f"model {head_rows.model!r} has no recorded row with every sink key present and "
            "at least 2 content keys: head distances are means over such rows"
        )
    return SquaredSplit(total=total / n_rows, sink=sink / n_rows, n_rows=n_rows)


def _gram_sq_sums(x: np.ndarray) -> np.ndarray:
    """``sum ||x_a - x_b||^2`` over the last axis for every pair, via one Gram matrix."""
    x = x - x.mean(axis=0)  # distances are translation-invariant; this limits cancellation
    sq = np.einsum("ij,ij->i", x, x)
    scale = sq[:, None] + sq[None, :]
    out = np.clip(scale - 2 * (x @ x.T), 0.0, None)
    # The Gram difference cancels for nearly equal heads: recompute those pairs directly.
    a, b = np.nonzero(np.triu(out <= 1e-6 * scale, 1))
    step = max(1, BLOCK_ELEMS // max(1, x.shape[1]))
    for k in range(0, len(a), step):
        diff = x[a[k : k + step]] - x[b[k : k + step]]
        out[a[k : k + step], b[k : k + step]] = np.einsum("ij,ij->i", diff, diff)
    out = np.triu(out, 1)
    return out + out.T


def triplet_coordinates(
    squares: SquaredSplit, sink_mass: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sink share and sink-mass gap of every triplet.

    Parameters
    ----------
    squares : SquaredSplit
        From :func:`mean_squared_split`.
    sink_mass : ndarray, shape (head,)
        Mean sink mass of each head.

    Returns
    -------
    share : ndarray, shape (head, pair)
        ``sigma(A; B, C)`` for head ``A`` (row) and pair ``(B, C) = (b[j], c[j])``;
        entries with ``A`` in the pair are meaningless and masked by ``valid``.
    gap : ndarray, shape (pair,)
        ``|s_B - s_C|``.
    valid : ndarray of bool, shape (head, pair)
        ``A`` not in ``{B, C}``.
    pairs : ndarray of int, shape (2, pair)
        ``b < c``, the pairs in ``numpy.triu_indices`` order.
    """
    n = squares.total.shape[0]
    b, c = np.triu_indices(n, 1)
    share = np.empty((n, len(b)))
    step = max(1, BLOCK_ELEMS // max(1, len(b)))
    for a0 in range(0, n, step):
        a = slice(a0, a0 + step)
        num = squares.sink[a][:, b] + squares.sink[a][:, c]
        den = squares.total[a][:, b] + squares.total[a][:, c]
        ratio = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
        share[a] = np.clip(ratio, 0.0, 1.0)
    heads = np.arange(n)[:, None]
    valid = (heads != b[None, :]) & (heads != c[None, :])
    gap = np.abs(sink_mass[b] - sink_mass[c])
    return share, gap, valid, np.stack([b, c])
