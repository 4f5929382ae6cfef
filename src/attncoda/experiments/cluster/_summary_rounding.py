r"""How far rounding can move the clustering's summaries (docs/design.md, "Verdicts and
ratios within rounding"), from how far it moves the points and labels
(:mod:`attncoda.experiments.cluster._point_rounding`):

- :func:`rank_rounding` and :func:`direction_rounding`: how far a Spearman rho, or the
  largest ``|rho|`` over directions, can move when the heads whose values lie within
  rounding of each other swap ranks;
- :func:`ari_rounding`: how far the adjusted Rand index of two labellings can move when their
  edge heads take their second-nearest cluster;
- :func:`share_rounding`: how far the mean sink share of ``d_A^2`` can move.
"""

from __future__ import annotations

from itertools import product

import numpy as np

from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF

__all__ = [
    "ENUMERATED_EDGES",
    "adjusted_rand",
    "ari_rounding",
    "direction_rounding",
    "rank_rounding",
    "share_rounding",
]

#: Up to this many edge heads in two labellings together, :func:`ari_rounding` tries every
#: way they can fall (2**8 = 256 indices); beyond it, it bounds the pair counts instead.
ENUMERATED_EDGES = 8


def _ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=0)


def _near(x: np.ndarray, moves: np.ndarray) -> np.ndarray:
    """Which pairs ``k != l`` have values within their moves of each other, (head, head)."""
    near = np.abs(x[:, None] - x[None, :]) <= moves[:, None] + moves[None, :]
    np.fill_diagonal(near, False)
    return near


def _rho_change(rx: np.ndarray, ry: np.ndarray, fx: np.ndarray, fy: np.ndarray) -> np.ndarray:
    """Bound on the change of Spearman's rho when head ``k``'s ranks move by at most ``fx_k``
    and ``fy_k``: ``12 sum (|ry - c| fx + |rx - c| fy + fx fy) / (n (n^2 - 1))``, summed over
    the first axis (broadcasts over the others)."""
    n = rx.shape[0]
    centre = (n + 1) / 2
    total = (np.abs(ry - centre) * fx + np.abs(rx - centre) * fy + fx * fy).sum(axis=0)
    return 12.0 * total / (n * (n * n - 1.0))


def rank_rounding(
    x: np.ndarray, x_moves: np.ndarray, y: np.ndarray, y_moves: np.ndarray
) -> tuple[int, float]:
    r"""The pairs of heads whose order in ``x`` or in ``y`` rounding can swap, and how far
    that can move Spearman's rho of ``x`` with ``y``.

    Rho is ``1 - 6 sum (rx - ry)^2 / (n (n^2 - 1))`` over the ranks; with the sums of
    squared ranks fixed, it moves by ``12 delta sum(rx ry) / (n (n^2 - 1))``. A head
    ``k`` in ``fx_k`` near-tied pairs of ``x`` (values within their moves of each other)
    changes its rank by at most ``fx_k``, and since ranks sum to a constant,
    ``|delta sum(rx ry)| <= sum_k (|ry_k - c| fx_k + |rx_k - c| fy_k + fx_k fy_k)``,
    ``c = (n + 1) / 2``.

    Parameters
    ----------
    x, y : ndarray, shape (head,)
    x_moves, y_moves : ndarray, shape (head,)
        How far rounding can move each value.

    Returns
    -------
    n_near : int
        Pairs near-tied in ``x`` or in ``y``.
    bound : float
        Bound on the change of rho.
    """
    near_x, near_y = _near(x, x_moves), _near(y, y_moves)
    n_near = int(np.triu(near_x | near_y, 1).sum())
    bound = _rho_change(
        _ranks(x), _ranks(y), near_x.sum(axis=1).astype(float), near_y.sum(axis=1).astype(float)
    )
    return n_near, float(bound)


