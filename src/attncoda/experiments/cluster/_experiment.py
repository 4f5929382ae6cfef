r"""The head-clustering pipeline of Clark et al. (2019), run under four conventions
(docs/design.md, "The experiments").

Clark et al. embed BERT's attention heads in two dimensions: for every pair of heads they sum,
over every query row of every document, the Jensen–Shannon divergence between the two heads'
smoothed rows, then run metric MDS on that matrix. Their published code
(``head_distances.py`` and ``General_Analysis.ipynb`` in the ``clarkkev/attention-analysis``
repository) computes, per row,

.. math::

    \tilde p = 0.999\,p + 0.001/n, \qquad
    \mathrm{JS}(\tilde p, \tilde p') = \tfrac12 \sum_j \tilde p_j \log\frac{\tilde p_j}{m_j}
    + \tfrac12 \sum_j \tilde p'_j \log\frac{\tilde p'_j}{m_j}, \quad m = (\tilde p + \tilde p')/2,

with ``n`` the number of keys and the natural log (``np.log``), so the divergence is in
nats; it sums over rows and documents (no mean) and embeds with
``sklearn.manifold.MDS(metric=True, n_init=5, eps=1e-10, max_iter=1000,
dissimilarity="precomputed")``.

When most of each row sits on a sink key, that distance mostly measures differences in sink
mass. :func:`cluster` runs the pipeline four times over the same rows:

``keep``
    Clark et al. as published: the rows as they are.
``drop``
    The sink keys removed and each row renormalised (``q = p_C / (1 - s)``), then the same
    smoothing with ``n`` = the number of content keys.
``aitchison_sink``
    The sink term of the Aitchison split, ``|b_A - b_B|`` per row (``b`` the sink balance),
    summed the same way. No smoothing: log-probabilities of real attention are finite.
``aitchison_content``
    The content term, ``||clr_C(A) - clr_C(B)||`` per row, summed the same way.

and measures the artifact: the Spearman correlation of the leading MDS axis with head sink
mass per variant, the adjusted Rand index between the k-means clusterings of every pair of
variants, and the mean share of the squared Aitchison distance that is the sink term.

Rows used: every variant sums over the same rows, those with every sink key present and at
least two content keys (``m >= 2``), the rows :func:`attncoda.coda.head_distances` averages
over. Clark et al. summed over every row; the rows left out here have no content to compare
under ``drop`` or ``aitchison_content``.

MDS axes: the SMACOF solution is defined only up to rotation and reflection, so each
embedding is centred and rotated onto its principal axes (axis 1 = the direction of largest
spread; distances, stress and k-means clusters are unchanged), and each axis is signed by a
rule that does not look at sink mass: the head with the largest absolute coordinate on that
axis gets a positive one (the lowest head index on a tie). Because an embedding of a
one-dimensional effect often bends (the horseshoe effect), the artifact also reports the
largest ``|rho|`` over all directions of the plane.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.cluster._distances import (
    SMOOTHING,
    VARIANT_TITLES,
    VARIANTS,
)
from attncoda.experiments.cluster._embedding import (
    KMEANS_N_INIT,
    MDS_EPS,
    MDS_MAX_ITER,
)
from attncoda.experiments.cluster._figure import draw
from attncoda.experiments.cluster._fit import Fit, FitSettings, fit_variant
from attncoda.experiments.cluster._headline import HEADLINE
from attncoda.experiments.cluster._held import HELD
from attncoda.experiments.cluster._result import ClusterResult, result_tables
from attncoda.experiments.cluster._section import cluster_section
from attncoda.experiments.cluster._summary import summary
from attncoda.experiments.cluster._summary_rounding import (
    adjusted_rand,
    ari_rounding,
    share_rounding,
)
from attncoda.experiments.cluster._sums import Sums, sum_documents
from attncoda.experiments.contract import (
    Command,
    Experiment,
    HeadRows,
    Inputs,
    Tables,
    View,
    row_statistic_rounding,
    setting,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EXPERIMENT", "Settings", "cluster"]


def _note(n_docs_skipped: int) -> str:
    note = (
        "keep: Clark et al. 2019 as published (clarkkev/attention-analysis, "
        "head_distances.py): each row smoothed to 0.999 p + 0.001/n (n = keys in the row), "
        "per-row Jensen-Shannon divergence 0.5 KL(p||m) + 0.5 KL(p'||m) with the natural "
        "log (nats, as theirs), summed over rows and documents. drop: sink keys removed and "
        "each row renormalised, then the same smoothing with n = content keys. "
        "aitchison_sink / aitchison_content: |b_A - b_B| and ||clr_C(A) - clr_C(B)|| per "
        "row, summed the same way, no smoothing. Every variant uses the same rows: every "
        "sink key present and at least 2 content keys (Clark et al. used every row). "
        "Metric MDS as theirs (SMACOF, random starts, max_iter 1000, eps 1e-10) with a "
        "fixed seed; coordinates rotated onto principal axes, each axis signed so that the "
        "head with the largest |coordinate| is positive; Spearman rho of axis 1 with head "
        "sink mass is reported as is and as |rho|, beside the largest |rho| over all "
        "directions of the plane (a maximum, so biased upward; it shows a sink-mass "
        "gradient that a bent embedding hides from axis 1)."
    )
    if n_docs_skipped:
        note += f" {n_docs_skipped} document(s) had no such row and were left out."
    return note


def cluster(
    head_rows: HeadRows, *, seed: int = 0, n_clusters: int = 4, n_init: int = 5
) -> ClusterResult:
    r"""Clark et al.'s head clustering under ``keep``, ``drop`` and the Aitchison terms.

    Parameters
    ----------
    head_rows : HeadRows
        Recorded log-probability rows of every head, per document.
    seed : int
        Seed of the MDS starts and of k-means.
    n_clusters : int
        Number of k-means clusters on each 2-D embedding (fewer when a variant has fewer
        distinct points).
    n_init : int
        MDS starts (SMACOF runs); the lowest-stress run is kept. Clark et al. used 5.

    Returns
    -------
    ClusterResult
        Per-head table, artifact summary and the summed distance matrices.

    Notes
    -----
    For heads ``A``, ``B`` the ``keep`` distance is

    .. math:: D(A,B) = \sum_{\text{docs}} \sum_{r} \mathrm{JS}(\tilde p_{A,r}, \tilde p_{B,r})

    in nats over the rows ``r`` with every sink key present and ``m >= 2`` content keys;
    ``drop`` smooths and compares the renormalised content rows instead; the Aitchison
    variants sum ``|b_A - b_B|`` and ``||clr_C(A) - clr_C(B)||`` over the same rows. The sink
    share is the mean over head pairs ``A != B`` of
    ``sum_r (b_A - b_B)^2 / sum_r d_A(A, B)^2`` (pairs at distance 0 left out). A variant
    whose distances are all numerically zero is not embedded: its heads sit at the origin in
    one cluster and its rho is ``None``.

    Every result states how far the float32 rounding of the recorded logs can move it
    (docs/design.md, "Verdicts and ratios within rounding"; ``_point_rounding``): each summed
    distance its rounding (:func:`~attncoda.experiments.cluster.rounding_sums`), the MDS
    points that plus one more SMACOF iteration's move, a k-means label whether its head is
    on an edge, each rho the heads that may swap ranks, the adjusted Rand index its edge
    heads, the sink share its parts' rounding, and the zero threshold whether the largest
    distance lies within rounding of it.

    References
    ----------
    K. Clark, U. Khandelwal, O. Levy, C. D. Manning, "What Does BERT Look At? An Analysis of
    BERT's Attention", BlackboxNLP 2019, §6.
    """
    sink_mass = _checked_sink_mass(head_rows, seed, n_clusters, n_init)
    sums = sum_documents(head_rows)
    # The most keys a row of the windows can see: what the sink masses' rounding grows with.
    n_keys = max(int(doc.key_mask.shape[-1]) for doc in head_rows.docs)
    # Each head's sink mass is a mean of float32 row statistics, held to that rounding.
    sink_moves = np.array([row_statistic_rounding(n_keys, m) for m in sink_mass])
    settings = FitSettings(seed=seed, n_init=n_init, n_clusters=n_clusters)
    fits = {
        v: fit_variant(sums.dist[v], sums.sums[v], sums.n_rows, sink_mass, sink_moves, settings)
        for v in VARIANTS
    }
    return ClusterResult(
        table=_head_table(head_rows, sums.n_rows, n_keys, sink_mass, fits),
        artifact=_artifact(head_rows, sums, fits, n_keys, settings),
        distances=sums.dist,
        rounding={v: fits[v].e for v in VARIANTS},
    )


def _checked_sink_mass(head_rows: HeadRows, seed: int, n_clusters: int, n_init: int) -> np.ndarray:
    """The heads' sink masses (float64, layer-major), once the settings and the model are
    found fit to cluster: int settings, at least one cluster and start, at least 3 heads."""
    model = head_rows.model
    for name, value in (("seed", seed), ("n_clusters", n_clusters), ("n_init", n_init)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise AttncodaError(f"{name} must be an int; got {value!r}")
    if n_clusters < 1:
        raise AttncodaError(f"n_clusters must be at least 1; got {n_clusters}")
    if n_init < 1:
        raise AttncodaError(f"n_init must be at least 1; got {n_init}")
    heads = head_rows.n_layers * head_rows.n_heads
    if heads < 3:
        raise AttncodaError(
            f"{model!r} has {heads} head(s): a 2-D embedding needs at least 3 heads"
        )
    sink_mass = np.asarray(head_rows.sink_mass, dtype=np.float64)
    if not np.isfinite(sink_mass).all():
        bad = int(np.argmin(np.isfinite(sink_mass)))
        raise AttncodaError(f"sink_mass of {model!r} is not finite at head {bad}")
    return sink_mass


def _head_table(
    head_rows: HeadRows, n_rows: int, n_keys: int, sink_mass: np.ndarray, fits: dict[str, Fit]
) -> pd.DataFrame:
    """:class:`ClusterResult`'s ``table``: one row per head, its sink mass and, per variant,
    its MDS point, k-means label, distance rounding and whether it sits on a k-means edge."""
    import pandas as pd

    heads = len(sink_mass)
    table = pd.DataFrame(
        {
            "model": pd.Series([head_rows.model] * heads),
            "head_index": np.arange(heads, dtype=np.int64),
            "layer": (np.arange(heads) // head_rows.n_heads).astype(np.int64),
            "head": (np.arange(heads) % head_rows.n_heads).astype(np.int64),
            "n_keys": np.full(heads, n_keys, dtype=np.int64),
            "n_rows": np.full(heads, n_rows, dtype=np.int64),
            "sink_mass": sink_mass,
        }
    )
    for v in VARIANTS:
        table[f"x_{v}"] = fits[v].xy[:, 0]
        table[f"y_{v}"] = fits[v].xy[:, 1]
    for v in VARIANTS:
        table[f"cluster_{v}"] = fits[v].labels
    for v in VARIANTS:
        table[f"distance_rounding_{v}"] = fits[v].moves.pair.max(axis=1)
    for v in VARIANTS:
        table[f"edge_{v}"] = fits[v].edge
    return table


def _agreement(
    fits: dict[str, Fit],
) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Per pair of variants (``"keep|drop"``, ...): the adjusted Rand index of their k-means
    labels, how far its edge heads can move it, and how many edge heads the two have."""
    ari, ari_rounding_of, ari_edges = {}, {}, {}
    for a, b in combinations(VARIANTS, 2):
        fa, fb = fits[a], fits[b]
        key = f"{a}|{b}"
        ari[key] = adjusted_rand(fa.labels, fb.labels)
        ari_rounding_of[key] = ari_rounding(
            fa.labels, fa.edge, fa.alternative, fb.labels, fb.edge, fb.alternative
        )
        ari_edges[key] = int(fa.edge.sum() + fb.edge.sum())
    return ari, ari_rounding_of, ari_edges


