"""The prune experiment's declaration: its settings, when it applies, and its ``run`` over
the runner's inputs (docs/design.md, "The experiments", prune). The computation is
:func:`attncoda.experiments.prune.prune` (:mod:`attncoda.experiments.prune._grid`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Command, Experiment, Inputs, Tables, View, setting
from attncoda.experiments.prune._figure import draw
from attncoda.experiments.prune._grid import prune
from attncoda.experiments.prune._headline import HEADLINE
from attncoda.experiments.prune._held import HELD
from attncoda.experiments.prune._ranking import (
    ABLATIONS,
    CHANNELS,
    DEFAULT_CHANNELS,
    ORDERS,
    split_windows,
)
from attncoda.experiments.prune._section import prune_section
from attncoda.experiments.prune._summary import summary
from attncoda.models.spec import parse_spec

__all__ = ["EXPERIMENT", "Settings", "fitting_ks", "profiling_windows", "run", "skip"]


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
        "numbers of heads pruned (those above the model's heads are left out; where none "
        "fits, half its heads)",
        at_least=1,
        item="head count",
    )
    profile_docs: int = setting(8, "windows that profile the heads", at_least=1)
    eval_docs: int = setting(
        16,
        "held-out windows whose perplexity is measured (a ratio's interval needs 10)",
        at_least=1,
    )
    max_tokens: int = setting(128, "tokens per window (the window length)", at_least=1)
    n_boot: int = setting(
        1000, "paired bootstrap resamples of the eval windows for each ratio", at_least=1
    )

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
    """Prune the unit's model (:func:`prune`) on the runner's windows, ranking the heads by
    the runner's capture of the profiling windows (made with the run's options: prune
    captures nothing itself): frames ``prune`` and ``prune_heads``; the summary is
    :attr:`PruneResult.summary`."""
    model, tokenizer, info = inputs.loaded
    reason = skip(info)
    if reason is not None:
        raise AttncodaError(reason)
    ks, note = fitting_ks(settings.ks, info.n_layers * info.n_heads, inputs.model)
    profile_windows, eval_windows = split_windows(
        inputs.windows, settings.profile_docs, settings.eval_docs
    )
    result = prune(
        model,
        tokenizer,
        profile_windows,
        eval_windows,
        channels=tuple(settings.channels),
        orders=tuple(settings.orders),
        ablations=tuple(settings.ablations),
        ks=ks,
        sink=inputs.sink,
        seed=inputs.seed,
        n_boot=settings.n_boot,
        model_name=inputs.model,
        capture=inputs.capture,
    )
    summary = {**result.summary, **({"note": note} if note else {})}
    return Tables(frames={"prune": result.table, "prune_heads": result.heads}, summary=summary)


def fitting_ks(ks: Sequence[int], n_total: int, model: str) -> tuple[tuple[int, ...], str]:
    """The numbers of heads pruned on a model of ``n_total`` heads, and a note when they are
    not ``ks``.

    The ks of at most ``n_total`` heads are kept (a scale's ks are chosen for the models of
    its run; a tiny model has fewer heads). Where none fits, one k is derived from the head
    count: half the heads, at least one, so every causal model is pruned at some k.

    Parameters
    ----------
    ks : sequence of int
        The settings' numbers of heads.
    n_total : int
        The model's heads over all layers (``n_layers * n_heads``).
    model : str
        The model's name, for the note.

    Returns
    -------
    ks : tuple of int
        The ks pruned, sorted.
    note : str
        Why they differ from ``ks`` (``""`` when they do not).

    Examples
    --------
    >>> fitting_ks((16, 64), 8, "tiny")
    ((4,), 'ks 16, 64 are more than the 8 heads of tiny: k 4 (half its heads) pruned instead')
    >>> fitting_ks((4, 16, 64), 16, "small")
    ((4, 16), 'k 64 is more than the 16 heads of small: left out')
    >>> fitting_ks((4, 16, 64), 72, "gemma3")
    ((4, 16, 64), '')
    """
    wanted = sorted({int(k) for k in ks})
    kept = [k for k in wanted if k <= n_total]
    over = [k for k in wanted if k > n_total]
    if not over:
        return tuple(kept), ""
    said = (
        f"k {over[0]} is" if len(over) == 1 else f"ks {', '.join(str(k) for k in over)} are"
    ) + f" more than the {n_total} heads of {model}"
    if kept:
        return tuple(kept), f"{said}: left out"
    derived = max(1, n_total // 2)
    return (derived,), f"{said}: k {derived} (half its heads) pruned instead"


def profiling_windows(windows: Sequence[Any], settings: Settings) -> list:
    """The windows the runner captures for prune: its profiling windows, the first
    ``profile_docs`` of the ``docs`` it provides (:func:`split_windows`)."""
    return split_windows(windows, settings.profile_docs, settings.eval_docs)[0]


EXPERIMENT = Experiment(
    name="prune",
    needs=("model", "windows", "capture"),
    after=(),
    cost=120.0,
    settings=Settings,
    run=run,
    tables=("prune", "prune_heads"),
    held=HELD,
    skip=skip,
    captures=profiling_windows,
    view=View(
        title="Prune: which channel is safe to prune heads by",
        needs=("prune",),
        section=prune_section,
        figure_tables=("prune",),
        figure=draw,
        headline=HEADLINE,
    ),
    command=Command(
        help="prune heads by a channel, measure held-out perplexity",
        sources="model",
        summary=summary,
        doc="Heads pruned by a channel, held-out perplexity per k (model specs only).",
        flags={
            "ks": ("--ks", "--k"),
            "orders": ("--orders", "--order"),
            "ablations": ("--ablations", "--ablation"),
        },
    ),
)
