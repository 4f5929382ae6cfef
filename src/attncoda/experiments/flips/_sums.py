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
from attncoda.experiments.contract import DocRows, HeadRows

__all__ = ["DocumentSums", "document_sums", "used_rows"]


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
    """

    sums: np.ndarray
    counts: np.ndarray
    docs: tuple[int, ...]

    @property
    def distances(self) -> np.ndarray:
        """The pooled head distances ``D = sum_d S_d / sum_d n_d``, shape (head, head)."""
        return self.sums.sum(axis=0) / self.counts.sum()


def used_rows(doc: DocRows) -> int:
    """Recorded rows of a document with every sink key present and ``m >= 2`` content keys."""
    mask = np.asarray(doc.key_mask, dtype=bool)
    n_valid = mask.sum(axis=-1)
    has_sink = mask[:, list(doc.sink)].all(axis=-1)
    return int((has_sink & (n_valid - len(doc.sink) >= 2)).sum())


def document_sums(
    head_rows: HeadRows, metric: str, convention: str | None, *, device: str | None = None
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
    return DocumentSums(np.stack(sums), np.asarray(counts, dtype=np.int64), tuple(kept))


def _sinks_present(doc: DocRows) -> bool:
    mask = np.asarray(doc.key_mask, dtype=bool)
    rows_with_keys = mask.any(axis=-1)
    return bool(mask[rows_with_keys][:, list(doc.sink)].all())
