"""The rows of ``prune.parquet`` (:data:`COLUMNS`): the unpruned model's and each pruned
one's perplexity, ratio, interval and what rounding leaves open, from the evaluation
windows' losses (docs/design.md, "The experiments", prune;
:mod:`attncoda.experiments.prune._grid` runs the grid)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda.experiments.prune._fragility import ChosenHeads, fragile_heads
from attncoda.experiments.prune._interval import BASELINE_NOTE, ratio_interval
from attncoda.experiments.prune._losses import WindowNLL, window_nll

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "Evaluations", "Unpruned", "prune_table"]

#: Columns of :attr:`PruneResult.table` (``prune.parquet``).
COLUMNS = (
    "model", "channel", "order", "ablation", "k", "perplexity", "ratio", "ratio_ci_low",
    "ratio_ci_high", "ci_method", "n_windows", "n_boot", "ci_note", "mean_nll", "nll_rounding",
    "ratio_rounding", "heads", "n_fragile_heads", "heads_edge", "order_edge",
)  # fmt: skip
_INTERVAL = COLUMNS[COLUMNS.index("ratio_ci_low") : COLUMNS.index("ci_note") + 1]


def _fragility(chosen: ChosenHeads) -> dict[str, Any]:
    """The columns of the heads on the edge of a cut (:func:`fragile_heads`)."""
    return {
        "n_fragile_heads": chosen.n_fragile,
        "heads_edge": chosen.edge,
        "order_edge": chosen.order_edge,
    }


_PERPLEXITY = "exp(mean over eval windows of the window's mean next-token NLL in nats)"
_RATIO_INTERVAL = (
    "the 2.5 and 97.5 percentiles of exp(mean NLL pruned - mean NLL unpruned) over n_boot "
    "paired resamples of the eval windows (the same draw for both models); none below 10 "
    "windows"
)


@dataclass(frozen=True, eq=False)
class Evaluations:
    """Each evaluation window's mean NLL (nats) and its rounding with a set of heads
    ablated: each (ablation, set) evaluated once, then read from ``cache``."""

    model: Any
    eval_ids: list
    batch_size: int
    rows: Any
    cache: dict[tuple[str, tuple[tuple[int, int], ...]], WindowNLL] = field(default_factory=dict)

    def __call__(self, ablation: str, chosen: list[tuple[int, int]]) -> WindowNLL:
        from attncoda.capture.ablation import ablate

        key = (ablation, tuple(sorted(chosen)))
        if key not in self.cache:
            plan: dict[int, list[int]] = {}
            for layer, head in chosen:
                plan.setdefault(layer, []).append(head)
            with ablate(self.model, plan, ablation):
                self.cache[key] = window_nll(
                    self.model, self.eval_ids, batch_size=self.batch_size, rows=self.rows
                )
        return self.cache[key]


@dataclass(frozen=True, eq=False)
class Unpruned:
    """The unpruned model every row is compared with: its window ``losses``, their mean
    ``nll`` (nats) and its ``rounding`` (the largest window bound: it bounds the mean and
    every resample's weighted mean), and the paired resamples ``weights`` of the ratios'
    intervals."""

    model: str
    losses: WindowNLL
    nll: float
    rounding: float
    weights: np.ndarray

    @classmethod
    def of(cls, model: str, losses: WindowNLL, weights: np.ndarray) -> Unpruned:
        """The unpruned row of ``model`` from its window ``losses``."""
        nll, rounding = float(np.mean(losses.losses)), float(np.max(losses.rounding))
        return cls(model, losses, nll, rounding, weights)

    def record(self) -> dict[str, Any]:
        """The baseline row (``k = 0``: ratio 1, no interval, nothing on an edge)."""
        none = (math.nan, math.nan, "", len(self.losses.losses), 0, BASELINE_NOTE)
        return {
            "model": self.model,
            "channel": "none",
            "order": "none",
            "ablation": "none",
            "k": 0,
            "perplexity": math.exp(self.nll),
            "ratio": 1.0,
            **dict(zip(_INTERVAL, none, strict=True)),
            "mean_nll": self.nll,
            "nll_rounding": self.rounding,
            "ratio_rounding": 0.0,  # the ratio is 1 by definition
            **_fragility(ChosenHeads(0, False, False)),
            "heads": "",
        }

    def pruned(
        self, job: tuple, chosen: list[tuple[int, int]], losses: WindowNLL, key: tuple
    ) -> dict[str, Any]:
        """The row of one ``job`` (ablation, channel, order, k): the ``chosen`` heads, their
        window ``losses`` against this one's, and the ranking's ``key`` and its rounding."""
        from attncoda.capture.ablation import head_labels

        ablation, channel, order, k = job
        nll = float(np.mean(losses.losses))
        rounding = float(np.max(losses.rounding))
        interval = ratio_interval(losses.losses, self.losses.losses, self.weights)
        return {
            "model": self.model,
            "channel": channel,
            "order": order,
            "ablation": ablation,
            "k": k,
            "perplexity": math.exp(nll),
            "ratio": math.exp(nll - self.nll),
            **dict(zip(_INTERVAL, interval, strict=True)),
            "mean_nll": nll,
            "nll_rounding": rounding,
            "ratio_rounding": rounding + self.rounding,
            **_fragility(fragile_heads(key[0], key[1], k)),
            "heads": head_labels(chosen),
        }

    def measured_by(self) -> dict[str, Any]:
        """How perplexity and the ratios' intervals are measured, over how many windows and
        resamples, for the summary."""
        return {
            "perplexity_definition": _PERPLEXITY,
            "n_windows": len(self.losses.losses),
            "n_boot": int(len(self.weights)),
            "ratio_interval": _RATIO_INTERVAL,
        }

    def summary(self) -> dict[str, float]:
        """The baseline's perplexity, mean NLL and its rounding (nats), for the summary."""
        return {
            "baseline_perplexity": math.exp(self.nll),
            "baseline_mean_nll": self.nll,
            "baseline_nll_rounding": self.rounding,
        }


def prune_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """``prune.parquet`` of the rows, columns :data:`COLUMNS`, typed."""
    import pandas as pd

    table = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    ints = {c: np.int64 for c in ("k", "n_windows", "n_boot", "n_fragile_heads")}
    types = {**ints, "heads_edge": bool, "order_edge": bool, "ci_method": str}
    return table.astype({**types, "ci_note": str})
