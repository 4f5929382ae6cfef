"""The summed head distances of the clustering pipeline, per document (docs/design.md, "The
experiments").

Per document and over its used rows (every sink key present, ``m >= 2``) :func:`document_terms`
sums, for every pair of heads, Clark et al.'s Jensen–Shannon divergence of the smoothed rows
(``keep``), the same of the smoothed renormalised content rows (``drop``), and the Aitchison
sink and content terms ``|b_A - b_B|`` and ``||clr_C(A) - clr_C(B)||``.

The ``keep`` and ``drop`` sums go through :func:`attncoda.coda.head_distances` (its per-row
mean times the number of rows); the Aitchison terms are computed here from direct per-row
differences, because a Gram-matrix distance leaves identical heads at the square root of a
rounding error (about 1e-7) instead of 0.

:func:`distance_table` writes the summed matrices, the ones MDS embeds, as the tidy table
``cluster_distances``: what Clark et al.'s ``head_distances.py`` writes, one row per pair.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.coda import head_distances
from attncoda.experiments.contract import DocRows

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SMOOTHING",
    "VARIANTS",
    "VARIANT_TITLES",
    "distance_table",
    "document_terms",
    "used_row_mask",
]

VARIANTS = ("keep", "drop", "aitchison_sink", "aitchison_content")
"""The four runs of the pipeline, in the order of every table and figure."""

VARIANT_TITLES = {
    "keep": "JS, keep sink (Clark et al.)",
    "drop": "JS, drop sink",
    "aitchison_sink": "Aitchison sink term",
    "aitchison_content": "Aitchison content term",
}
"""A human-readable name for each variant (figure titles)."""

SMOOTHING = 0.001
"""Clark et al.'s smoothing weight: each row becomes ``(1 - 0.001) p + 0.001 / n``."""


def used_row_mask(doc: DocRows, index: int, model: str) -> np.ndarray:
    """Boolean mask ``(row,)`` of the rows with every sink key present and ``m >= 2`` content
    keys; an error names document ``index`` of ``model`` when its mask or sink is malformed."""
    mask = np.asarray(doc.key_mask)
    keys = doc.logp.shape[-1]
    if mask.dtype != np.bool_ or mask.shape != doc.logp.shape[1:]:
        raise AttncodaError(
            f"document {index} of {model!r}: key_mask must be boolean of shape (rows, keys) = "
            f"{doc.logp.shape[1:]}; got dtype {mask.dtype} and shape {mask.shape}"
        )
    sink = tuple(doc.sink)
    if not sink or any(not 0 <= s < keys for s in sink):
        raise AttncodaError(
            f"document {index} of {model!r}: sink {list(sink)} must name key positions "
            f"in 0..{keys - 1}"
        )
    return doc.split_rows()[2]


