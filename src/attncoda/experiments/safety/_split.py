r"""The squared Aitchison distance between heads and its sink term, and the two coordinates
of every triplet the safety map bins (docs/design.md, "The mathematics" and "The
experiments").

For heads ``A, B`` over the used rows (every sink key present, ``m >= 2``) ``T(A, B)`` is the
mean of ``d_A(p_A, p_B)^2`` and ``S(A, B)`` the mean of its sink term ``(b_A - b_B)^2``
(``b`` the sink balance), both in nats². A triplet ``(A; B, C)`` has the sink share

.. math:: \sigma(A; B, C) = \frac{S(A, B) + S(A, C)}{T(A, B) + T(A, C)}

and the sink-mass gap ``|s_B - s_C|`` of the two heads being ranked.

Both coordinates carry the rounding of what they are computed from (docs/design.md,
"Verdicts and ratios within rounding"): :func:`triplet_rounding` bounds how far each
triplet's coordinates can move between two runs, from the stated rounding of the recorded
log-probabilities (each ``z``, the output of a float32 row computation over at most ``n``
keys, within ``(n + 2) u |z|``, ``u = 2**-24``, as every row statistic) and of the head
mean sink masses (:func:`~attncoda.experiments.contract.row_statistic_rounding`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    FLOAT32_UNIT_ROUNDOFF,
    HeadRows,
    row_statistic_rounding,
)

__all__ = [
    "SquaredSplit",
    "gap_rounding",
    "mean_squared_split",
    "share_reach",
    "share_rounding",
    "triplet_coordinates",
    "triplet_rounding",
]

BLOCK_ELEMS = 1 << 22  # triplets per block of heads A
#: The float64 unit roundoff: the Gram sums of :func:`mean_squared_split` are float64.
FLOAT64_UNIT_ROUNDOFF = 2.0**-53


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
    keys : int
        ``n``: the most keys a row sees (the windows' padded length). A recorded log
        ``z`` is the output of a float32 row computation over them: it stands for any value
        within ``e = (n + 2) u |z|`` (``u = 2**-24``), the rounding every row statistic
        carries (:func:`~attncoda.experiments.contract.row_statistic_rounding`).
    log_norm : ndarray, shape (head,)
        ``l_A``: the root mean square over the used rows of the norm of each head's
        recorded log-probability row (its present keys), in nats: logs within ``e`` move a
        row's clr by at most ``(n + 2) u`` times that norm.
    balance_norm : ndarray, shape (head,)
        ``beta_A``: the root mean square over the used rows of ``sqrt(k m / (k + m))
        (mean_S |z| + mean_C |z|)``, in nats: the same rounding moves a row's sink balance
        by at most ``(n + 2) u`` times that.
    gram_rounding : ndarray, shape (head,)
        ``g_A``: ``2 u64 sum_d K_d |x_A,d|^2 / n_rows`` (``u64 = 2**-53``, ``K_d`` the length
        of document ``d``'s flattened clr rows, ``x_A,d`` them centred over the heads), in
        nats²: the float64 Gram sums' own rounding of a pair is at most ``g_A + g_B``.
    """

    total: np.ndarray
    sink: np.ndarray
    n_rows: int
    keys: int
    log_norm: np.ndarray
    balance_norm: np.ndarray
    gram_rounding: np.ndarray

    @property
    def sink_share(self) -> float:
        """Share of all pairwise ``d_A^2`` that is the sink term: ``sum S / sum T`` over pairs."""
        total = float(self.total.sum())
        return float(self.sink.sum()) / total if total > 0 else 0.0

    @property
    def total_rounding(self) -> np.ndarray:
        """How far rounding can move each ``T(A, B)``, shape (head, head), in nats²:
        ``2 v sqrt(T) (l_A + l_B) + v^2 (l_A + l_B)^2 + g_A + g_B``, ``v = (n + 2) u``
        (docs/design.md, "Verdicts and ratios within rounding")."""
        return _square_rounding(self.total, self.log_norm, self.gram_rounding, self.keys)

    @property
    def sink_rounding(self) -> np.ndarray:
        """How far rounding can move each ``S(A, B)``, shape (head, head), in nats²:
        ``2 v sqrt(S) (beta_A + beta_B) + v^2 (beta_A + beta_B)^2 + g_A + g_B``, ``v = (n +
        2) u``: a balance is its clr row's coordinate along a unit vector, so the clr rows'
        float64 rounding ``g`` bounds that of the balances' shorter sums too."""
        return _square_rounding(self.sink, self.balance_norm, self.gram_rounding, self.keys)


