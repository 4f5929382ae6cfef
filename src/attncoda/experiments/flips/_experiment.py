"""Flips: how often the keep / drop convention reverses "which head is closer"
(docs/design.md, "The experiments").

For heads ``A, B, C`` the triplet verdict is ``v(A; B, C) = sign(D(A, C) - D(A, B))``, with ``D``
the head distance of docs/design.md, "Conventions and the head distance" (the mean row metric over
every recorded query row with every sink key present and at least two content keys, pooled over
documents). A *flip* is a triplet whose verdict under ``convention="keep"`` is the opposite of its
verdict under ``convention="drop"``, both decided. A triplet is a *tie* when ``|D(A, C) - D(A, B)|``
is within the tie tolerance under either convention; ties are counted apart and never as flips.

The counting itself (exact, over every triplet) is :mod:`attncoda.experiments.flips._count`,
the per-document distance sums :mod:`attncoda.experiments.flips._sums` and their bootstrap
:mod:`attncoda.experiments.flips._bootstrap`; this module pools the sums, bootstraps them and
declares the experiment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda._progress import steps
from attncoda.experiments.contract import (
    BOOTSTRAP_DOCUMENTS,
    DEFAULT_TOL,
    FLIP_METRICS,
    Command,
    Experiment,
    HeadRows,
    Inputs,
    Tables,
    View,
    check_metrics,
    check_n_boot,
    check_tol,
    flip_rate,
    no_interval_note,
    percentile_interval,
    setting,
)
from attncoda.experiments.flips._bootstrap import (
    bootstrap_rates,
    check_threads,
    interval_rounding,
    rate_rounding,
    resample_weights,
)
from attncoda.experiments.flips._count import TripletFlips, triplet_flips
from attncoda.experiments.flips._figure import draw
from attncoda.experiments.flips._headline import HEADLINE
from attncoda.experiments.flips._held import HELD
from attncoda.experiments.flips._result import BY_LAYER_COLUMNS, TABLE_COLUMNS, FlipsResult
from attncoda.experiments.flips._section import flips_section
from attncoda.experiments.flips._summary import summary
from attncoda.experiments.flips._sums import DocumentSums, document_sums, entropy_sums

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BY_LAYER_COLUMNS",
    "TABLE_COLUMNS",
    "CAPTURE_TOL",
    "EXPERIMENT",
    "FlipsResult",
    "Settings",
    "flips",
]

# --------------------------------------------------------------------------------------------
# The experiment


def flips(
    head_rows: HeadRows,
    metrics: Sequence[str] = FLIP_METRICS,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    tol: float = DEFAULT_TOL,
    n_threads: int | None = None,
    device: str | None = None,
) -> FlipsResult:  # params: the documented options a user passes, as scikit-learn's estimators
    r"""Flip rate of triplet verdicts between ``convention="keep"`` and ``"drop"``.

    For each metric, ``D_keep`` and ``D_drop`` are the pooled head distances (the mean row
    metric over every used row of every document). Every triplet ``(A; B, C)``, ``A`` any head
    and ``B < C`` two other heads, gets the verdict ``sign(D(A, C) - D(A, B))`` under each
    convention; a flip is a decided triplet whose two verdicts differ.

    .. math:: \mathrm{flip\ rate} = \frac{\#\mathrm{flips}}{N\binom{N-1}{2} - \#\mathrm{ties}}

    Parameters
    ----------
    head_rows : HeadRows
        Recorded log-probability rows of every head, per document.
    metrics : sequence of str
        Classic metrics (each has a keep and a drop version): ``cosine``, ``jsd``,
        ``entropy_gap``, ``hellinger``, ``tv``.
    n_boot : int
        Bootstrap resamples over documents (``>= 1``). Each resample draws the documents with
        replacement and recomputes ``D = sum_d w_d S_d / sum_d w_d n_d`` from the per-document
        sums, then recounts every triplet. Drawn only with at least
        :data:`~attncoda.experiments.contract.MIN_BOOTSTRAP_N` documents (docs/design.md,
        "Intervals"); with fewer the table gives no interval and says why.
    seed : int
        Seed of the resampling (``numpy.random.default_rng``).
    tol : float
        Relative tie tolerance: a triplet is a tie when ``|D(A, C) - D(A, B)| <= tol * max|D|``
        under keep or under drop, each matrix against its own maximum (also in each
        resample). The default ``1e-9`` catches rounding-level equalities of float64
        distances only; rows captured in float32 give ``D`` about ``1e-7`` relative
        precision, so ``tol=1e-6`` counts their near-equalities as ties.
    n_threads : int, optional
        Threads for the bootstrap (default: the CPUs available, at most 8). The counts do
        not depend on it.
    device : str, optional
        Where the head distances run: None or ``"cpu"`` (numpy, the reference), or a torch
        device such as ``"cuda"``. The counting and the bootstrap run on the host.

    Returns
    -------
    FlipsResult
        ``.table`` (one row per metric), ``.by_layer``, ``.distances`` and their
        ``.rounding``, ``.bootstrap``.

    Raises
    ------
    AttncodaError
        For a non-classic or unknown metric, ``n_boot < 1``, a negative ``tol``, fewer than
        3 heads, or no row with content.
    """
    import pandas as pd

    metrics = check_metrics(metrics)
    n_boot = check_n_boot(n_boot)
    tol = check_tol(tol)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise AttncodaError(f"seed must be an int; got {seed!r}")
    n = head_rows.n_layers * head_rows.n_heads
    if n < 3:
        raise AttncodaError(
            f"flips needs at least 3 heads for a triplet; model {head_rows.model!r} has {n}"
        )
    threads = check_threads(n_threads)
    on = None if device in (None, "cpu") else device
    rows, layer_rows, distances, rounding, boot = [], [], {}, {}, {}
    pool = _Pool(0, 0, "", np.zeros((0, 0)))
    entropies = {c: entropy_sums(head_rows, c) for c in ("keep", "drop")}
    for i, metric in enumerate(
        steps(metrics, desc=f"flips {head_rows.model}: metrics", unit="metric")
    ):
        keep = document_sums(head_rows, metric, "keep", device=on, entropies=entropies["keep"])
        drop = document_sums(head_rows, metric, "drop", device=on, entropies=entropies["drop"])
        if i == 0:
            pool = _pool(keep, n_boot, seed)
        point = triplet_flips(
            keep.distances, drop.distances, tol=tol, rounding=(keep.rounding, drop.rounding)
        )
        rates, moved = (
            bootstrap_rates(keep, drop, pool.weights, tol, n * point.n_triplets, threads)
            if len(pool.weights)
            else (np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.float64))
        )
        rows.append(_metric_row(head_rows.model, metric, point, (rates, moved), pool))
        layer_rows += _layer_rows(head_rows, metric, point)
        distances[(metric, "keep")] = keep.distances
        distances[(metric, "drop")] = drop.distances
        rounding[(metric, "keep")], rounding[(metric, "drop")] = keep.rounding, drop.rounding
        boot[metric] = rates
    return FlipsResult(
        model=head_rows.model,
        table=_typed(pd.DataFrame(rows, columns=list(TABLE_COLUMNS))),
        by_layer=_typed(pd.DataFrame(layer_rows, columns=list(BY_LAYER_COLUMNS))),
        distances=distances,
        bootstrap=boot,
        n_docs=pool.n_docs,
        n_rows=pool.n_rows,
        tol=tol,
        rounding=rounding,
    )


@dataclass(frozen=True)
class _Pool:
    """The documents every metric pools and resamples, fixed by the first: how many, the
    rows used, why there is no interval (``""`` when there is) and the resample weights
    (resample, document)."""

    n_docs: int
    n_rows: int
    note: str
    weights: np.ndarray


def _pool(keep: DocumentSums, n_boot: int, seed: int) -> _Pool:
    """The :class:`_Pool` of one metric's sums: ``n_boot`` resamples drawn with ``seed``,
    none with too few documents for an interval."""
    n_docs, n_rows = len(keep.docs), int(keep.counts.sum())
    note = no_interval_note(n_docs, "documents")
    return _Pool(n_docs, n_rows, note, resample_weights(n_docs, 0 if note else n_boot, seed))


def _metric_row(
    model: str,
    metric: str,
    point: TripletFlips,
    boot: tuple[np.ndarray, np.ndarray],
    pool: _Pool,
) -> tuple[object, ...]:
    """One metric's row of the table (:data:`TABLE_COLUMNS`): the exact counts, the flip rate
    with its bootstrap interval (``boot``: the resamples' rates and how far rounding moves
    each), and how far the fragile triplets can move both."""
    rates, moved = boot
    n = len(point.flips)
    n_triplets = n * point.n_triplets
    low, high = percentile_interval(rates)
    why = pool.note or ("" if math.isfinite(low) else "no interval: every resample ties")
    n_ties, n_flips = int(point.ties.sum()), int(point.flips.sum())
    n_fragile = int(point.fragile.sum())
    return (
        model,
        metric,
        n,
        pool.n_docs,
        n_triplets,
        n_ties,
        n_flips,
        flip_rate(n_flips, n_triplets - n_ties),
        low,
        high,
        "" if why else BOOTSTRAP_DOCUMENTS,
        len(rates),
        why,
        n_fragile,
        float(rate_rounding(n_fragile, n_triplets - n_ties)),
        interval_rounding(rates, moved, (low, high)),
    )


def _layer_rows(head_rows: HeadRows, metric: str, point: TripletFlips) -> list[tuple[object, ...]]:
    """One metric's rows of the by-layer table (:data:`BY_LAYER_COLUMNS`): the counts and
    flip rate of the triplets whose anchor head ``A`` is in each layer."""
    rows: list[tuple[object, ...]] = []
    for layer in range(head_rows.n_layers):
        sel = head_rows.layer_of == layer
        t, f = int(point.ties[sel].sum()), int(point.flips[sel].sum())
        k = int(point.fragile[sel].sum())
        total = point.n_triplets * int(sel.sum())
        rows.append(
            (
                head_rows.model, metric, layer, total, t, f, flip_rate(f, total - t), k,
                float(rate_rounding(k, total - t)),
            )
        )  # fmt: skip
    return rows


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    ints = ("n_heads", "n_docs", "layer", "n_triplets", "n_ties", "flips", "n_boot", "n_fragile")
    floats = ("flip_rate", "ci_low", "ci_high", "rate_rounding", "ci_rounding")
    texts = ("ci_method", "ci_note")
    types = {c: "int64" for c in ints} | {c: "float64" for c in floats} | {c: str for c in texts}
    return df.astype({c: t for c, t in types.items() if c in df})


# --------------------------------------------------------------------------------------------
# The experiment's declaration

#: Distances from float32 rows are good to about 1e-7 relative: closer verdicts are ties.
CAPTURE_TOL = 1e-6


@dataclass(frozen=True)
class Settings:
    """Settings of the flips experiment."""

    metrics: tuple[str, ...] = setting(
        FLIP_METRICS,
        "classic metrics compared under keep and drop",
        choices=FLIP_METRICS,
        item="metric",
    )
    n_boot: int = setting(200, "bootstrap resamples over documents", at_least=1)
    tol: float = setting(
        CAPTURE_TOL,
        "relative tie tolerance of the head distances (float32 rows: 1e-6)",
        at_least=0.0,
    )


def run(inputs: Inputs, settings: Settings) -> Tables:
    """Flip rates of the unit's recorded rows (:func:`flips`) as a flips unit's tables."""
    result = flips(
        inputs.rows,
        settings.metrics,
        n_boot=settings.n_boot,
        seed=inputs.seed,
        tol=settings.tol,
        device=inputs.device,
    )
    return result.to_tables()


EXPERIMENT = Experiment(
    name="flips",
    needs=("rows",),
    after=(),
    cost=48.0,
    settings=Settings,
    run=run,
    tables=("flips", "flips_by_layer"),
    held=HELD,
    view=View(
        title="Flips: verdicts that change between keep and drop",
        needs=("flips",),
        section=flips_section,
        figure_tables=("flips",),
        figure=draw,
        headline=HEADLINE,
    ),
    command=Command(
        help="flip rate of head-similarity verdicts, keep vs drop",
        sources="models*",
        summary=summary,
        doc="How often keep and drop reverse 'which head is closer', per metric, with a CI.",
        run_flags=("n_boot",),
    ),
)
