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
    has_sink = mask[:, list(sink)].all(axis=-1)
    return has_sink & (mask.sum(axis=-1) - len(sink) >= 2)


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


def distance_table(model: str, distances: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The summed head-distance matrices as a tidy table, one row per unordered pair of heads.

    Parameters
    ----------
    model : str
        The model name every row carries.
    distances : mapping of str to ndarray, shape (head, head)
        Each variant's summed distance matrix, in the order of the table
        (:attr:`ClusterResult.distances <attncoda.experiments.cluster.ClusterResult>`, the
        matrices MDS embeds). Each must be symmetric with a zero diagonal.

    Returns
    -------
    pandas.DataFrame
        Columns ``model``, ``variant``, ``head_a``, ``head_b`` (int64) and ``distance``
        (float64, nats): for each variant in order, one row per pair ``head_a < head_b``,
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
    a, b, value = [], [], []
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

    def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return pd.DataFrame(
        {
            "model": pd.Series([model] * len(variants)),
            "variant": pd.Series(variants),
            "head_a": joined(a, np.int64),
            "head_b": joined(b, np.int64),
            "distance": joined(value, np.float64),
        }
    )
