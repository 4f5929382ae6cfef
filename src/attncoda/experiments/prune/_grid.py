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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda._progress import steps
from attncoda.data.windows import windows_hash
from attncoda.experiments.contract import check_n_boot
from attncoda.experiments.prune._fragility import ranking_rounding
from attncoda.experiments.prune._interval import window_resamples
from attncoda.experiments.prune._losses import check_batch_size, check_windows
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
from attncoda.experiments.prune._rows import COLUMNS, Evaluations, Unpruned, prune_table

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "PruneResult", "prune"]


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


def _label(window: Any, index: int) -> str:
    doc = getattr(window, "doc_id", None)
    return f"{doc}#{window.index}" if doc is not None else f"#{index}"


def prune(  # params: the public call's keywords, each documented below
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
    from attncoda.capture.ablation import head_counts

    n_boot = check_n_boot(n_boot, "windows")
    channels = check_choices(channels, "channels", CHANNELS)
    orders = check_choices(orders, "orders", ORDERS)
    ablations = check_choices(ablations, "ablations", ABLATIONS)
    batch_size = check_batch_size(batch_size)
    profile_ids, eval_ids = _held_out(profile_windows, eval_windows)
    n_layers, n_heads = head_counts(model)
    name = model_name or getattr(model.config, "name_or_path", "") or type(model).__name__
    ks = check_ks(ks, n_layers * n_heads, name)
    heads = head_table(
        capture, model, profile_ids, batch_size=batch_size, with_gradient="gradient" in channels
    )
    rankings, keys = _rankings(heads, channels, orders, seed)
    evaluate = Evaluations(model, eval_ids, batch_size, logit_rows(model))
    jobs = [(a, c, o, k) for a in ablations for c in channels for o in orders for k in ks]
    iterator = steps(jobs, desc=f"prune {name}", unit="eval", force=True if progress else None)
    base = Unpruned.of(name, evaluate("zero", []), window_resamples(len(eval_ids), n_boot, seed))
    records = [base.record()]
    for ablation, channel, order, k in iterator:
        ranking = rankings[(channel, order)]
        chosen = list(zip(ranking["layer"][:k].tolist(), ranking["head"][:k].tolist(), strict=True))
        job = (ablation, channel, order, k)
        records.append(base.pruned(job, chosen, evaluate(ablation, chosen), keys[(channel, order)]))
    summary = {
        "model": name,
        "n_layers": n_layers,
        "n_heads": n_heads,
        **base.summary(),
        "sink": str(sink),
        "method": capture.method,
        "kernel": capture.kernel,
        "seed": seed,
        **dict(channels=channels, orders=orders, ablations=ablations, ks=ks),
        "n_evaluations": len(evaluate.cache),
        **_windows(profile_windows, eval_windows, profile_ids, eval_ids),
        **base.measured_by(),
    }
    return PruneResult(table=prune_table(records), heads=heads, summary=summary)


def _windows(
    profile: Sequence[Any], evaluation: Sequence[Any], profile_ids: list, eval_ids: list
) -> dict[str, Any]:
    """Which windows profiled and which evaluated, for the summary: their labels (as
    given) and their token ids' hashes."""
    return {
        "profile_windows": [_label(w, i) for i, w in enumerate(profile)],
        "eval_windows": [_label(w, i) for i, w in enumerate(evaluation)],
        "profile_windows_sha256": windows_hash(profile_ids),
        "eval_windows_sha256": windows_hash(eval_ids),
    }


def _held_out(profile: Sequence[Any], evaluation: Sequence[Any]) -> tuple[list, list]:
    """The token ids of the profiling and of the evaluation windows, checked: no evaluation
    window equals a profiling one."""
    profile_ids = check_windows(profile, "profile_windows")
    eval_ids = check_windows(evaluation, "eval_windows")
    seen = {w.tobytes(): i for i, w in enumerate(profile_ids)}
    for j, window in enumerate(eval_ids):
        if window.tobytes() in seen:
            raise AttncodaError(
                f"eval window {j} equals profile window {seen[window.tobytes()]}: evaluate on "
                f"held-out windows, disjoint from the profiling ones"
            )
    return profile_ids, eval_ids


def _rankings(
    heads: pd.DataFrame, channels: Sequence[str], orders: Sequence[str], seed: int
) -> tuple[dict, dict]:
    """Each (channel, order)'s ranking of the heads (:func:`head_ranking`), and its keys in
    pruning order with their rounding: what a cut at k is decided by."""
    rankings = {(c, o): head_ranking(heads, c, o, seed) for c in channels for o in orders}
    keys = {
        (channel, order): (
            ranking["value"].to_numpy(np.float64) * (-1.0 if order == "high" else 1.0),
            ranking_rounding(heads, ranking, channel),
        )
        for (channel, order), ranking in rankings.items()
    }
    return rankings, keys