def _sink_share(sums: Sums) -> tuple[float | None, int, float | None]:
    """The mean over head pairs at a distance above 0 of the sink term's share of the
    squared Aitchison distance, those pairs' count, and how far rounding can move the mean
    (``None`` without such a pair)."""
    upper = np.triu_indices(len(sums.sink_sq), k=1)
    pos = sums.total_sq[upper] > 0
    shares = sums.sink_sq[upper][pos] / sums.total_sq[upper][pos]
    if not shares.size:
        return None, 0, None
    bound = share_rounding(sums.sink_sq, sums.total_sq, sums.sums["sink_sq"], sums.sums["total_sq"])
    return float(shares.mean()), int(shares.size), bound


def _fit_rounding(fits: dict[str, Fit]) -> dict[str, dict[str, Any]]:
    """The artifact's per-variant rounding: what rounding can move each fitted quantity."""
    return {
        "distance_max": {v: float(fits[v].e.max(initial=0.0)) for v in VARIANTS},
        "mds_worst_response": {v: fits[v].moves.worst for v in VARIANTS},
        "mds_step_max": {v: fits[v].moves.step for v in VARIANTS},
        "axes_turn": {v: fits[v].angle for v in VARIANTS},
        "n_edge_heads": {v: int(fits[v].edge.sum()) for v in VARIANTS},
        "degenerate_edge": {v: fits[v].degenerate_edge for v in VARIANTS},
        "spearman_axis1": {v: fits[v].rho_rounding for v in VARIANTS},
        "axis1_sign_edge": {v: fits[v].sign_edge for v in VARIANTS},
        "max_abs_spearman": {v: fits[v].best_rounding for v in VARIANTS},
        "n_near_ties": {v: fits[v].n_near_ties for v in VARIANTS},
    }