def _square_rounding(
    mean_sq: np.ndarray, norm: np.ndarray, gram: np.ndarray, keys: int
) -> np.ndarray:
    """``2 v sqrt(M) (r_A + r_B) + v^2 (r_A + r_B)^2 + g_A + g_B``, ``v = (n + 2) u``, for a
    mean of squared differences ``M`` of rows that move by at most ``v r`` each (``r``
    their root mean square norm; Cauchy-Schwarz over the rows: ``mean |x| |dx| <=
    sqrt(mean |x|^2) sqrt(mean |dx|^2)``)."""
    v = (keys + 2) * FLOAT32_UNIT_ROUNDOFF
    pair = norm[:, None] + norm[None, :]
    return 2 * v * np.sqrt(mean_sq) * pair + (v * pair) ** 2 + gram[:, None] + gram[None, :]


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
        ``total`` and ``sink`` of shape (head, head), in nats², and the magnitudes their
        rounding is stated from (:attr:`SquaredSplit.total_rounding`,
        :attr:`SquaredSplit.sink_rounding`).

    Raises
    ------
    AttncodaError
        When a present key has a non-finite log-probability, or no row has content.
    """
    n = head_rows.n_layers * head_rows.n_heads
    total = np.zeros((n, n))
    sink = np.zeros((n, n))
    log_sq, balance_sq, gram = np.zeros(n), np.zeros(n), np.zeros(n)
    n_rows = keys = 0
    for i, doc in enumerate(head_rows.docs):
        mask, is_sink, used = doc.split_rows()
        k = len(doc.sink)
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
        weight = np.sqrt(k * m / (k + m))
        balance = weight * (mean_s - mean_c)  # (head, row)
        pairs, centred = _gram_sq_sums(clr.reshape(n, -1))
        total += pairs
        sink += _gram_sq_sums(balance)[0]
        # The magnitudes of the rounding: each float32 log within u |z|.
        size = np.abs(z)
        size_s = size[:, :, is_sink].sum(axis=2)
        size_c = size.sum(axis=2) - size_s
        log_sq += np.einsum("hrk,hrk->h", z, z)
        balance_sq += np.square(weight * (size_s / k + size_c / m)).sum(axis=1)
        gram += 2 * FLOAT64_UNIT_ROUNDOFF * clr[0].size * centred
        n_rows += int(used.sum())
        keys = max(keys, mask.shape[1])
    if n_rows == 0:
        raise AttncodaError(
            f"model {head_rows.model!r} has no recorded row with every sink key present and "
            "at least 2 content keys: head distances are means over such rows"
        )
    return SquaredSplit(
        total=total / n_rows,
        sink=sink / n_rows,
        n_rows=n_rows,
        keys=keys,
        log_norm=np.sqrt(log_sq / n_rows),
        balance_norm=np.sqrt(balance_sq / n_rows),
        gram_rounding=gram / n_rows,
    )


def _gram_sq_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sum ||x_a - x_b||^2`` over the last axis for every pair, via one Gram matrix; and
    each row's squared norm once centred over the rows (the scale of the Gram sums' float64
    rounding)."""
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
    return out + out.T, sq


