r"""How far rounding can move the clustering's points and labels (docs/design.md,
"Verdicts and ratios within rounding").

The summed distances carry the float32 rounding of the logs they are made of
(:func:`attncoda.experiments.cluster.rounding_sums`): each variant's distance of heads
``A``, ``B`` moves by at most ``e(A, B) = u (r_A + r_B)`` (:func:`distance_rounding`). The
results made from them state what that allows:

- :func:`embedding_rounding`: how far the MDS points, and the distances between them, are
  stated to move: the distances' rounding plus the move of one more SMACOF iteration (what
  the fit's stopping rule leaves undecided); the fit's first-order worst-case response
  (:func:`worst_response`) is recorded beside it, far above every measured move;
- :func:`axis_rounding`: how far the points move along the leading axis;
- :func:`label_edges`: the heads within that of equidistant from their two nearest k-means
  centres, whose label may differ.

Every bound is first order in the logs' rounding (``(n + 2) u |z|``, ``u = 2**-24``), the
size at which two CPUs' logs differ. What the summaries made of them can move is
:mod:`attncoda.experiments.cluster._summary_rounding`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF

__all__ = [
    "EmbeddingRounding",
    "axis_rounding",
    "distance_rounding",
    "embedding_rounding",
    "label_edges",
    "worst_response",
]


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
