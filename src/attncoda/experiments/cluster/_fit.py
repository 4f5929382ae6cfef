"""One variant of the clustering fitted: its MDS points, k-means labels and rank
correlations, with what rounding leaves open of each (docs/design.md, "The experiments",
cluster; "Verdicts and ratios within rounding")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncoda.experiments.cluster._embedding import (
    DIRECTIONS,
    best_direction,
    embed,
    kmeans_labels,
    spearman,
)
from attncoda.experiments.cluster._point_rounding import (
    EmbeddingRounding,
    axis_rounding,
    distance_rounding,
    embedding_rounding,
    label_edges,
)
from attncoda.experiments.cluster._summary_rounding import (
    direction_rounding,
    rank_rounding,
)

__all__ = ["ZERO_PER_ROW", "Fit", "FitSettings", "fit_variant"]

ZERO_PER_ROW = 1e-10


@dataclass(frozen=True)
class Fit:
    """One variant's embedding, clustering and rank statistics, with what rounding can move."""

    xy: np.ndarray
    stress: float | None
    n_iter: int | None
    labels: np.ndarray
    e: np.ndarray
    moves: EmbeddingRounding
    angle: float
    edge: np.ndarray
    alternative: np.ndarray
    degenerate: bool
    degenerate_edge: bool
    rho: float | None
    rho_rounding: float | None
    sign_edge: bool
    best: float | None
    best_rounding: float | None
    n_near_ties: int


def _sign_edge(x: np.ndarray, moves: np.ndarray) -> bool:
    """Whether the head that signs axis 1 (the largest ``|x|``, made positive) may be one of
    the other sign under rounding: a negative coordinate within the two moves of the top."""
    top = int(np.argmax(np.abs(x)))
    other = np.flatnonzero(x < 0)
    if other.size == 0:
        return False
    rival = other[np.argmax(np.abs(x[other]))]
    return bool(abs(x[top]) - moves[top] <= abs(x[rival]) + moves[rival])


@dataclass(frozen=True)
class FitSettings:
    """How every variant is fitted: the seed of the MDS starts and of k-means, the MDS
    starts (SMACOF runs) and the k-means clusters."""

    seed: int
    n_init: int
    n_clusters: int


def fit_variant(
    d: np.ndarray,
    sums: np.ndarray,
    n_rows: int,
    sink_mass: np.ndarray,
    sink_moves: np.ndarray,
    settings: FitSettings,
) -> Fit:
    """Embed one variant's distances ``d``, cluster and rank the embedding against each
    head's ``sink_mass`` (held to ``sink_moves``), and bound how far the rounding ``sums`` of
    its distances moves each of those (``_point_rounding``, ``_summary_rounding``)."""
    heads = len(d)
    e = distance_rounding(sums)
    # All distances at most the zero threshold: nothing to embed. On the edge where the
    # largest distance lies within its rounding of the threshold.
    threshold = ZERO_PER_ROW * n_rows
    degenerate = bool(d.max() <= threshold)
    degenerate_edge = bool(abs(d.max() - threshold) <= e.max(initial=0.0))
    if degenerate:
        xy, stress, n_iter = np.zeros((heads, 2)), None, None
        moves = EmbeddingRounding(np.zeros((heads, heads)), np.zeros(heads), 0.0, 0.0)
    else:
        xy, stress, n_iter = embed(d, settings.seed, settings.n_init)
        moves = embedding_rounding(xy, d, e, n_iter)
    if degenerate_edge:
        # Embedded on one run, all at the origin on another: any point may be anywhere.
        anywhere = np.full((heads, heads), np.inf)
        np.fill_diagonal(anywhere, 0.0)
        moves = EmbeddingRounding(anywhere, np.full(heads, np.inf), moves.worst, moves.step)
    labels, centres = kmeans_labels(xy, settings.n_clusters, settings.seed)
    edge, alternative = label_edges(xy, labels, centres, moves.point)
    if degenerate_edge:
        edge = np.ones(heads, dtype=bool)
    axis_moves, angle = axis_rounding(xy, moves.point)
    rho = spearman(xy[:, 0], sink_mass)
    best = best_direction(xy, sink_mass)
    n_near, rho_bound = rank_rounding(xy[:, 0], axis_moves, sink_mass, sink_moves)
    sign_edge = _sign_edge(xy[:, 0], axis_moves)
    if rho is not None and sign_edge:
        rho_bound += 2 * abs(rho)  # axis 1 may be signed the other way: rho may flip
    best_bound = direction_rounding(xy, moves.point, angle, sink_mass, sink_moves, DIRECTIONS)
    return Fit(
        xy=xy,
        stress=stress,
        n_iter=n_iter,
        labels=labels,
        e=e,
        moves=moves,
        angle=angle,
        edge=edge,
        alternative=alternative,
        degenerate=degenerate,
        degenerate_edge=degenerate_edge,
        rho=rho,
        rho_rounding=None if rho is None else rho_bound,
        sign_edge=sign_edge,
        best=best,
        best_rounding=None if best is None else best_bound,
        n_near_ties=n_near,
    )
