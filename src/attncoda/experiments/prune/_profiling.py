"""The profiling head table prune ranks its heads by: from a capture of the profiling
windows, which the runner makes with the run's options (or, for a direct call,
:func:`attncoda.run.direct.prune_model`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda.experiments.contract import check_captured
from attncoda.experiments.prune._losses import gradient_importance, gradient_rounding

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["head_table"]


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
    ``gradient_importance`` on those windows and its ``gradient_rounding`` when
    ``with_gradient``."""
    from attncoda.capture import capture_frame
    from attncoda.experiments.profile import head_summary

    check_captured(capture, windows, "profile_windows")
    heads = head_summary(capture_frame(capture))
    if with_gradient:
        importance = gradient_importance(model, windows, batch_size=batch_size)
        at = heads["layer"].to_numpy(np.int64), heads["head"].to_numpy(np.int64)
        heads["gradient_importance"] = importance[at]
        heads["gradient_rounding"] = gradient_rounding(importance, model, windows)[at]
    return heads
