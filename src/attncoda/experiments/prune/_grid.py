"""Prune attention heads ranked by a channel and measure held-out perplexity
(docs/design.md, "The experiments", prune).

Heads are profiled on one set of windows and pruned models are evaluated on another,
disjoint set. The profiling statistics are a capture of the profiling windows: in a run the
runner's, made with the run's options (method, kernel, sink, seed, dtype, device); for a
direct call, :func:`attncoda.run.direct.prune_model` makes one. Prune captures nothing. A
*channel* ranks the heads (the channels, orders and ablations are those of
:mod:`attncoda.experiments.prune._ranking`), and the top ``k`` are ablated.

Perplexity: each evaluation window's loss is the mean negative log-likelihood of its
predicted tokens (tokens ``1..n-1`` given their prefix; nats), as transformers' ``labels=``
loss computes it for one window (its log-sum-exp in float64 from the float32 logits,
:mod:`attncoda.experiments.prune._nll`); perplexity is ``exp`` of the mean of those window
losses. Each ratio to the unpruned model has a paired bootstrap interval over the
evaluation windows (:mod:`attncoda.experiments.prune._interval`), from at least
:data:`~attncoda.experiments.contract.MIN_BOOTSTRAP_N` windows. Each row states how far
rounding can move its NLL and ratio, and how many heads lie within rounding of its cut
(:mod:`attncoda.experiments.prune._fragility`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda._progress import steps
from attncoda.data.windows import windows_hash
from attncoda.experiments.contract import check_n_boot
from attncoda.experiments.prune._fragility import ChosenHeads, fragile_heads, ranking_rounding
from attncoda.experiments.prune._interval import BASELINE_NOTE, ratio_interval, window_resamples
from attncoda.experiments.prune._losses import (
    WindowNLL,
    check_batch_size,
    check_windows,
    window_nll,
)
from attncoda.experiments.prune._nll import logit_rows
from attncoda.experiments.prune._profiling import head_table
from attncoda.experiments.prune._ranking import (
    ABLATIONS,
    CHANNELS,
    DEFAULT_CHANNELS,
    ORDERS,
    check_choices,
    check_ks,
    head_ranking,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "PruneResult", "prune"]

#: Columns of :attr:`PruneResult.table` (``prune.parquet``).
COLUMNS = (
    "model",
    "channel",
    "order",
    "ablation",
    "k",
    "perplexity",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "ci_method",
    "n_windows",
    "n_boot",
    "ci_note",
    "mean_nll",
    "nll_rounding",
    "ratio_rounding",
    "heads",
    "n_fragile_heads",
    "heads_edge",
    "order_edge",
)
_INTERVAL = COLUMNS[COLUMNS.index("ratio_ci_low") : COLUMNS.index("ci_note") + 1]


@dataclass(frozen=True, eq=False)
class PruneResult:
    """Perplexity of pruned models, and what the rankings were made from.

    Attributes
    ----------
    table : pandas.DataFrame
        ``prune.parquet``, columns :data:`COLUMNS`: one row per (channel, order, ablation,
        k) and one baseline row (``channel``, ``order``, ``ablation`` = ``"none"``, ``k =
        0``). ``perplexity`` on the evaluation windows, ``ratio`` = perplexity / baseline
        perplexity, ``mean_nll`` its log (nats), ``heads`` the pruned heads as ``"L.H"``
        labels in pruning order. ``ratio_ci_low``, ``ratio_ci_high``: the 2.5 and 97.5
        percentiles of the ratio over ``n_boot`` paired resamples of the ``n_windows``
        evaluation windows (``ci_method`` = ``"paired percentile bootstrap over windows"``,
        :mod:`attncoda.experiments.prune._interval`); with fewer than 10 windows, and on the
        baseline row, NaN with ``ci_method = ""``, ``n_boot = 0`` and ``ci_note`` saying
        why. What rounding can move (docs/design.md, "The same evidence, by one rule"):
        ``nll_rounding`` (float64, nats) is the largest bound over the evaluation windows of
        how far float32 rounding of the language-model head's product and of the
        log-sum-exp moves a window's mean NLL (:mod:`attncoda.experiments.prune._nll`), so it
        bounds ``mean_nll`` and every resample's weighted mean of the windows' losses;
        ``ratio_rounding`` (float64, nats) is the pruned row's plus the unpruned row's, the
        bound of ``log ratio`` and of the log of each interval end (0 on the baseline row,
        whose ratio is 1 by definition). The layers before the head are not covered.
        ``n_fragile_heads`` (int64): the heads whose channel value lies within rounding of
        the cut between the k-th and the (k+1)-th head of the ranking (chosen ones that may
        fall out, and left-out ones that may come in:
        :mod:`attncoda.experiments.prune._fragility`); ``heads_edge`` (bool): it is not 0,
        so another machine may prune another set, and every perplexity and ratio of the row
        may differ; ``order_edge`` (bool): the order of ``heads`` may differ (the set on the
        edge, or two chosen heads within rounding of each other). 0 and False on the
        baseline row and for ``random`` (its keys are not rounded).
    heads : pandas.DataFrame
        ``prune_heads.parquet``: the profiling head table of
        :func:`attncoda.experiments.profile.head_summary` (means over rows with content),
        with ``gradient_importance`` and its ``gradient_rounding``
        (:func:`attncoda.experiments.prune.gradient_rounding`) when the gradient channel was
        asked for.
    summary : dict
        JSON-ready: model, baseline perplexity, which windows profiled and which evaluated
        (labels and token hashes), sink, the profiling capture's ``method`` and ``kernel``,
        seed and the grid.
    """

    table: pd.DataFrame
    heads: pd.DataFrame
    summary: dict[str, Any]


def _fragility(chosen: ChosenHeads) -> dict[str, Any]:
    return {
        "n_fragile_heads": chosen.n_fragile,
        "heads_edge": chosen.edge,
        "order_edge": chosen.order_edge,
    }


def _label(window: Any, index: int) -> str:
    doc = getattr(window, "doc_id", None)
    return f"{doc}#{window.index}" if doc is not None else f"#{index}"


def prune(
    model,
    tokenizer,
    profile_windows: Sequence[Any],
    eval_windows: Sequence[Any],
    *,
    channels: Sequence[str] = DEFAULT_CHANNELS,
    orders: Sequence[str] = ORDERS,
    ablations: Sequence[str] = ("zero",),
    ks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    sink: str | int | Sequence[int] = "first",
    seed: int = 0,
    n_boot: int = 1000,
    batch_size: int = 8,
    model_name: str | None = None,
    progress: bool = False,
    capture: Any,
) -> PruneResult:
    """Rank heads by each channel on the profiling windows, prune the top ``k``, and measure
    perplexity on the held-out evaluation windows.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal language model in eval mode whose attention can be routed.
    tokenizer : tokenizer or None
        For token sink specs only.
    profile_windows, eval_windows : sequence
        Token windows (id sequences or :class:`attncoda.data.corpus.Window`), at least 2
        tokens each; no evaluation window may equal a profiling window
        (:func:`split_windows` makes such a pair).
    channels : sequence of str
        From :data:`CHANNELS`.
    orders : sequence of {"high", "low"}
    ablations : sequence of {"zero", "uniform", "sink"}
    ks : sequence of int
        Heads pruned, each from 1 to the number of heads.
    sink : str, int or sequence of int
        Sink spec of the profiling statistics (and the ``sink_mass``/``sink_balance``
        channels): the one ``capture`` was made with (recorded); the ``sink`` ablation
        always redirects to the first real token.
    seed : int
        Seeds the ``random`` channel and the bootstrap's resamples.
    n_boot : int
        Paired bootstrap resamples of the evaluation windows for the interval of each ratio
        (``>= 1``; drawn only from 10 windows up, docs/design.md, "Intervals").
    batch_size : int
        Windows per forward pass.
    model_name : str, optional
        The ``model`` column; default ``config.name_or_path`` or the class name.
    progress : bool
        Show progress over evaluations (a bar on a terminal, a line every 10 s elsewhere);
        ``False``: only inside a run that shows progress.
    capture : Capture
        The capture of ``profile_windows`` (in their order) by ``model``, statistics of
        every row: in a run, the runner's, made with the run's options (method, kernel,
        sink, seed, dtype, device); in a direct call, :func:`attncoda.run.direct.prune_model`
        makes it. Prune captures nothing itself.

    Returns
    -------
    PruneResult

    Raises
    ------
    AttncodaError
        Empty or unknown channels, orders or ablations; a ``k`` that is not a positive
        integer or exceeds the number of heads; ``n_boot < 1``; overlapping windows; a
        ``capture`` that did not read ``profile_windows``; and any error of ablation.
    """
    from attncoda.capture.ablation import ablate, head_counts, head_labels

    n_boot = check_n_boot(n_boot, "windows")
    channels = check_choices(channels, "channels", CHANNELS)
    orders = check_choices(orders, "orders", ORDERS)
    ablations = check_choices(ablations, "ablations", ABLATIONS)
    batch_size = check_batch_size(batch_size)
    profile_ids = check_windows(profile_windows, "profile_windows")
    eval_ids = check_windows(eval_windows, "eval_windows")
    seen = {w.tobytes(): i for i, w in enumerate(profile_ids)}
    for j, window in enumerate(eval_ids):
        if window.tobytes() in seen:
            raise AttncodaError(
                f"eval window {j} equals profile window {seen[window.tobytes()]}: evaluate on "
                f"held-out windows, disjoint from the profiling ones"
            )
    n_layers, n_heads = head_counts(model)
    name = model_name or getattr(model.config, "name_or_path", "") or type(model).__name__
    ks = check_ks(ks, n_layers * n_heads, name)
    heads = head_table(
        capture, model, profile_ids, batch_size=batch_size, with_gradient="gradient" in channels
    )
    rankings = {
        (channel, order): head_ranking(heads, channel, order, seed)
        for channel in channels
        for order in orders
    }
    # Each ranking's keys in pruning order and their rounding: what a cut at k is decided by.
    keys = {
        (channel, order): (
            ranking["value"].to_numpy(np.float64) * (-1.0 if order == "high" else 1.0),
            ranking_rounding(heads, ranking, channel),
        )
        for (channel, order), ranking in rankings.items()
    }
    rows = logit_rows(model)
    cache: dict[tuple[str, tuple[tuple[int, int], ...]], WindowNLL] = {}

    def losses_of(ablation: str, chosen: list[tuple[int, int]]) -> WindowNLL:
        """Each evaluation window's mean NLL and its rounding with ``chosen`` ablated."""
        key = (ablation, tuple(sorted(chosen)))
        if key not in cache:
            plan: dict[int, list[int]] = {}
            for layer, head in chosen:
                plan.setdefault(layer, []).append(head)
            with ablate(model, plan, ablation):
                cache[key] = window_nll(model, eval_ids, batch_size=batch_size, rows=rows)
        return cache[key]

    jobs = [(a, c, o, k) for a in ablations for c in channels for o in orders for k in ks]
    iterator = steps(
        jobs, desc=f"prune {name}", unit="eval", force=True if progress else None
    )
    unpruned = losses_of("zero", [])
    base = float(np.mean(unpruned.losses))
    # The largest window bound: it bounds the mean and every resample's weighted mean.
    base_rounding = float(np.max(unpruned.rounding))
    weights = window_resamples(len(eval_ids), n_boot, seed)
    none = (math.nan, math.nan, "", len(eval_ids), 0, BASELINE_NOTE)
    undecided = ChosenHeads(0, False, False)
    records = [
        {
            "model": name,
            "channel": "none",
            "order": "none",
            "ablation": "none",
            "k": 0,
            "perplexity": math.exp(base),
            "ratio": 1.0,
            **dict(zip(_INTERVAL, none, strict=True)),
            "mean_nll": base,
            "nll_rounding": base_rounding,
            "ratio_rounding": 0.0,  # the ratio is 1 by definition
            **_fragility(undecided),
            "heads": "",
        }
    ]
    for ablation, channel, order, k in iterator:
        ranking = rankings[(channel, order)]
        chosen = list(zip(ranking["layer"][:k].tolist(), ranking["head"][:k].tolist(), strict=True))
        losses = losses_of(ablation, chosen)
        nll = float(np.mean(losses.losses))
        rounding = float(np.max(losses.rounding))
        interval = ratio_interval(losses.losses, unpruned.losses, weights)
        key, key_rounding = keys[(channel, order)]
        records.append(
            {
                "model": name,
                "channel": channel,
                "order": order,
                "ablation": ablation,
                "k": k,
                "perplexity": math.exp(nll),
                "ratio": math.exp(nll - base),
                **dict(zip(_INTERVAL, interval, strict=True)),
                "mean_nll": nll,
                "nll_rounding": rounding,
                "ratio_rounding": rounding + base_rounding,
                **_fragility(fragile_heads(key, key_rounding, k)),
                "heads": head_labels(chosen),
            }
        )
    import pandas as pd

    table = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    types = {
        "k": np.int64,
        "n_windows": np.int64,
        "n_boot": np.int64,
        "n_fragile_heads": np.int64,
        "heads_edge": bool,
        "order_edge": bool,
        "ci_method": str,
    }
    table = table.astype({**types, "ci_note": str})
    summary = {
        "model": name,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "baseline_perplexity": math.exp(base),
        "baseline_mean_nll": base,
        "baseline_nll_rounding": base_rounding,
        "sink": str(sink),
        "method": capture.method,
        "kernel": capture.kernel,
        "seed": seed,
        "channels": channels,
        "orders": orders,
        "ablations": ablations,
        "ks": ks,
        "n_evaluations": len(cache),
        "profile_windows": [_label(w, i) for i, w in enumerate(profile_windows)],
        "eval_windows": [_label(w, i) for i, w in enumerate(eval_windows)],
        "profile_windows_sha256": windows_hash(profile_ids),
        "eval_windows_sha256": windows_hash(eval_ids),
        "perplexity_definition": "exp(mean over eval windows of the window's mean next-token "
        "NLL in nats)",
        "n_windows": len(eval_ids),
        "n_boot": int(len(weights)),
        "ratio_interval": "the 2.5 and 97.5 percentiles of exp(mean NLL pruned - mean NLL "
        "unpruned) over n_boot paired resamples of the eval windows (the same draw for both "
        "models); none below 10 windows",
    }
    return PruneResult(table=table, heads=heads, summary=summary)
