"""Prune attention heads ranked by a channel and measure held-out perplexity
(docs/design.md, "The experiments", prune).

Heads are profiled on one set of windows and pruned models are evaluated on another,
disjoint set. A *channel* ranks the heads (the channels, orders and ablations are those of
:mod:`attncoda.experiments.prune._ranking`), and the top ``k`` are ablated.

Perplexity: each evaluation window's loss is the mean negative log-likelihood of its
predicted tokens (tokens ``1..n-1`` given their prefix; nats), as transformers' ``labels=``
loss computes it for one window; perplexity is ``exp`` of the mean of those window losses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.data.windows import windows_hash
from attncoda.experiments.contract import Experiment, Inputs, Tables, setting
from attncoda.experiments.prune._ranking import (
    ABLATIONS,
    CHANNELS,
    DEFAULT_CHANNELS,
    ORDERS,
    check_choices,
    check_ks,
    head_ranking,
    split_windows,
)
from attncoda.models.spec import parse_spec

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COLUMNS",
    "EXPERIMENT",
    "PruneResult",
    "Settings",
    "gradient_importance",
    "prune",
    "window_losses",
]

#: Columns of :attr:`PruneResult.table` (``prune.parquet``).
COLUMNS = (
    "model",
    "channel",
    "order",
    "ablation",
    "k",
    "perplexity",
    "ratio",
    "mean_nll",
    "heads",
)


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
        labels in pruning order.
    heads : pandas.DataFrame
        ``prune_heads.parquet``: the profiling head table of
        :func:`attncoda.experiments.profile.head_summary` (means over rows with content),
        with ``gradient_importance`` when the gradient channel was asked for.
    summary : dict
        JSON-ready: model, baseline perplexity, which windows profiled and which evaluated
        (labels and token hashes), sink, seed and the grid.
    """

    table: pd.DataFrame
    heads: pd.DataFrame
    summary: dict[str, Any]


def _ids(window: Any) -> np.ndarray:
    return np.asarray(getattr(window, "input_ids", window), dtype=np.int64)


def _label(window: Any, index: int) -> str:
    doc = getattr(window, "doc_id", None)
    return f"{doc}#{window.index}" if doc is not None else f"#{index}"


def _check_windows(windows: object, name: str) -> list[np.ndarray]:
    if isinstance(windows, (str, bytes)) or not isinstance(windows, Sequence) or not windows:
        raise AttncodaError(f"{name} is empty: give at least one window of token ids")
    out = []
    for index, window in enumerate(windows):
        ids = _ids(window)
        if ids.ndim != 1 or ids.size < 2:
            raise AttncodaError(
                f"{name} window {index} has {ids.size} tokens: a window needs at least 2 (one "
                f"predicted token)"
            )
        out.append(ids)
    return out