def _closed(z: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Log-softmax over the keys in ``keep`` (``-inf`` elsewhere), float64."""
    z = np.where(keep, z, -np.inf)
    top = z.max(axis=-1, keepdims=True)
    return z - (top + np.log(np.exp(z - top).sum(axis=-1, keepdims=True)))


def _smoothed(lp: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``log(0.999 p + 0.001 / n)`` over the keys in ``keep`` (n per row), 0 elsewhere."""
    n = keep.sum(axis=-1, keepdims=True)
    p = np.exp(lp)
    return np.where(keep, np.log((1 - SMOOTHING) * p + SMOOTHING / n), 0.0)


def _aitchison_terms(
    z: np.ndarray, mask: np.ndarray, content: np.ndarray, sink: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-row Aitchison terms of every head pair, summed over rows.

    Returns ``sum_r |b_A - b_B|``, ``sum_r ||clr_C(A) - clr_C(B)||``, ``sum_r (b_A - b_B)^2``
    and ``sum_r d_A(A, B)^2``, each of shape (head, head). The differences are taken
    directly, not through a Gram matrix, so identical heads come out at exactly 0 rather than
    at the square root of a rounding error.
    """
    heads = z.shape[0]
    zc = np.where(mask, z, 0.0)
    k = len(sink)
    m = content.sum(axis=-1)
    content_mean = np.where(content, z, 0.0).sum(axis=-1) / m
    b = np.sqrt(k * m / (k + m)) * (zc[..., list(sink)].mean(axis=-1) - content_mean)
    b_diff = b[:, None, :] - b[None, :, :]  # (head, head, row)
    clr_all = np.where(mask, z - zc.sum(axis=-1, keepdims=True) / mask.sum(axis=-1)[:, None], 0)
    clr_content = np.where(content, z - content_mean[..., None], 0.0)
    d_content, total_sq = np.zeros((heads, heads)), np.zeros((heads, heads))

    def pairs_of(first: range) -> None:
        # One buffer for the differences of the heads ``first`` pair with: a fresh temporary
        # per head would be a fresh mapping of memory whose pages fault in on first touch.
        scratch = np.empty_like(z)
        for a in first:
            diff = np.subtract(clr_content[a + 1 :], clr_content[a], out=scratch[a + 1 :])
            d_content[a, a + 1 :] = np.sqrt(np.einsum("hrk,hrk->hr", diff, diff)).sum(axis=-1)
            diff = np.subtract(clr_all[a + 1 :], clr_all[a], out=scratch[a + 1 :])
            total_sq[a, a + 1 :] = np.einsum("hrk,hrk->h", diff, diff)

    # numpy releases the GIL in these loops: the heads are dealt out to a few threads (every
    # pair is computed as on one thread, into its own cells).
    threads = min(4, os.cpu_count() or 1, max(1, heads - 1))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(pairs_of, [range(t, heads - 1, threads) for t in range(threads)]))
    return (
        np.abs(b_diff).sum(axis=-1),
        d_content + d_content.T,
        (b_diff**2).sum(axis=-1),
        total_sq + total_sq.T,
    )


def document_terms(
    doc: DocRows, used: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Summed distances of one document per variant, and its summed squared sink and total
    Aitchison distances, over the rows in ``used``."""
    z = np.asarray(doc.logp, dtype=np.float64)[:, used, :]
    mask = np.asarray(doc.key_mask)[used]
    sink = tuple(sorted(doc.sink))
    for bad, what in (
        (mask & np.isnan(z), "NaN"),
        (mask & np.isposinf(z), "+inf"),
        (mask & np.isneginf(z), "-inf (a probability of exactly 0)"),
    ):
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise AttncodaError(
                f"logp contains {what} at (head, used row, key) {where}: rows must be finite "
                "log-probabilities (the Aitchison variants need every key's log)"
            )
    n_rows = int(used.sum())
    is_sink = np.zeros(z.shape[-1], dtype=bool)
    is_sink[list(sink)] = True
    content = mask & ~is_sink

    lp = _closed(z, mask)
    lq = _closed(z, content)
    # head_distances averages over the rows it is given (all of them pass its m >= 2 rule);
    # times n_rows, that is Clark et al.'s sum.
    keep = head_distances(_smoothed(lp, mask), "jsd", convention="keep", sink=sink, key_mask=mask)
    # The sink entries (0 here) are removed by convention="drop"; the content entries are
    # already the smoothed, renormalised q, so its re-closure changes nothing.
    drop = head_distances(
        _smoothed(lq, content), "jsd", convention="drop", sink=sink, key_mask=mask
    )
    d_sink, d_content, sink_sq, total_sq = _aitchison_terms(z, mask, content, sink)
    out = {
        "keep": np.asarray(keep, dtype=np.float64) * n_rows,
        "drop": np.asarray(drop, dtype=np.float64) * n_rows,
        "aitchison_sink": d_sink,
        "aitchison_content": d_content,
    }
    return out, sink_sq, total_sq


ROUNDING_SUMS = (*VARIANTS, "sink_sq", "total_sq")
"""The per-head sums of :func:`rounding_sums`: one per variant, then the two squared ones of
the sink share."""


def rounding_sums(doc: DocRows, used: np.ndarray) -> dict[str, np.ndarray]:
    r"""Per head, what the float32 rounding of its recorded logs can move the summed distances
    of one document by, over the rows in ``used`` (docs/design.md, "Verdicts and ratios
    within rounding", "Cluster distances").

    A recorded log ``z_j`` is the output of a float32 computation over its row's ``n`` keys
    (the scores' products, the softmax's sum), and stands for any value within
    ``(n + 2) u |z_j|`` of it (``u = 2**-24``): the accumulation factor every row statistic
    is held to. One rounding, ``u |z_j|``, is not enough: between ATen's default and AVX2
    kernels Gemma 3's sink terms moved by up to 4.9 times that. Everything after the logs
    runs in float64, whose own rounding is negligible. To first order a variant's summed
    distance of heads ``A``, ``B`` then moves by at most ``u (r_A + r_B)``, each head's
    ``r`` a sum over rows of (``|z_j|`` standing for ``(n + 2) |z_j|``)

    - ``keep``: :math:`\tfrac12 (1 - s) \sum_j (\log 2 + |\ell_j|)\, p_j\, (|z_j| + \sum_i
      p_i |z_i|)`, with ``p = exp(l)`` the re-closed row, ``s`` the smoothing: the JS
      divergence's derivative in a smoothed ``p~_j`` is ``log(p~_j / m_j) / 2``, of size at
      most ``log 2 + |l_j|``, and the closure moves ``l_j`` by at most
      ``u (|z_j| + sum_i p_i |z_i|)``;
    - ``drop``: the same over the content keys of the renormalised row ``q``;
    - ``aitchison_sink``: :math:`\beta = \sqrt{km/(k+m)}\,(\overline{|z|}_S +
      \overline{|z|}_C)`, which bounds the move of the sink balance ``b`` over ``u``;
    - ``aitchison_content``: :math:`\lVert z_C \rVert_2`, since the centred content logs
      move by at most the norm of the logs' own moves;

    and for the sink share ``sink_sq`` is :math:`\sum_r \beta^2` and ``total_sq``
    :math:`\sum_r \lVert z \rVert_2^2` over the present keys (the Cauchy-Schwarz factors of
    :func:`attncoda.experiments.cluster._summary_rounding.share_rounding`).

    Returns
    -------
    dict of str to ndarray, shape (head,)
        Keyed by :data:`ROUNDING_SUMS`; non-negative, nats over ``u``.
    """
    # float32 throughout: a bound needs no more digits, and the sums over the rows are kept
    # in float64. Every key-wise product is taken once; the rest is per row.
    z = np.asarray(doc.logp)[:, used, :].astype(np.float32, copy=False)
    mask = np.asarray(doc.key_mask)[used]
    sink = sorted(doc.sink)
    is_sink = np.zeros(z.shape[-1], dtype=bool)
    is_sink[sink] = True
    content = mask & ~is_sink
    grow = mask.sum(axis=-1) + 2.0  # (row,): the logs' rounding is (n + 2) u |z|
    # The content keys' |z|, p, p|z| and p z^2, and the same of the sink keys.
    a = np.where(content, np.abs(z), np.float32(0.0))
    p = np.where(content, np.exp(np.where(content, z, np.float32(0.0))), np.float32(0.0))
    pa = p * a
    mass, first, second = (
        p.sum(axis=-1, dtype=np.float64),
        pa.sum(axis=-1, dtype=np.float64),
        (pa * a).sum(axis=-1, dtype=np.float64),
    )
    a_sink = np.abs(z[..., sink]).astype(np.float64)
    p_sink = np.exp(z[..., sink].astype(np.float64))
    content_sq = (a * a).sum(axis=-1, dtype=np.float64)

    log2 = np.log(2.0)
    # keep: with H = sum p|z| and Q = sum p z^2 over the row (sum p = 1), the row's term
    # sum_j (log 2 + |z_j|) p_j ((n + 2)|z_j| + (n + 2) H) is (n + 2) (log 2 H + Q + (log 2 + H) H).
    h = first + (p_sink * a_sink).sum(axis=-1)
    q = second + (p_sink * a_sink**2).sum(axis=-1)
    keep = grow * (log2 * h + q + (log2 + h) * h)
    # drop: over the content keys of q = p / S, every z_j <= L = log S <= 0, so
    # |l_j| = |z_j| - |L|; with h' = sum q|z| and q' = sum q z^2 the same sum is
    # (n + 2) ((log 2 - |L|) h' + q' + (log 2 + h' - |L|) h').
    big_l = np.abs(np.log(mass))
    h_c, q_c = first / mass, second / mass
    drop = grow * ((log2 - big_l) * h_c + q_c + (log2 + h_c - big_l) * h_c)

    k = len(sink)
    m = content.sum(axis=-1)
    beta = grow * np.sqrt(k * m / (k + m)) * (a_sink.mean(axis=-1) + a.sum(-1, np.float64) / m)
    return {
        "keep": 0.5 * (1 - SMOOTHING) * keep.sum(axis=-1),
        "drop": 0.5 * (1 - SMOOTHING) * drop.sum(axis=-1),
        "aitchison_sink": beta.sum(axis=-1),
        "aitchison_content": (grow * np.sqrt(content_sq)).sum(axis=-1),
        "sink_sq": (beta**2).sum(axis=-1),
        "total_sq": (grow**2 * (content_sq + (a_sink**2).sum(axis=-1))).sum(axis=-1),
    }


def distance_table(
    model: str,
    distances: Mapping[str, np.ndarray],
    rounding: Mapping[str, np.ndarray] | None = None,
    n_rows: int = 0,
) -> pd.DataFrame:
    """The summed head-distance matrices as a tidy table, one row per unordered pair of heads.

    Parameters
    ----------
    model : str
        The model name every row carries.
    distances : mapping of str to ndarray, shape (head, head)
        Each variant's summed distance matrix, in the order of the table
        (:attr:`ClusterResult.distances <attncoda.experiments.cluster.ClusterResult>`, the
        matrices MDS embeds). Each must be symmetric with a zero diagonal.
    rounding : mapping of str to ndarray, shape (head, head), optional
        Each variant's rounding bound of those distances
        (:attr:`ClusterResult.rounding <attncoda.experiments.cluster.ClusterResult>`); the
        table's ``distance_rounding``, zero where not given.
    n_rows : int
        The used rows each distance sums over (the table's ``n_rows``).

    Returns
    -------
    pandas.DataFrame
        Columns ``model``, ``variant``, ``head_a``, ``head_b``, ``n_rows`` (int64),
        ``distance`` (float64, nats) and ``distance_rounding`` (float64, nats: how far the
        float32 rounding of the logs can move it; docs/design.md, "Verdicts and ratios
        within rounding"): for each variant in order, one row per pair ``head_a < head_b``,
        row-major over the upper triangle, so ``H (H - 1) / 2`` rows per variant for ``H``
        heads. A head is its layer-major index ``layer * n_heads + head``, the
        ``head_index`` of the ``cluster`` table and the row of Clark et al.'s matrix (their
        ``attns.reshape([144, ...])``). The pairs ``a < b`` hold the whole matrix:
        ``D[a, b] = D[b, a] = distance`` and ``D[a, a] = 0``.

    Notes
    -----
    ``distance`` is a sum over documents and used rows (every sink key present, ``m >= 2``),
    not a mean, as Clark et al.'s: ``keep`` is their smoothed Jensen-Shannon divergence
    (natural log, nats) on those rows, ``drop`` the same on the renormalised content rows,
    and ``aitchison_sink`` and ``aitchison_content`` the summed ``|b_A - b_B|`` and
    ``||clr_C(A) - clr_C(B)||`` (natural-log ratios, nats as the project counts them).
    """
    import pandas as pd

    variants: list[str] = []
    a, b, value, bound = [], [], [], []
    for variant, matrix in distances.items():
        d = np.asarray(matrix, dtype=np.float64)
        if d.ndim != 2 or d.shape[0] != d.shape[1]:
            raise AttncodaError(
                f"the {variant} distances of {model!r} must be a (head, head) matrix; "
                f"got shape {d.shape}"
            )
        if not np.array_equal(d, d.T) or np.diag(d).any():
            raise AttncodaError(
                f"the {variant} distances of {model!r} must be symmetric with a zero diagonal: "
                "the pairs head_a < head_b would not hold the whole matrix"
            )
        upper_a, upper_b = np.triu_indices(len(d), k=1)
        variants += [variant] * len(upper_a)
        a.append(upper_a)
        b.append(upper_b)
        value.append(d[upper_a, upper_b])
        if rounding is not None and variant in rounding:
            e = np.asarray(rounding[variant], dtype=np.float64)
            if e.shape != d.shape:
                raise AttncodaError(
                    f"the {variant} rounding of {model!r} must have the distances' shape "
                    f"{d.shape}; got {e.shape}"
                )
            bound.append(e[upper_a, upper_b])
        else:
            bound.append(np.zeros(len(upper_a)))

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return pd.DataFrame(
        {
            "model": pd.Series([model] * len(variants)),
            "variant": pd.Series(variants),
            "head_a": joined(a, np.int64),
            "head_b": joined(b, np.int64),
            "n_rows": np.full(len(variants), n_rows, dtype=np.int64),
            "distance": joined(value, np.float64),
            "distance_rounding": joined(bound, np.float64),
        }
    )
