"""The profiling head table prune ranks its heads by: from a capture of the profiling
windows, which the runner makes with the run's options (or :func:`profile_capture` makes
for a direct call of :func:`attncoda.experiments.prune.prune`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda.experiments.contract import check_captured
from attncoda.experiments.prune._losses import gradient_importance

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["head_table", "profile_capture"]


def profile_capture(
    model: Any,
    tokenizer: Any,
    windows: Sequence[np.ndarray],
    *,
    sink: str | int | Sequence[int],
    method: str,
    kernel: str,
    seed: int,
    batch_size: int,
) -> Any:
    """The capture of the profiling ``windows`` by ``model`` (statistics of every row, no
    full rows), by ``method`` and ``kernel`` with ``sink`` and ``seed``: what a direct call
    of prune captures when it is handed no capture (a run hands it the runner's)."""
    from attncoda.capture import capture_windows

    return capture_windows(
        model,
        list(windows),
        batch_size=batch_size,
        sink=sink,
        tokenizer=tokenizer,
        record_rows="none",
        seed=seed,
        method=method,
        kernel=kernel,
    )


def head_table(
    capture: Any,
    model: Any,
    windows: list[np.ndarray],
    *,
    batch_size: int,
    with_gradient: bool,
) -> pd.DataFrame:
    """The profiling head table of ``capture`` (which must have read ``windows``, the
    profiling windows): :func:`attncoda.experiments.profile.head_summary`, with
    ``gradient_importance`` on those windows when ``with_gradient``."""
    from attncoda.capture import capture_frame
    from attncoda.experiments.profile import head_summary

    check_captured(capture, windows, "profile_windows")
    heads = head_summary(capture_frame(capture))
    if with_gradient:
        importance = gradient_importance(model, windows, batch_size=batch_size)
        heads["gradient_importance"] = importance[
            heads["layer"].to_numpy(np.int64), heads["head"].to_numpy(np.int64)
        ]
    return heads
