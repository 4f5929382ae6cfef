"""The used rows of every document summed into the distances the clustering embeds
(docs/design.md, "The experiments", cluster)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncoda._errors import AttncodaError
from attncoda._progress import steps
from attncoda.experiments.cluster._distances import (
    ROUNDING_SUMS,
    VARIANTS,
    document_terms,
    rounding_sums,
    used_row_mask,
)
from attncoda.experiments.contract import HeadRows

__all__ = ["Sums", "sum_documents"]


@dataclass(frozen=True)
class Sums:
    """What the used rows of every document add up to, per pair of heads (head, head):
    each variant's distance ``dist`` (nats) and its rounding sums ``sums`` (per head), the
    squared Aitchison sink term ``sink_sq`` and distance ``total_sq``, and the rows and
    documents used."""

    dist: dict[str, np.ndarray]
    sums: dict[str, np.ndarray]
    sink_sq: np.ndarray
    total_sq: np.ndarray
    n_rows: int
    n_docs_used: int


def sum_documents(head_rows: HeadRows) -> Sums:
    """Sum every document's distances over its used rows (every sink key present, at least
    2 content keys); a model with no such row has nothing to cluster."""
    model = head_rows.model
    heads = head_rows.n_layers * head_rows.n_heads
    dist = {v: np.zeros((heads, heads)) for v in VARIANTS}
    sums = {name: np.zeros(heads) for name in ROUNDING_SUMS}
    sink_sq = np.zeros((heads, heads))
    total_sq = np.zeros((heads, heads))
    n_rows = n_docs_used = 0
    documents = steps(
        enumerate(head_rows.docs),
        desc=f"cluster {model}: head distances",
        unit="doc",
        total=len(head_rows.docs),
    )
    for i, doc in documents:
        used = used_row_mask(doc, i, model)
        if not used.any():
            continue
        try:
            terms, s_sq, t_sq = document_terms(doc, used)
        except AttncodaError as exc:
            raise AttncodaError(f"document {i} of {model!r}: {exc}") from exc
        for v in VARIANTS:
            dist[v] += terms[v]
        for name, part in rounding_sums(doc, used).items():
            sums[name] += part
        sink_sq += s_sq
        total_sq += t_sq
        n_rows += int(used.sum())
        n_docs_used += 1
    if n_rows == 0:
        raise AttncodaError(
            f"no recorded row of {model!r} has every sink key and at least 2 content keys "
            f"({len(head_rows.docs)} documents): record longer rows"
        )
    return Sums(dist, sums, sink_sq, total_sq, n_rows, n_docs_used)