def _check_batch_size(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise AttncodaError(f"batch_size must be a positive integer, got {batch_size!r}")
    return batch_size


def window_losses(model, windows: Sequence[Any], *, batch_size: int = 8) -> np.ndarray:
    """Mean next-token NLL of each window, in nats (the current ablation applies).

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal language model in eval mode (run inside :func:`ablate` to prune).
    windows : sequence
        Token windows of at least 2 tokens (padded on the right, positions from 0).
    batch_size : int

    Returns
    -------
    ndarray of float64, shape (window,)
        ``-mean_{t=1}^{n-1} log p(x_t | x_<t)``; perplexity is ``exp(mean)`` of it.
    """
    import torch

    from attncoda.capture import forward_kwargs, next_token_nll, pad
    from attncoda.models.placement import input_device

    batch_size = _check_batch_size(batch_size)
    ids_list = _check_windows(windows, "windows")
    device = input_device(model)
    out = []
    with torch.no_grad():
        for start in range(0, len(ids_list), batch_size):
            ids, mask = pad(ids_list[start : start + batch_size], 0, left=False)
            ids, mask = ids.to(device), mask.to(device)
            result = model(**forward_kwargs(model, ids, mask))
            out.append(next_token_nll(result.logits, ids, mask).double().cpu().numpy())
    return np.concatenate(out)


def gradient_importance(model, windows: Sequence[Any], *, batch_size: int = 8) -> np.ndarray:
    """Head importance of Michel et al. (2019): ``sum_w |dL_w / dxi_{l,h}|`` at ``xi = 1``.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A causal LM in eval mode that :func:`attncoda.capture.routing.routed` can route.
    windows : sequence
        Profiling windows; ``L_w`` is each window's mean next-token NLL (nats).
    batch_size : int

    Returns
    -------
    ndarray of float64, shape (layer, head)
        Summed absolute gate gradients (one gate per window and head, so the absolute value
        is taken per window, as in Michel et al.). Parameters get no gradient.
    """
    import torch

    from attncoda.capture import forward_kwargs, next_token_nll, pad
    from attncoda.capture.ablation import head_counts, head_gates
    from attncoda.models.placement import input_device

    batch_size = _check_batch_size(batch_size)
    ids_list = _check_windows(windows, "windows")
    device = input_device(model)
    n_layers, n_heads = head_counts(model)
    total = torch.zeros((n_layers, n_heads), dtype=torch.float64)
    frozen = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in frozen:
            p.requires_grad_(False)
        with torch.enable_grad():
            for start in range(0, len(ids_list), batch_size):
                ids, mask = pad(ids_list[start : start + batch_size], 0, left=False)
                ids, mask = ids.to(device), mask.to(device)
                gates = torch.ones(
                    (ids.shape[0], n_layers, n_heads), device=ids.device, requires_grad=True
                )
                with head_gates(model, gates):
                    logits = model(**forward_kwargs(model, ids, mask)).logits
                (grad,) = torch.autograd.grad(next_token_nll(logits, ids, mask).sum(), gates)
                total += grad.abs().sum(0).double().cpu()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return total.numpy()


def _profile(model, tokenizer, windows, sink, batch_size, with_gradient):
    from attncoda.capture import capture_frame, capture_windows
    from attncoda.experiments.profile import head_summary

    cap = capture_windows(
        model, windows, batch_size=batch_size, sink=sink, tokenizer=tokenizer, record_rows="none"
    )
    heads = head_summary(capture_frame(cap))
    if with_gradient:
        importance = gradient_importance(model, windows, batch_size=batch_size)
        heads["gradient_importance"] = importance[
            heads["layer"].to_numpy(np.int64), heads["head"].to_numpy(np.int64)
        ]
    return heads


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
    batch_size: int = 8,
    model_name: str | None = None,
    progress: bool = False,
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
        Sink spec for the profiling statistics (and the ``sink_mass``/``sink_balance``
        channels); the ``sink`` ablation always redirects to the first real token.
    seed : int
        Seeds the ``random`` channel.
    batch_size : int
        Windows per forward pass.
    model_name : str, optional
        The ``model`` column; default ``config.name_or_path`` or the class name.
    progress : bool
        Show a progress bar over evaluations.

    Returns
    -------
    PruneResult

    Raises
    ------
    AttncodaError
        Empty or unknown channels, orders or ablations; a ``k`` that is not a positive
        integer or exceeds the number of heads; overlapping windows; and any error of
        capture or ablation.
    """
    from attncoda.capture.ablation import ablate, head_counts, head_labels

    channels = check_choices(channels, "channels", CHANNELS)
    orders = check_choices(orders, "orders", ORDERS)
    ablations = check_choices(ablations, "ablations", ABLATIONS)
    batch_size = _check_batch_size(batch_size)
    profile_ids = _check_windows(profile_windows, "profile_windows")
    eval_ids = _check_windows(eval_windows, "eval_windows")
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
    heads = _profile(model, tokenizer, profile_ids, sink, batch_size, "gradient" in channels)
    rankings = {
        (channel, order): head_ranking(heads, channel, order, seed)
        for channel in channels
        for order in orders
    }
    cache: dict[tuple[str, tuple[tuple[int, int], ...]], float] = {}

    def mean_nll(ablation: str, chosen: list[tuple[int, int]]) -> float:
        key = (ablation, tuple(sorted(chosen)))
        if key not in cache:
            plan: dict[int, list[int]] = {}
            for layer, head in chosen:
                plan.setdefault(layer, []).append(head)
            with ablate(model, plan, ablation):
                losses = window_losses(model, eval_ids, batch_size=batch_size)
            cache[key] = float(np.mean(losses))
        return cache[key]

    jobs = [(a, c, o, k) for a in ablations for c in channels for o in orders for k in ks]
    iterator: Any = jobs
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(jobs, desc="prune", unit="eval")
    base = mean_nll("zero", [])
    records = [
        {
            "model": name,
            "channel": "none",
            "order": "none",
            "ablation": "none",
            "k": 0,
            "perplexity": math.exp(base),
            "ratio": 1.0,
            "mean_nll": base,
            "heads": "",
        }
    ]
    for ablation, channel, order, k in iterator:
        ranking = rankings[(channel, order)]
        chosen = list(zip(ranking["layer"][:k].tolist(), ranking["head"][:k].tolist(), strict=True))
        nll = mean_nll(ablation, chosen)
        records.append(
            {
                "model": name,
                "channel": channel,
                "order": order,
                "ablation": ablation,
                "k": k,
                "perplexity": math.exp(nll),
                "ratio": math.exp(nll - base),
                "mean_nll": nll,
                "heads": head_labels(chosen),
            }
        )
    import pandas as pd

    table = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    table["k"] = table["k"].astype(np.int64)
    summary = {
        "model": name,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "baseline_perplexity": math.exp(base),
        "baseline_mean_nll": base,
        "sink": str(sink),
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
    }
    return PruneResult(table=table, heads=heads, summary=summary)


@dataclass(frozen=True)
class Settings:
    """Settings of the prune experiment. The runner provides ``docs`` windows of
    ``max_tokens`` tokens: the first ``profile_docs`` profile, the last ``eval_docs`` evaluate."""

    channels: tuple[str, ...] = setting(
        DEFAULT_CHANNELS,
        f"channels that rank the heads ({', '.join(CHANNELS)})",
        choices=CHANNELS,
        item="channel",
    )
    orders: tuple[str, ...] = setting(
        ORDERS,
        "prune the highest values first, the lowest, or both",
        choices=ORDERS,
        item="order",
    )
    ablations: tuple[str, ...] = setting(
        ("zero",),
        f"how a pruned head is ablated ({', '.join(ABLATIONS)})",
        choices=ABLATIONS,
        item="ablation",
    )
    ks: tuple[int, ...] = setting(
        (4, 16, 64),
        "numbers of heads pruned (those above the model's heads are left out)",
        at_least=1,
        item="head count",
    )
    profile_docs: int = setting(8, "windows that profile the heads", at_least=1)
    eval_docs: int = setting(4, "held-out windows whose perplexity is measured", at_least=1)
    max_tokens: int = setting(128, "tokens per window (the window length)", at_least=1)

    @property
    def docs(self) -> int:
        """The windows the runner provides: ``profile_docs + eval_docs``."""
        return self.profile_docs + self.eval_docs


def skip(info: Any) -> str | None:
    """Why prune does not apply to a model (its ``ModelInfo``): perplexity needs a causal
    language model. ``None`` for a causal one."""
    if info.causal:
        return None
    return (
        f"prune measures perplexity, which needs a causal language model; "
        f"{parse_spec(info.spec).name} is {info.architecture}"
    )


def run(inputs: Inputs, settings: Settings) -> Tables:
    """Prune the unit's model (:func:`prune`) on the runner's windows: frames ``prune`` and
    ``prune_heads``; the summary is :attr:`PruneResult.summary`."""
    model, tokenizer, info = inputs.need("model")
    reason = skip(info)
    if reason is not None:
        raise AttncodaError(reason)
    profile_windows, eval_windows = split_windows(
        inputs.need("windows"), settings.profile_docs, settings.eval_docs
    )
    result = prune(
        model,
        tokenizer,
        profile_windows,
        eval_windows,
        channels=tuple(settings.channels),
        orders=tuple(settings.orders),
        ablations=tuple(settings.ablations),
        ks=tuple(k for k in settings.ks if k <= info.n_layers * info.n_heads),
        sink=inputs.sink,
        seed=inputs.seed,
        model_name=inputs.model,
    )
    return Tables(
        frames={"prune": result.table, "prune_heads": result.heads}, summary=result.summary
    )


EXPERIMENT = Experiment(
    name="prune",
    needs=("model", "windows"),
    after=(),
    settings=Settings,
    run=run,
    tables=("prune", "prune_heads"),
    skip=skip,
)