def _pearson(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Pearson's correlation of ranks ``rx`` (head, direction) with ``ry`` (head,) per
    direction (the Spearman rho of :func:`attncoda.experiments.cluster._embedding.
    best_direction`), NaN where a projection is constant."""
    cx = rx - rx.mean(axis=0)
    cy = ry - ry.mean()
    norms = np.sqrt((cx**2).sum(axis=0) * (cy**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return (cx * cy[:, None]).sum(axis=0) / norms


def _near_counts(x: np.ndarray, moves: np.ndarray) -> np.ndarray:
    """Per head ``k``, how many others ``l`` have ``|x_k - x_l| <= moves_k + moves_l`` (the
    row sums of :func:`_near`), by sorting: only the heads within ``moves_k`` plus the
    largest move of ``x_k`` are checked."""
    n = len(x)
    order = np.argsort(x, kind="stable")
    xs, ms = x[order], moves[order]
    reach = ms + ms.max(initial=0.0)
    lo = np.searchsorted(xs, xs - reach, side="left")
    hi = np.searchsorted(xs, xs + reach, side="right")
    counts = hi - lo
    first = np.repeat(np.arange(n), counts)
    second = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    near = (np.abs(xs[first] - xs[second]) <= ms[first] + ms[second]) & (first != second)
    found = np.empty(n)
    found[order] = np.bincount(first[near], minlength=n)
    return found


def direction_rounding(
    xy: np.ndarray,
    point: np.ndarray,
    angle: float,
    y: np.ndarray,
    y_moves: np.ndarray,
    directions: int,
) -> float:
    """How far the largest ``|rho|`` of ``y`` with a projection of ``xy`` over ``directions``
    evenly spaced directions of ``[0, pi)`` can move.

    Each projection moves by its point's move plus its distance from the centre times the
    axes' turn ``angle`` (the directions are read in the axes' frame), and each direction's
    rho by its :func:`rank_rounding` bound ``b``. The maximum ``M`` falls by at most the
    bound of the direction that attains it, and rises only through a direction with
    ``|rho| + b >= M``: the largest ``b`` over those.
    """
    angles = np.linspace(0.0, np.pi, directions, endpoint=False)
    proj = xy @ np.stack([np.cos(angles), np.sin(angles)])  # (head, direction)
    rx, ry = _ranks(proj), _ranks(y)
    rho = np.abs(_pearson(rx, ry))
    if not np.isfinite(rho).any():
        return 0.0
    moves = point + np.sqrt((xy**2).sum(axis=-1)) * angle
    fx = np.stack([_near_counts(proj[:, j], moves) for j in range(directions)], axis=1)
    fy = _near(y, y_moves).sum(axis=1).astype(float)
    bounds = _rho_change(rx, ry[:, None], fx, fy[:, None])
    reach = np.nan_to_num(rho, nan=-np.inf) + bounds >= float(np.nanmax(rho))
    return float(bounds[reach].max(initial=0.0))


def adjusted_rand(a: np.ndarray, b: np.ndarray) -> float:
    """scikit-learn's adjusted Rand index of two labellings."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(a, b))