def _artifact(
    head_rows: HeadRows, sums: Sums, fits: dict[str, Fit], n_keys: int, settings: FitSettings
) -> dict[str, Any]:
    """:class:`ClusterResult`'s JSON-ready ``artifact``: the rank correlations, agreement and
    sink share, what rounding can move each, and the settings."""
    ari, ari_rounding_of, ari_edges = _agreement(fits)
    share, n_pairs, share_bound = _sink_share(sums)
    rho = {v: fits[v].rho for v in VARIANTS}
    return {
        "model": head_rows.model,
        "variants": list(VARIANTS),
        "variant_titles": dict(VARIANT_TITLES),
        "spearman_axis1_vs_sink_mass": rho,
        "abs_spearman_axis1_vs_sink_mass": {
            v: (None if r is None else abs(r)) for v, r in rho.items()
        },
        "max_abs_spearman_any_direction_vs_sink_mass": {v: fits[v].best for v in VARIANTS},
        "adjusted_rand": ari,
        "mean_sink_share_of_aitchison_sq": share,
        "n_head_pairs_in_sink_share": n_pairs,
        "mds_stress": {v: fits[v].stress for v in VARIANTS},
        "mds_n_iter": {v: fits[v].n_iter for v in VARIANTS},
        "degenerate_variants": [v for v in VARIANTS if fits[v].degenerate],
        "rounding": {
            **_fit_rounding(fits),
            "adjusted_rand": ari_rounding_of,
            "adjusted_rand_edge_heads": ari_edges,
            "mean_sink_share": share_bound,
        },
        "n_heads": head_rows.n_layers * head_rows.n_heads,
        "n_keys": n_keys,
        "n_layers": head_rows.n_layers,
        "n_heads_per_layer": head_rows.n_heads,
        "n_documents": len(head_rows.docs),
        "n_documents_used": sums.n_docs_used,
        "n_rows_used": sums.n_rows,
        "seed": int(settings.seed),
        "n_clusters": int(settings.n_clusters),
        "mds": {
            "metric_mds": True,
            "init": "random",
            "n_init": int(settings.n_init),
            "max_iter": MDS_MAX_ITER,
            "eps": MDS_EPS,
        },
        "kmeans_n_init": KMEANS_N_INIT,
        "smoothing": SMOOTHING,
        "units": "nats",
        "convention_note": _note(len(head_rows.docs) - sums.n_docs_used),
    }


