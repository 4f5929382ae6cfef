r"""How far rounding can move each result of the clustering pipeline (docs/design.md,
"Verdicts and ratios within rounding").

The summed distances carry the float32 rounding of the logs they are made of
(:func:`attncoda.experiments.cluster.rounding_sums`): each variant's distance of heads
``A``, ``B`` moves by at most ``e(A, B) = u (r_A + r_B)`` (:func:`distance_rounding`). The
results made from them state what that allows:

- :func:`embedding_rounding`: how far the MDS points, and the distances between them, are
  stated to move: the distances' rounding plus the move of one more SMACOF iteration (what
  the fit's stopping rule leaves undecided); the fit's first-order worst-case response
  (:func:`worst_response`) is recorded beside it, far above every measured move;
- :func:`label_edges`: the heads within that of equidistant from their two nearest k-means
  centres, whose label may differ;
- :func:`rank_rounding` and :func:`direction_rounding`: how far a Spearman rho, or the
  largest ``|rho|`` over directions, can move when the heads whose values lie within
  rounding of each other swap ranks;
- :func:`ari_rounding`: how far the adjusted Rand index of two labellings can move when their
  edge heads take their second-nearest cluster;
- :func:`share_rounding`: how far the mean sink share of ``d_A^2`` can move.

Every bound is first order in the logs' rounding (``(n + 2) u |z|``, ``u = 2**-24``), the
size at which two CPUs' logs differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np

from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF

__all__ = [
    "ENUMERATED_EDGES",
    "EmbeddingRounding",
    "adjusted_rand",
    "ari_rounding",
    "axis_rounding",
    "direction_rounding",
    "distance_rounding",
    "embedding_rounding",
    "label_edges",
    "rank_rounding",
    "share_rounding",
    "worst_response",
]

#: Up to this many edge heads in two labellings together, :func:`ari_rounding` tries every
#: way they can fall (2**8 = 256 indices); beyond it, it bounds the pair counts instead.
ENUMERATED_EDGES = 8


def distance_rounding(sums: np.ndarray) -> np.ndarray:
    """``u (r_A + r_B)``: the rounding bound of every summed distance, shape (head, head)
    with a zero diagonal, from each head's rounding sum ``r`` (head,) of
    :func:`attncoda.experiments.cluster.rounding_sums` (summed over documents), nats."""
    r = np.asarray(sums, dtype=np.float64)
    e = FLOAT32_UNIT_ROUNDOFF * (r[:, None] + r[None, :])
    np.fill_diagonal(e, 0.0)
    return e


@dataclass(frozen=True)
class EmbeddingRounding:
    """How far an MDS embedding can move under its distances' rounding.

    Attributes
    ----------
    pair : ndarray, shape (head, head)
        The stated move of the distance between two points (nats), zero diagonal: the
        rounding of the distance they were fitted to plus one more SMACOF iteration's move.
    point : ndarray, shape (head,)
        The stated move of each point (nats): its largest distance rounding plus its own
        move in one more SMACOF iteration.
    worst : float
        The largest first-order worst case of the fit's response to the distances'
        rounding (nats), for the record: far above every measured move, so not held.
    step : float
        The largest pair move of one more SMACOF iteration (nats).
    """

    pair: np.ndarray
    point: np.ndarray
    worst: float
    step: float


def _unit_vectors(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distances between the points (head, head), ones on the diagonal, and the unit vectors
    ``(x_i - x_j) / d_ij`` (head, head, 2), zero where two points coincide."""
    r = xy[:, None, :] - xy[None, :, :]
    d = np.sqrt((r**2).sum(axis=-1))
    safe = np.where(d > 0, d, 1.0)
    return safe, np.where((d > 0)[..., None], r / safe[..., None], 0.0)


