"""The 2-D embedding of a head-distance matrix and its measures (docs/design.md, "The
experiments").

:func:`embed` is Clark et al.'s metric MDS (SMACOF on the precomputed matrix), rotated onto
principal axes and signed; :func:`kmeans_labels` clusters an embedding; :func:`spearman` and
:func:`best_direction` measure how strongly an embedding is organised by a per-head value
(head sink mass in :func:`attncoda.experiments.cluster.cluster`).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DIRECTIONS",
    "KMEANS_N_INIT",
    "MDS_EPS",
    "MDS_MAX_ITER",
    "best_direction",
    "embed",
    "kmeans_labels",
    "spearman",
]

# Clark et al.'s MDS settings (General_Analysis.ipynb). ``eps`` is a relative stress
# tolerance since scikit-learn 1.7; 1e-10 keeps it at least as strict as theirs.
MDS_MAX_ITER = 1000
MDS_EPS = 1e-10
KMEANS_N_INIT = 10

#: Directions scanned by :func:`best_direction` (every 0.5 degrees).
DIRECTIONS = 360


def embed(d: np.ndarray, seed: int, n_init: int) -> tuple[np.ndarray, float, int]:
    """Metric MDS (SMACOF) of a precomputed matrix, rotated onto principal axes and signed;
    with its stress and the SMACOF iterations of the kept start."""
    from sklearn.manifold import MDS

    mds = MDS(
        n_components=2,
        metric_mds=True,
        metric="precomputed",
        init="random",
        n_init=n_init,
        max_iter=MDS_MAX_ITER,
        eps=MDS_EPS,
        random_state=seed,
        n_jobs=1,
    )
    xy = mds.fit_transform(d)
    xy = xy - xy.mean(axis=0)
    _, _, vt = np.linalg.svd(xy, full_matrices=False)
    xy = xy @ vt.T
    for axis in range(2):
        top = int(np.argmax(np.abs(xy[:, axis])))
        if xy[top, axis] < 0:
            xy[:, axis] = -xy[:, axis]
    return xy, float(mds.stress_), int(mds.n_iter_)


def kmeans_labels(xy: np.ndarray, n_clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """k-means labels, renumbered in order of first appearance along the head index, and the
    centres ``(k, 2)`` in that numbering."""
    from sklearn.cluster import KMeans

    distinct = len(np.unique(xy, axis=0))
    k = min(n_clusters, distinct)
    if k <= 1:
        return np.zeros(len(xy), dtype=np.int64), xy.mean(axis=0, keepdims=True)
    fit = KMeans(n_clusters=k, n_init=KMEANS_N_INIT, random_state=seed).fit(xy)
    labels = fit.labels_
    order = {lab: i for i, lab in enumerate(dict.fromkeys(labels.tolist()))}
    centres = fit.cluster_centers_[sorted(order, key=order.__getitem__)]
    return np.array([order[lab] for lab in labels.tolist()], dtype=np.int64), centres


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rho, or ``None`` where either side is constant (rho undefined)."""
    from scipy.stats import spearmanr

    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(spearmanr(x, y).statistic)


def best_direction(xy: np.ndarray, y: np.ndarray) -> float | None:
    """Largest ``|rho|`` of ``y`` with the projection of ``xy`` on any direction (0.5° grid).

    An MDS embedding of a one-dimensional effect often bends (the horseshoe effect), so the
    leading axis can understate how strongly the embedding is organised by ``y``. Being a
    maximum over directions, it is biased upward (above 0 even with no structure), like a
    multiple correlation; read it beside the axis-1 value, not instead of it.
    """
    from scipy.stats import rankdata

    if np.ptp(xy) == 0 or np.ptp(y) == 0:
        return None
    angles = np.linspace(0.0, np.pi, DIRECTIONS, endpoint=False)
    proj = xy @ np.stack([np.cos(angles), np.sin(angles)])  # (head, direction)
    ranks = rankdata(proj, axis=0)
    ranks = ranks - ranks.mean(axis=0)
    ry = rankdata(y) - rankdata(y).mean()
    norms = np.sqrt((ranks**2).sum(axis=0) * (ry**2).sum())
    rho = (ranks * ry[:, None]).sum(axis=0)[norms > 0] / norms[norms > 0]
    return float(np.abs(rho).max()) if rho.size else None