@dataclass(frozen=True)
class Settings:
    """Settings of the cluster experiment."""

    n_clusters: int = setting(4, "k-means clusters per embedding", at_least=2)
    n_init: int = setting(5, "MDS starts (Clark et al. used 5)", at_least=1)


def run(inputs: Inputs, settings: Settings) -> Tables:
    """Clark et al.'s clustering of the unit's recorded rows (:func:`cluster`)."""
    result = cluster(
        inputs.rows,
        seed=inputs.seed,
        n_clusters=settings.n_clusters,
        n_init=settings.n_init,
    )
    return result_tables(result)


EXPERIMENT = Experiment(
    name="cluster",
    needs=("rows",),
    after=(),
    cost=85.0,
    settings=Settings,
    run=run,
    tables=("cluster", "cluster_summary", "cluster_agreement", "cluster_distances"),
    # Every result to what its row states rounding can move it (_held).
    held=HELD,
    view=View(
        title="Cluster: head clustering (Clark et al. 2019) under four variants",
        needs=("cluster_summary",),
        section=cluster_section,
        figure_tables=("cluster", "cluster_summary"),
        figure=draw,
        headline=HEADLINE,
    ),
    command=Command(
        help="Clark et al. head clustering under four variants",
        sources="model",
        summary=summary,
        doc="Clark et al.'s head clustering under keep, drop and the Aitchison terms.",
        flags={"n_clusters": ("--n-clusters", "--clusters")},
    ),
)