def _stress_hessian(xy: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Hessian of the raw stress ``sum_{i<j} (|x_i - x_j| - d_ij)^2`` at ``xy``, shape
    (2 head, 2 head), the coordinates of a point adjacent."""
    n = len(xy)
    dist, u = _unit_vectors(xy)
    ratio = 1.0 - d / dist
    np.fill_diagonal(ratio, 0.0)
    # The pair block 2 [uu' + (|x_i - x_j| - d_ij) / |x_i - x_j| (I - uu')].
    blocks = (1.0 - ratio)[..., None, None] * (u[..., :, None] * u[..., None, :])
    blocks[..., 0, 0] += ratio
    blocks[..., 1, 1] += ratio
    blocks *= 2.0
    hessian = -blocks.transpose(0, 2, 1, 3).reshape(2 * n, 2 * n)
    on_diagonal = hessian.reshape(n, 2, n, 2)
    idx = np.arange(n)
    on_diagonal[idx, :, idx, :] += blocks.sum(axis=1)
    return hessian


def _guttman_step(xy: np.ndarray, d: np.ndarray) -> np.ndarray:
    """What one more SMACOF iteration (the Guttman transform) moves each point by, (head, 2);
    ``xy`` is centred."""
    n = len(xy)
    dist, u = _unit_vectors(xy)
    gap = d - dist
    np.fill_diagonal(gap, 0.0)
    return (gap[..., None] * u).sum(axis=1) / n


def _largest_eigenvalue(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The larger eigenvalue of each symmetric 2x2 matrix ``[[a, b], [b, c]]``, at least 0."""
    return np.maximum((a + c) / 2 + np.sqrt(((a - c) / 2) ** 2 + b**2), 0.0)


def worst_response(xy: np.ndarray, d: np.ndarray, e: np.ndarray, n_iter: int) -> float:
    r"""The first-order worst case of how far the distance between two points of an MDS fit
    can move when each fitted distance ``d_ij`` moves by up to ``e_ij``.

    SMACOF's Guttman transform is a gradient step on the stress
    ``sigma(X) = sum_{i<j} (|x_i - x_j| - d_ij)^2``,
    ``X' = X - grad sigma(X) / (2N)``, so a change ``Delta`` of the distances moves the
    iterate after ``t`` steps, to first order, by

    .. math:: \delta X = \sum_m f_m v_m v_m^\top w, \quad
              f_m = \tfrac{2}{\lambda_m}\bigl(1 - (1 - \tfrac{\lambda_m}{2N})^t\bigr),
              \quad w_i = \sum_j \Delta_{ij} u_{ij},

    ``(lambda_m, v_m)`` the eigenpairs of the stress's Hessian at ``xy`` off its three gauge
    directions (two translations and a rotation, which move no distance), ``u_ij`` the unit
    vector from point ``j`` to ``i``: ``f_m`` is ``2 / lambda_m`` for a converged mode and
    ``t / N`` for a flat one. With ``|w_i| <= sum_j e_ij`` and Cauchy-Schwarz over the
    modes, the distance between points ``k`` and ``l`` moves by at most
    ``|w| sqrt(lambda_max(C C'))``, ``C = (f_m (v_{m,k} - v_{m,l}))_m``.

    That worst case aligns every distance's rounding with the fit's softest modes; on the
    demo's models it is 10 to 400 times the largest distance rounding, and the moves
    measured between two CPU code paths are a thousandth of it or less (docs/design.md,
    "Verdicts and ratios within rounding"). It is recorded, not held.

    Returns
    -------
    float
        The largest pair bound (nats).
    """
    from threadpoolctl import threadpool_limits

    n = len(xy)
    # Matrices of a few hundred rows: more BLAS threads only contend.
    with threadpool_limits(limits=1, user_api="blas"):
        hessian = _stress_hessian(xy, d)
        gauge = np.zeros((2 * n, 3))
        gauge[0::2, 0] = 1.0
        gauge[1::2, 1] = 1.0
        gauge[0::2, 2] = -xy[:, 1]
        gauge[1::2, 2] = xy[:, 0]
        # An orthonormal basis of the directions that move distances: the gauge's complement.
        basis = np.linalg.qr(gauge, mode="complete")[0][:, 3:]
        lam, w = np.linalg.eigh(basis.T @ hessian @ basis)
        modes = basis @ w
        lam = np.minimum(lam, 2.0 * n * (1.0 - 1e-12))
        flat = np.abs(lam) < 1e-12 * n
        grown = -np.expm1(n_iter * np.log1p(-lam / (2.0 * n)))
        f = np.where(flat, n_iter / n, 2.0 * grown / np.where(flat, 1.0, lam))
        k = ((modes * f**2) @ modes.T).reshape(n, 2, n, 2)
    force = float(np.sqrt((e.sum(axis=1) ** 2).sum()))
    own = k[np.arange(n), :, np.arange(n), :]  # (head, 2, 2)
    a = own[:, None, 0, 0] + own[None, :, 0, 0] - 2 * k[:, 0, :, 0]
    b = own[:, None, 0, 1] + own[None, :, 0, 1] - k[:, 0, :, 1] - k[:, 1, :, 0].T
    c = own[:, None, 1, 1] + own[None, :, 1, 1] - 2 * k[:, 1, :, 1]
    return force * float(np.sqrt(_largest_eigenvalue(a, b, c)).max(initial=0.0))


def embedding_rounding(
    xy: np.ndarray, d: np.ndarray, e: np.ndarray, n_iter: int
) -> EmbeddingRounding:
    """How far an MDS embedding ``xy`` of ``d`` is stated to move when each ``d_ij`` moves by
    up to ``e_ij`` (docs/design.md, "Verdicts and ratios within rounding").

    No honest derivation bounds the fitted configuration's response usefully
    (:func:`worst_response`, recorded beside it). What is stated is the distances' own
    rounding, ``e_kl``, plus what the fit's stopping rule leaves undecided: two runs follow
    the same SMACOF iterations from the same random start, but a relative stress decrease
    within rounding of its tolerance (``eps``) stops one run an iteration after the other,
    and a fit stopped at ``max_iter`` is still moving; so one more Guttman transform's move is
    added, to each pair's distance and to each point.

    Parameters
    ----------
    xy : ndarray, shape (head, 2)
        The embedding, centred (rotated or not: every bound is invariant).
    d : ndarray, shape (head, head)
        The distances it was fitted to (nats).
    e : ndarray, shape (head, head)
        Their rounding bounds (:func:`distance_rounding`).
    n_iter : int
        SMACOF iterations of the kept start.

    Returns
    -------
    EmbeddingRounding
    """
    step = _guttman_step(xy, d)
    step_pair = np.sqrt(((step[:, None, :] - step[None, :, :]) ** 2).sum(axis=-1))
    return EmbeddingRounding(
        pair=e + step_pair,
        point=e.max(axis=1, initial=0.0) + np.sqrt((step**2).sum(axis=-1)),
        worst=worst_response(xy, d, e, n_iter),
        step=float(step_pair.max(initial=0.0)),
    )


def axis_rounding(xy: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, float]:
    r"""How far each head's coordinate on the first principal axis, and the axes' angle, can
    move when each point moves by up to ``point``.

    ``xy`` is centred and on its principal axes, so ``C = X'X / N`` is diagonal with
    ``lambda_1 = mean x^2 >= lambda_2 = mean y^2``. A move ``delta X`` turns the axes by at
    most ``|delta C| / (lambda_1 - lambda_2)`` (first order), ``|delta C| <=
    (2/N) sum_k |x_k| point_k``, which moves ``x_k`` by ``|y_k|`` times the angle on top of
    the point's own move; at no gap between the axes the angle is anything (pi).

    Returns
    -------
    moves : ndarray, shape (head,)
        Bound on the move of each head's axis-1 coordinate (nats).
    angle : float
        Bound on the turn of the axes (radians, at most pi).
    """
    n = len(xy)
    gap = float((xy[:, 0] ** 2).mean() - (xy[:, 1] ** 2).mean())
    radius = np.sqrt((xy**2).sum(axis=-1))
    # A point at the centre turns nothing, however far it may move (a degenerate variant).
    turn = 2.0 / n * float(np.multiply(radius, point, out=np.zeros(n), where=radius > 0).sum())
    angle = math.pi if not gap > turn else min(math.pi, turn / gap)
    return point + np.abs(xy[:, 1]) * angle, angle


def label_edges(
    xy: np.ndarray, labels: np.ndarray, centres: np.ndarray, point: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The heads whose k-means label may differ under rounding, and the label each would take.

    A head at ``x`` labelled by its nearest centre ``c_1`` keeps it while
    ``|x - c_2| - |x - c_1| > 0`` for the next nearest ``c_2``. Its point moves by at most
    ``point``, and a centre, the mean of its cluster's points, by at most their mean bound,
    so that margin moves by at most ``2 point + move(c_1) + move(c_2)``: a head within it is
    on the edge.

    Parameters
    ----------
    xy : ndarray, shape (head, 2)
    labels : ndarray of int, shape (head,)
        The k-means labels, ``0 .. k - 1``.
    centres : ndarray, shape (k, 2)
        The k-means centres, in the labels' numbering.
    point : ndarray, shape (head,)
        Bound on each point's move (:func:`embedding_rounding`).

    Returns
    -------
    edge : ndarray of bool, shape (head,)
    alternative : ndarray of int, shape (head,)
        The label of the second-nearest centre (the head's own label with one cluster).
    """
    k = len(centres)
    if k < 2:
        return np.zeros(len(xy), dtype=bool), labels.copy()
    far = np.sqrt(((xy[:, None, :] - centres[None, :, :]) ** 2).sum(axis=-1))
    rows = np.arange(len(xy))
    own = far[rows, labels]
    others = far.copy()
    others[rows, labels] = np.inf
    alternative = np.argmin(others, axis=1)
    moved = np.array([point[labels == c].mean() if (labels == c).any() else 0.0 for c in range(k)])
    room = 2.0 * point + moved[labels] + moved[alternative]
    return others[rows, alternative] - own <= room, alternative.astype(np.int64)


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