def _pair_sums(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """``sum_ij C(n_ij, 2)``, ``sum_i C(a_i, 2)``, ``sum_j C(b_j, 2)`` of the contingency."""
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    table = np.zeros((ia.max() + 1, ib.max() + 1))
    np.add.at(table, (ia, ib), 1.0)

    def pairs(x: np.ndarray) -> float:
        return float((x * (x - 1) / 2).sum())

    return pairs(table), pairs(table.sum(axis=1)), pairs(table.sum(axis=0))


def ari_rounding(
    a: np.ndarray,
    a_edge: np.ndarray,
    a_alternative: np.ndarray,
    b: np.ndarray,
    b_edge: np.ndarray,
    b_alternative: np.ndarray,
) -> float:
    r"""How far the adjusted Rand index of labellings ``a`` and ``b`` can move when each edge
    head (``a_edge``, ``b_edge``) may take its alternative label instead.

    With at most :data:`ENUMERATED_EDGES` edge heads in the two together, every way they can
    fall is tried. Beyond, the index ``(S - AB/P) / ((A + B)/2 - AB/P)`` (``S`` the pairs in
    the same cluster under both, ``A``, ``B`` under each, ``P`` all pairs) is bounded over
    the box each sum can reach: one head's move changes ``S`` and its own side's sum by at
    most ``n - 1`` pairs. A box whose denominator can reach 0 allows the index's whole range.

    Returns
    -------
    float
        Non-negative; 0 with no edge head.
    """
    ea, eb = np.flatnonzero(a_edge), np.flatnonzero(b_edge)
    if ea.size + eb.size == 0:
        return 0.0
    base = adjusted_rand(a, b)
    if ea.size + eb.size <= ENUMERATED_EDGES:
        worst = 0.0
        for choice in product((False, True), repeat=ea.size + eb.size):
            moved_a, moved_b = a.copy(), b.copy()
            pick = np.asarray(choice)
            moved_a[ea[pick[: ea.size]]] = a_alternative[ea[pick[: ea.size]]]
            moved_b[eb[pick[ea.size :]]] = b_alternative[eb[pick[ea.size :]]]
            worst = max(worst, abs(adjusted_rand(moved_a, moved_b) - base))
        return worst
    n = len(a)
    s, sa, sb = _pair_sums(a, b)
    total = n * (n - 1) / 2
    step = n - 1.0
    s_box = (s - (ea.size + eb.size) * step, s + (ea.size + eb.size) * step)
    a_box = (max(sa - ea.size * step, 0.0), sa + ea.size * step)
    b_box = (max(sb - eb.size * step, 0.0), sb + eb.size * step)
    products = [x * y / total for x in a_box for y in b_box]
    num = (s_box[0] - max(products), s_box[1] - min(products))
    den = ((a_box[0] + b_box[0]) / 2 - max(products), (a_box[1] + b_box[1]) / 2 - min(products))
    if den[0] <= 0:
        return 2.0  # the index lies in [-1, 1]: anything
    ends = [x / y for x in num for y in den]
    return max(abs(min(ends) - base), abs(max(ends) - base))


def share_rounding(
    sink_sq: np.ndarray, total_sq: np.ndarray, beta_sq: np.ndarray, logs_sq: np.ndarray
) -> float:
    r"""How far the mean over head pairs of ``S_AB / T_AB`` can move, ``S`` the summed
    squared sink term and ``T`` the summed squared Aitchison distance of a pair.

    ``S = sum_r (b_A - b_B)^2`` moves by at most ``2 u sum_r |b_A - b_B| (beta_A + beta_B)
    <= 2 u sqrt(S) (|beta_A| + |beta_B|)`` (Cauchy-Schwarz over the rows; ``|beta|^2`` the
    head's ``sink_sq`` rounding sum), and ``T`` alike with the logs' norms
    (``total_sq``); the ratio by ``(dS + share dT) / T``, and the mean by the mean of those,
    over the pairs with ``T > 0`` (the pairs the share averages).

    Parameters
    ----------
    sink_sq, total_sq : ndarray, shape (head, head)
        ``S`` and ``T`` of every pair (nats squared).
    beta_sq, logs_sq : ndarray, shape (head,)
        The rounding sums ``sink_sq`` and ``total_sq`` of
        :func:`attncoda.experiments.cluster.rounding_sums`.

    Returns
    -------
    float
        The bound (a share), 0 where no pair has ``T > 0``.
    """
    upper = np.triu_indices(len(beta_sq), k=1)
    s, t = sink_sq[upper], total_sq[upper]
    pos = t > 0
    if not pos.any():
        return 0.0
    beta, logs = np.sqrt(beta_sq), np.sqrt(logs_sq)
    ds = 2 * FLOAT32_UNIT_ROUNDOFF * np.sqrt(s) * (beta[upper[0]] + beta[upper[1]])
    dt = 2 * FLOAT32_UNIT_ROUNDOFF * np.sqrt(t) * (logs[upper[0]] + logs[upper[1]])
    share = s[pos] / t[pos]
    return float(((ds[pos] + share * dt[pos]) / t[pos]).mean())
