"""Per-head summaries of captured row statistics (the tables of ``attncoda profile``)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    Command,
    Experiment,
    Inputs,
    RowStatistic,
    Tables,
    View,
    setting,
)
from attncoda.experiments.profile._figure import draw
from attncoda.experiments.profile._section import profile_section
from attncoda.experiments.profile._summary import summary

if TYPE_CHECKING:
    import pandas as pd

ROW_COLUMNS = (
    "doc",
    "layer",
    "head",
    "query_pos",
    "n_keys",
    "sink_mass",
    "entropy",
    "content_entropy",
    "within_sink_entropy",
    "sink_balance",
    "has_content",
)
MEANS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
#: The entropy's three additive terms (:func:`entropy_terms`).
TERMS = ("binary_term", "within_sink_term", "content_term")
#: The columns of a head table that name and count: a head, its rows, its most keys.
HEAD_KEYS = ("layer", "head", "n_rows", "n_rows_no_content", "n_keys")
#: How the head table's columns are held when two runs are compared: each mean over a
#: head's rows of float32 row statistics over at most ``n_keys`` keys (docs/design.md, "The
#: same evidence, by one rule").
HEAD_HELD = MappingProxyType(
    {
        **{column: RowStatistic() for column in (*MEANS, *TERMS, "sink_balance_magnitude")},
        "sink_balance": RowStatistic(magnitude=("sink_balance_magnitude",)),
    }
)


def entropy_terms(rows: pd.DataFrame) -> pd.DataFrame:
    """The three additive entropy terms of each row, in nats.

    ``entropy == binary_term + within_sink_term + content_term`` for rows with content:
    ``binary_term = h(s)``, ``within_sink_term = s H(p_S/s)``, ``content_term = (1-s) H(q)``.

    Parameters
    ----------
    rows : pandas.DataFrame
        A rows table (columns of :data:`ROW_COLUMNS`).

    Returns
    -------
    pandas.DataFrame
        Columns ``binary_term``, ``within_sink_term``, ``content_term``, aligned with ``rows``.
    """
    import pandas as pd

    s = rows["sink_mass"].to_numpy(dtype=np.float64)
    c = np.clip(1.0 - s, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        binary = -(np.where(s > 0, s * np.log(s), 0.0) + np.where(c > 0, c * np.log(c), 0.0))
    content = rows["content_entropy"].astype("Float64").fillna(0.0).to_numpy(np.float64)
    return pd.DataFrame(
        {
            "binary_term": binary,
            "within_sink_term": s * rows["within_sink_entropy"].to_numpy(np.float64),
            "content_term": c * content,
        },
        index=rows.index,
    )


def balance_magnitude(rows: pd.DataFrame) -> np.ndarray:
    """The magnitude each row's sink balance is computed from, in nats: what its float32
    rounding is relative to (docs/design.md, "The same evidence, by one rule").

    The balance ``b = sqrt(k m / n) (mean_S log p - mean_C log p)`` is a difference of mean
    logs, so it rounds relative to ``M = sqrt(k m / n) (mean_S |log p| + mean_C |log p|)``,
    not to ``|b|``. For a one-key sink ``mean_S |log p| = -log s``, and ``mean_C |log p| =
    b sqrt(n / m) - log s``, so ``M = b + 2 sqrt(m / n) (-log s)`` exactly, from the row's
    own statistics (``m = n - 1``). For a sink of ``k > 1`` keys the same formula takes
    ``-log s``, below ``mean_S |log p|`` (Jensen): the least magnitude, not a bound.

    Parameters
    ----------
    rows : pandas.DataFrame
        Rows with content of a rows table (:data:`ROW_COLUMNS`).

    Returns
    -------
    ndarray of float64, shape (row,)
    """
    n = rows["n_keys"].to_numpy(np.float64)
    s = np.maximum(rows["sink_mass"].to_numpy(np.float64), np.finfo(np.float64).tiny)
    b = rows["sink_balance"].astype("Float64").fillna(0.0).to_numpy(np.float64)
    m = np.maximum(n - 1.0, 0.0)
    return np.abs(b + 2.0 * np.sqrt(m / np.maximum(n, 1.0)) * -np.log(np.minimum(s, 1.0)))


def head_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, head): means over the rows that have content, and row counts.

    Parameters
    ----------
    rows : pandas.DataFrame
        A rows table: one row per (doc, layer, head, query_pos), columns of
        :data:`ROW_COLUMNS`.

    Returns
    -------
    pandas.DataFrame
        Columns ``layer, head, n_rows, n_rows_no_content, n_keys`` (the most keys a row
        of the head sees: the length of the float32 sums its statistics come from) and the
        means (over rows with content) of ``sink_mass, entropy, content_entropy,
        within_sink_entropy, sink_balance, binary_term, within_sink_term, content_term`` —
        entropies in nats; ``entropy == binary_term + within_sink_term + content_term`` up
        to rounding — and ``sink_balance_magnitude`` (:func:`balance_magnitude`, nats).
    """
    missing = [c for c in ROW_COLUMNS if c not in rows.columns]
    if missing:
        raise AttncodaError(f"rows table lacks columns {missing}; expected {list(ROW_COLUMNS)}")
    has = rows["has_content"].to_numpy(bool)
    counts = rows.groupby(["layer", "head"], sort=True).agg(
        n_rows=("has_content", "size"),
        n_rows_with_content=("has_content", "sum"),
        n_keys=("n_keys", "max"),
    )
    counts["n_rows_no_content"] = counts["n_rows"] - counts["n_rows_with_content"]
    kept = rows.loc[has, ["layer", "head", *MEANS]].copy()
    for col in MEANS:
        kept[col] = kept[col].astype(np.float64)
    kept = kept.join(entropy_terms(rows.loc[has]))
    kept["sink_balance_magnitude"] = balance_magnitude(rows.loc[has])
    means = kept.groupby(["layer", "head"], sort=True).mean()
    out = counts.drop(columns="n_rows_with_content").join(means, how="left").reset_index()
    for column in ("n_rows", "n_rows_no_content", "n_keys"):
        out[column] = out[column].astype(np.int64)
    return out[[*HEAD_KEYS, *MEANS, *TERMS, "sink_balance_magnitude"]]


