"""What one forward pass needs to know (:class:`PassPlan`), and which query rows of each
document a capture keeps in full (:func:`record_plan`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError

if TYPE_CHECKING:
    import torch

__all__ = ["ROWS_AUTO", "PassPlan", "record_plan"]


@dataclass(frozen=True)
class PassPlan:
    """What one forward pass needs to know, fixed before it runs: the attention function and,
    through each :class:`attncoda.capture.kernels.LayerCall`, the kernels read it; what the
    pass produces goes into its :class:`attncoda.capture.stats.Recorder`. Positions are
    padded ``(batch, pos)`` coordinates.

    Attributes
    ----------
    query_real : torch.Tensor
        bool ``(batch, pos)``: real (non-padding) queries.
    offsets : torch.Tensor
        int64 ``(batch,)``: padded position of each document's first real token.
    sink : torch.Tensor or None
        bool ``(batch, pos)``: sink keys. None: the ``auto`` first pass, which only sums the
        attention each key receives.
    record : sequence of torch.Tensor
        Per document, the sorted padded query positions whose full rows are kept.
    block_size : int
        Queries per block.
    learned : bool
        Whether the learned sink (the virtual key of a layer with ``s_aux``) is in the sink
        set ``S``; otherwise it is a content key.
    method : {"exact", "fast"}
    kernels : attncoda.capture.kernels.registry.Choice or None
        ``method="fast"``: the kernel asked for, named once, resolved per layer where it runs.
    pinned : bool
        Keep the statistics in page-locked memory (a pass on CUDA): the fast kernels' are
        copied without waiting, once synchronised (:meth:`Recorder.settle`).
    past : int
        Positions already in a KV cache (a recorded pass that continues one): the fast path
        serves only the layers whose keys are the pass's own queries.
    widths : sequence of int or None
        A recorded pass (:func:`attncoda.capture.live.recording`): per document, its real
        tokens up to the end of the pass, the width of its rows. None: a capture's pass,
        one whole forward over the batch (its rows as wide as its real queries).
    """

    query_real: torch.Tensor
    offsets: torch.Tensor
    sink: torch.Tensor | None
    record: Sequence[torch.Tensor]
    block_size: int = 512
    learned: bool = False
    method: str = "exact"
    kernels: Any = None
    pinned: bool = False
    past: int = 0
    widths: Sequence[int] | None = None


#: Rows kept per document by ``record_rows="auto"`` (every row of a shorter document).
ROWS_AUTO = 128


def record_plan(lengths: Sequence[int], record_rows, seed: int, first_doc: int):
    """Per document, the sorted query positions whose full rows are kept (``record_rows`` as
    in :func:`capture`; samples seeded by ``(seed, first_doc + index)``)."""
    if record_rows is None or record_rows == "none":
        return [np.zeros(0, dtype=np.int64) for _ in lengths]
    if record_rows == "all":
        limit = None
    elif record_rows == "auto":
        limit = ROWS_AUTO
    elif isinstance(record_rows, (int, np.integer)) and not isinstance(record_rows, bool):
        if record_rows < 0:
            raise AttncodaError(
                f"record_rows must be 'auto', 'all', 'none' or a non-negative integer, "
                f"got {record_rows!r}"
            )
        limit = int(record_rows)
    else:
        raise AttncodaError(
            f"record_rows must be 'auto', 'all', 'none' or a non-negative integer, "
            f"got {record_rows!r}"
        )
    plan = []
    for index, n in enumerate(lengths):
        if limit is None or n <= limit:
            plan.append(np.arange(n, dtype=np.int64))
        else:
            rng = np.random.default_rng([seed, first_doc + index])
            plan.append(np.sort(rng.choice(n, size=limit, replace=False)).astype(np.int64))
    return plan
