"""How prune chooses heads: its channels, orders and ablations, the head ranking of a
channel, and the split of windows into profiling and held-out ones (docs/design.md, "The
experiments", prune).

A *channel* ranks the heads:

``sink_mass``, ``sink_balance``, ``content_entropy``
    The head's mean over profiling rows with content
    (:func:`attncoda.experiments.profile.head_summary`).
``full_entropy``
    The mean row entropy ``H(p)`` (the keep-sink convention's entropy; ``content_entropy``
    ``H(q)`` is the drop-sink convention's).
``random``
    A seeded random permutation.
``gradient``
    Head importance as in Michel et al. (2019), "Are Sixteen Heads Really Better than
    One?" (:func:`attncoda.experiments.prune.gradient_importance`): a gate ``xi_h = 1``
    multiplies each head's output and
    ``I_h = sum over windows |dL_w / dxi_h|``, ``L_w`` the window's mean next-token loss
    (nats). Michel et al. also normalise the scores per layer (l2); the raw sums are used
    here so that heads of different layers are compared on one scale.

``order="high"`` prunes the highest values first, ``"low"`` the lowest (ties: lower layer,
then lower head first). Pruning the top ``k`` heads uses an ablation mode of
:func:`attncoda.capture.ablation.ablate` (``zero``, ``uniform`` or ``sink``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "ABLATIONS",
    "CHANNELS",
    "CHANNEL_COLUMNS",
    "DEFAULT_CHANNELS",
    "ORDERS",
    "check_choices",
    "check_ks",
    "head_ranking",
    "split_windows",
]

#: Every channel a head ranking may use.
CHANNELS = ("sink_mass", "sink_balance", "content_entropy", "full_entropy", "random", "gradient")
#: The channels pruned by default (``gradient`` needs a backward pass per window).
DEFAULT_CHANNELS = CHANNELS[:5]
ORDERS = ("high", "low")
ABLATIONS = ("zero", "uniform", "sink")
#: The head-table column each channel ranks by.
CHANNEL_COLUMNS = {
    "sink_mass": "sink_mass",
    "sink_balance": "sink_balance",
    "content_entropy": "content_entropy",
    "full_entropy": "entropy",
    "gradient": "gradient_importance",
}


def split_windows(windows: Sequence[Any], n_profile: int, n_eval: int) -> tuple[list, list]:
    """Profile on the first ``n_profile`` windows, evaluate on the last ``n_eval``.

    Parameters
    ----------
    windows : sequence
        Token windows (id sequences or :class:`attncoda.data.corpus.Window`).
    n_profile, n_eval : int
        Positive; ``n_profile + n_eval <= len(windows)`` so the two sets are disjoint.

    Returns
    -------
    profile, evaluation : list
    """
    for name, value in (("n_profile", n_profile), ("n_eval", n_eval)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise AttncodaError(f"{name} must be a positive integer, got {value!r}")
    if n_profile + n_eval > len(windows):
        raise AttncodaError(
            f"n_profile + n_eval = {n_profile + n_eval} windows, but only {len(windows)} are "
            f"given: profiling and evaluation windows must be disjoint"
        )
    return list(windows[:n_profile]), list(windows[len(windows) - n_eval :])


def head_ranking(
    heads_table: pd.DataFrame, channel: str, order: str, seed: int = 0
) -> pd.DataFrame:
    """Heads in pruning order for one channel.

    Parameters
    ----------
    heads_table : pandas.DataFrame
        One row per (layer, head) with the channel's column (:data:`CHANNEL_COLUMNS`), e.g.
        from :func:`attncoda.experiments.profile.head_summary`.
    channel : str
        One of :data:`CHANNELS`.
    order : {"high", "low"}
        ``"high"``: highest value pruned first; ``"low"``: lowest first. Ties go to the lower
        layer, then the lower head. For ``random`` the two orders are reverse permutations.
    seed : int
        Seeds ``random``.

    Returns
    -------
    pandas.DataFrame
        Columns ``rank`` (0 = pruned first), ``layer``, ``head``, ``value`` (the channel's
        value; for ``random`` the random key).

    Raises
    ------
    AttncodaError
        Unknown channel or order, a table without the channel's column, or a head whose value
        is missing.
    """
    import pandas as pd

    if channel not in CHANNELS:
        raise AttncodaError(f"unknown channel {channel!r}: use one of {', '.join(CHANNELS)}")
    if order not in ORDERS:
        raise AttncodaError(
            f"unknown order {order!r}: use 'high' (prune the highest values first) or 'low'"
        )
    for column in ("layer", "head"):
        if column not in heads_table.columns:
            raise AttncodaError(f"the heads table has no column {column!r}")
    layer = heads_table["layer"].to_numpy(np.int64)
    head = heads_table["head"].to_numpy(np.int64)
    if channel == "random":
        value = np.random.default_rng(seed).permutation(len(layer)).astype(np.float64)
    else:
        column = CHANNEL_COLUMNS[channel]
        if column not in heads_table.columns:
            hint = " (compute it with gradient_importance)" if channel == "gradient" else ""
            raise AttncodaError(
                f"the heads table has no column {column!r} for channel {channel!r}{hint}"
            )
        value = heads_table[column].astype("Float64").fillna(np.nan).to_numpy(np.float64)
        missing = ~np.isfinite(value)
        if missing.any():
            pairs = zip(layer[missing], head[missing], strict=True)
            which = ", ".join(f"{a}.{b}" for a, b in pairs)
            raise AttncodaError(f"channel {channel!r} has no finite value for heads {which}")
    key = -value if order == "high" else value
    perm = np.lexsort((head, layer, key))
    return pd.DataFrame(
        {
            "rank": np.arange(len(perm), dtype=np.int64),
            "layer": layer[perm],
            "head": head[perm],
            "value": value[perm],
        }
    )


def check_choices(values: object, name: str, allowed: Sequence[str] | None) -> list:
    """``values`` (one name or several) as a list without repeats, each one of ``allowed``."""
    items = [values] if isinstance(values, str) else list(values)  # type: ignore[call-overload]
    if not items:
        raise AttncodaError(f"{name} is empty: give at least one")
    if allowed is not None:
        for item in items:
            if item not in allowed:
                singular = name.removesuffix("s")
                raise AttncodaError(f"unknown {singular} {item!r}: use one of {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def check_ks(ks: object, n_total: int, model: str) -> list[int]:
    """``ks`` (one or several) sorted without repeats, each from 1 to ``n_total`` heads."""
    items = [ks] if isinstance(ks, int) else list(ks)  # type: ignore[call-overload]
    if not items:
        raise AttncodaError("ks is empty: give at least one")
    for k in items:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise AttncodaError(f"k must be a positive integer, got {k!r}")
        if k > n_total:
            raise AttncodaError(f"k={k} is more than the {n_total} heads of {model}")
    return sorted({int(k) for k in items})
