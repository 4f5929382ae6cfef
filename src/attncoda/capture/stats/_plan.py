"""The row-sampling plan: which query rows of each document a capture keeps in full."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attncoda._errors import AttncodaError

__all__ = ["ROWS_AUTO", "record_plan"]

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