@dataclass(frozen=True)
class Settings:
    """Settings of the profile experiment (the runner captures ``docs`` windows of
    ``max_tokens`` tokens for it)."""

    docs: int = setting(8, "corpus windows to capture", at_least=1)
    max_tokens: int = setting(128, "tokens per window (the window length)", at_least=1)


def run(inputs: Inputs, settings: Settings) -> Tables:
    """The per-head table ``profile_heads`` of the unit's capture (:func:`head_summary`)."""
    capture = inputs.capture
    return Tables(frames={"profile_heads": head_summary(capture.to_frame())})


def of_capture(capture: Any) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """What a notebook shows of one capture: the per-layer means of its head statistics
    (nats; :func:`layer_summary`) and ``profile_heads`` keyed as a run stores it (model
    ``"capture"``, family the capture's class), which the profile figure is drawn from."""
    from attncoda.experiments.profile._summary import layer_summary

    heads = head_summary(capture.to_frame())
    heads.insert(0, "family", type(capture).__name__)
    heads.insert(0, "revision", "-")
    heads.insert(0, "model", "capture")
    return layer_summary(heads), {"profile_heads": heads}


EXPERIMENT = Experiment(
    name="profile",
    needs=("capture",),
    after=(),
    cost=4.0,
    settings=Settings,
    run=run,
    tables=("profile_heads",),
    held={"profile_heads": HEAD_HELD},
    view=View(
        title="Profile: sink mass and the exact entropy split",
        needs=("profile_heads",),
        section=profile_section,
        figure_tables=("profile_heads",),
        figure=draw,
        of_capture=of_capture,
    ),
    command=Command(
        help="per-row and per-head sink/entropy statistics",
        sources="model?",
        summary=summary,
        doc="Sink mass, entropy and its exact split per (layer, head), in nats.",
        source_help="smollm2 | minilm | gemma3 | mpnet | qwen2.5-coder-1.5b | "
        "owner/name[@rev] | folder | file.gguf",
    ),
)
