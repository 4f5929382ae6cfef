"""Head distances per document, kept as sums so that resampling documents reweights them
(docs/design.md, "The experiments"): what :mod:`attncoda.experiments.flips._experiment` pools and
:mod:`attncoda.experiments.flips._bootstrap` resamples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.coda import head_distances
from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF, DocRows, HeadRows

__all__ = [
    "METRIC_ROUNDING",
    "DocumentSums",
    "distance_rounding",
    "document_sums",
    "entropy_sums",
    "used_rows",
]

#: The constant term ``c`` of each classic metric's row rounding ``(n + 2) u (c + H_A + H_B)``
#: (docs/design.md, "Verdicts and ratios within rounding"): the magnitude of the terms its
#: float32 row sums cancel, beyond the entropies that the rounded logs bring in. TV sums
#: ``(p + q) / 2`` (1); cosine ``1 - x_A . x_B`` of unit rows, each normalised (1 + 2);
#: Hellinger a Gram difference of magnitude 4, whose square root divides its rounding by at
#: least ``2 d >= 2 sqrt(0.024)`` (nearer pairs are recomputed from their difference), over
#: ``sqrt(2)``: 9.2, so 10; JSD ``H(m) <= log 2 + (H_A + H_B) / 2``; the entropy gap none.
METRIC_ROUNDING = {
    "tv": 1.0,
    "cosine": 3.0,
    "hellinger": 10.0,
    "jsd": float(np.log(2.0)),
    "entropy_gap": 0.0,
}


@dataclass(frozen=True)
class DocumentSums:
    """Per-document sums of row distances, so that resampling documents reweights them.

    Attributes
    ----------
    sums : ndarray, shape (document, head, head)
        ``S_d = sum`` over document ``d``'s used rows of the row metric between two heads.
    counts : ndarray of int64, shape (document,)
        ``n_d``, the used rows of each document (every sink key present, ``m >= 2``).
    docs : tuple of int
        Index in ``HeadRows.docs`` of each kept document (documents without a used row are
        left out).
    entropies : ndarray, shape (document, head)
        Sum over document ``d``'s used rows of each head's row entropy under the convention
        (nats): the magnitudes the rows' rounded logs carry into the distances.
    keys : int
        The most keys a row sees (the windows' padded length): the length of the rows'
        float32 sums.
    rows : int
        The most used rows of a document: the length of its float32 mean.
    constant : float
        The metric's :data:`METRIC_ROUNDING`.
    """

    sums: np.ndarray
    counts: np.ndarray
    docs: tuple[int, ...]
    entropies: np.ndarray
    keys: int
    rows: int
    constant: float

    @property
    def distances(self) -> np.ndarray:
        """The pooled head distances ``D = sum_d S_d / sum_d n_d``, shape (head, head)."""
        return self.sums.sum(axis=0) / self.counts.sum()

    @property
    def rounding(self) -> np.ndarray:
        """How far float32 rounding can move each pooled distance, shape (head, head):
        :func:`distance_rounding` of :attr:`distances` and the mean row entropies."""
        mean_h = self.entropies.sum(axis=0) / self.counts.sum()
        return distance_rounding(self.distances, mean_h, self)


def distance_rounding(distances: np.ndarray, mean_entropy: np.ndarray, of: DocumentSums) -> Any:
    r"""The rounding bound of head distances pooled from float32 rows (docs/design.md,
    "Verdicts and ratios within rounding").

    .. math:: e(A, B) = u \left[(n + 2) (c + \bar H_A + \bar H_B) + R \, |D(A, B)|\right]

    with ``u = 2**-24``, ``n`` the most keys a row sees, ``c`` the metric's constant
    (:data:`METRIC_ROUNDING`), ``\bar H`` each head's mean row entropy (nats), ``R`` the
    most rows of a document (the float32 mean over them). Shapes broadcast: ``distances``
    (..., head, head) with ``mean_entropy`` (..., head), or pair vectors (..., pair) with
    ``mean_entropy`` given as ``H_A + H_B`` per pair (..., pair).

    Returns
    -------
    ndarray
        Non-negative, the distances' units.
    """
    if distances.ndim == mean_entropy.ndim + 1:
        pair = mean_entropy[..., :, None] + mean_entropy[..., None, :]
    else:
        pair = mean_entropy
    terms = (of.keys + 2) * (of.constant + pair) + of.rows * np.abs(distances)
    return FLOAT32_UNIT_ROUNDOFF * terms


def used_rows(doc: DocRows) -> int:
    """Recorded rows of a document with every sink key present and ``m >= 2`` content keys."""
    return int(_used(np.asarray(doc.key_mask, dtype=bool), doc.sink).sum())


def _used(mask: np.ndarray, sink: tuple[int, ...]) -> np.ndarray:
    """Which rows of a (row, key) mask are used: every sink key present, ``m >= 2``."""
    has_sink = mask[:, list(sink)].all(axis=-1)
    return has_sink & (mask.sum(axis=-1) - len(sink) >= 2)


def entropy_sums(head_rows: HeadRows, convention: str | None) -> np.ndarray:
    """Each head's row entropy (nats) under ``convention`` summed over each document's used
    rows, shape (document, head) over every document of ``head_rows``: the magnitudes of
    :attr:`DocumentSums.entropies`, the same for every metric."""
    return np.stack([_entropy_sums(doc, convention) for doc in head_rows.docs])


def document_sums(
    head_rows: HeadRows,
    metric: str,
    convention: str | None,
    *,
    device: str | None = None,
    entropies: np.ndarray | None = None,
) -> DocumentSums:
    """Per-document sums ``S_d`` and counts ``n_d`` of a metric's row distances.

    Parameters
    ----------
    head_rows : HeadRows
        The recorded rows of every head.
    metric : str
        A metric of :func:`attncoda.head_distances`.
    convention : {"keep", "drop"} or None
        As :func:`attncoda.head_distances` requires for ``metric``.
    device : str, optional
        A torch device (``"cuda"``) to compute the head distances on; None: numpy on the
        host.
    entropies : ndarray, shape (document, head), optional
        :func:`entropy_sums` of ``head_rows`` under ``convention``, when already at hand
        (flips reads them once per convention for every metric).

    Returns
    -------
    DocumentSums
        ``sums`` in the metric's units (nats for ``jsd`` and ``entropy_gap``).
    """
    sums, counts, kept = [], [], []
    for i, doc in enumerate(head_rows.docs):
        n_used = used_rows(doc)
        if n_used == 0 and _sinks_present(doc):
            continue  # no row with content: nothing to average (head_distances would refuse)
        logp: Any = doc.logp
        key_mask: Any = doc.key_mask
        if device is not None:
            import torch

            logp = torch.as_tensor(logp, device=device)
            key_mask = torch.as_tensor(key_mask, device=device)
        mean = head_distances(logp, metric, convention=convention, sink=doc.sink, key_mask=key_mask)
        if device is not None:
            mean = mean.cpu().numpy()
        sums.append(np.asarray(mean, dtype=np.float64) * n_used)
        counts.append(n_used)
        kept.append(i)
    if not kept:
        raise AttncodaError(
            f"model {head_rows.model!r} has no recorded row with every sink key present and "
            "at least 2 content keys: head distances are means over such rows"
        )
    if metric not in METRIC_ROUNDING:  # an unknown metric was refused by head_distances
        raise AttncodaError(
            f"document sums are of the classic metrics {sorted(METRIC_ROUNDING)}; got {metric!r}"
        )
    return DocumentSums(
        np.stack(sums),
        np.asarray(counts, dtype=np.int64),
        tuple(kept),
        entropies=(entropy_sums(head_rows, convention) if entropies is None else entropies)[
            list(kept)
        ],
        keys=max(int(np.shape(head_rows.docs[i].key_mask)[-1]) for i in kept),
        rows=max(counts),
        constant=METRIC_ROUNDING[metric],
    )


def _entropy_sums(doc: DocRows, convention: str | None) -> np.ndarray:
    """Each head's row entropy (nats) under ``convention`` summed over the document's used
    rows, shape (head,): float32 work summed in float64, a magnitude (no finer than the
    rows it is read from)."""
    mask = np.asarray(doc.key_mask, dtype=bool)
    used = _used(mask, doc.sink)
    keys = mask[used]
    if convention == "drop":
        keys = keys.copy()
        keys[:, list(doc.sink)] = False
    z = np.where(keys, np.asarray(doc.logp, dtype=np.float32)[:, used], -np.inf)
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    total = p.sum(axis=-1, keepdims=True)
    # H = log(sum e^z) - sum e^z z / sum e^z; keys of probability 0 (absent, or a log of
    # -inf that the classic metrics allow) are left out of the dot.
    dot = np.einsum("hrk,hrk->hr", p, np.where(p > 0, z, 0.0))
    h = np.log(total[..., 0]) - dot / total[..., 0]
    return h.sum(axis=-1, dtype=np.float64)


def _sinks_present(doc: DocRows) -> bool:
    mask = np.asarray(doc.key_mask, dtype=bool)
    rows_with_keys = mask.any(axis=-1)
    return bool(mask[rows_with_keys][:, list(doc.sink)].all())