def _pair_sums(rows: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``rows[:, b] + rows[:, c]`` (np.take gathers several times faster than fancy
    indexing; the same sums)."""
    out = np.take(rows, b, axis=1)
    out += np.take(rows, c, axis=1)
    return out


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
    share = np.zeros((n, len(b)))
    step = max(1, BLOCK_ELEMS // max(1, len(b)))
    for a0 in range(0, n, step):
        a = slice(a0, a0 + step)
        num = _pair_sums(squares.sink[a], b, c)
        den = _pair_sums(squares.total[a], b, c)
        np.divide(num, den, out=share[a], where=den > 0)
        np.clip(share[a], 0.0, 1.0, out=share[a])
    heads = np.arange(n)[:, None]
    valid = (heads != b[None, :]) & (heads != c[None, :])
    gap = np.abs(sink_mass[b] - sink_mass[c])
    return share, gap, valid, np.stack([b, c])


def triplet_rounding(
    squares: SquaredSplit, share: np.ndarray, sink_mass: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""How far rounding can move each triplet's sink share and sink-mass gap.

    The share :math:`\sigma = N / D`, ``N = S(A, B) + S(A, C)`` and ``D = T(A, B) + T(A, C)``,
    moves by at most

    .. math:: e_\sigma = \frac{e_N + \sigma e_D}{D - e_D}

    with ``e_N``, ``e_D`` the sums of :attr:`SquaredSplit.sink_rounding` and
    :attr:`SquaredSplit.total_rounding` (1, anything in ``[0, 1]``, where ``D <= e_D``; 0
    where ``D = 0``: three heads of identical rows, whose share is 0 by definition). The gap
    ``|s_B - s_C|`` moves by at most the sum of the two head means' rounding,
    :func:`~attncoda.experiments.contract.row_statistic_rounding` ``(n, s)`` each: a mean of
    float32 row sink masses over at most ``n`` keys (:attr:`SquaredSplit.keys`).
    :func:`share_rounding` gives ``e_sigma`` of some triplets only, :func:`share_reach` a
    bound of every one.

    Parameters
    ----------
    squares : SquaredSplit
        From :func:`mean_squared_split`.
    share : ndarray, shape (head, pair)
        The shares :func:`triplet_coordinates` gives (pairs in ``numpy.triu_indices``
        order).
    sink_mass : ndarray, shape (head,)
        Mean sink mass of each head, over rows of at most ``squares.keys`` keys.

    Returns
    -------
    share_rounding : ndarray, shape (head, pair)
        Non-negative, at most 1 (a share's units).
    gap_rounding : ndarray, shape (pair,)
        Non-negative (a sink mass's units).
    """
    at = np.arange(share.size)
    return share_rounding(squares, share, at).reshape(share.shape), gap_rounding(squares, sink_mass)


def share_rounding(squares: SquaredSplit, share: np.ndarray, at: np.ndarray) -> np.ndarray:
    """:func:`triplet_rounding`'s ``e_sigma`` of the triplets at flat positions ``at`` of
    ``share`` (shape (head, pair)), in blocks."""
    n = squares.total.shape[0]
    b, c = np.triu_indices(n, 1)
    e_total, e_sink = squares.total_rounding, squares.sink_rounding
    at = np.asarray(at, dtype=np.int64)
    out = np.empty(at.shape)
    flat = np.ravel(share)
    for s0 in range(0, at.size, BLOCK_ELEMS):
        a, p = np.divmod(at[s0 : s0 + BLOCK_ELEMS], len(b))
        pb, pc = b[p], c[p]
        den = squares.total[a, pb] + squares.total[a, pc]
        e_den = e_total[a, pb] + e_total[a, pc]
        moved = flat[at[s0 : s0 + BLOCK_ELEMS]] * e_den + e_sink[a, pb] + e_sink[a, pc]
        room = den - e_den
        np.divide(moved, room, out=moved, where=room > 0)
        # Within rounding of D = 0 the share may be anything in [0, 1]; at D = 0 exactly,
        # three heads of identical rows, it is 0 by definition on any run.
        moved[room <= 0] = 1.0
        moved[den == 0] = 0.0
        out[s0 : s0 + BLOCK_ELEMS] = np.minimum(moved, 1.0)
    return out


def share_reach(squares: SquaredSplit, largest: float) -> float:
    """A bound of every triplet's :func:`share_rounding`, from the head pairs alone.

    With ``r_AB = e_S(A, B) / (T(A, B) - e_T(A, B))`` and ``q_AB = e_T(A, B) / (T(A, B) -
    e_T(A, B))``, the mediant inequality (``(x + y) / (z + w) <= max(x / z, y / w)``) gives
    ``e_sigma <= max r + sigma max q``; ``sigma`` is at most ``largest``, the largest share
    counted. 1 where a pair's ``T`` lies within its rounding.
    """
    e_total = squares.total_rounding
    room = squares.total - e_total
    off = ~np.eye(len(room), dtype=bool)
    if not (room[off] > 0).all():
        return 1.0
    r = float((squares.sink_rounding[off] / room[off]).max(initial=0.0))
    q = float((e_total[off] / room[off]).max(initial=0.0))
    return min(1.0, r + largest * q)


def gap_rounding(squares: SquaredSplit, sink_mass: np.ndarray) -> np.ndarray:
    """:func:`triplet_rounding`'s rounding of each pair's sink-mass gap, shape (pair,)."""
    n = len(sink_mass)
    b, c = np.triu_indices(n, 1)
    mass = np.array([row_statistic_rounding(squares.keys, float(s)) for s in sink_mass])
    return mass[b] + mass[c]
