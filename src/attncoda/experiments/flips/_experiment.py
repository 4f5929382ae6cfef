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
from attncoda.experiments.flips._count import triplet_flips
from attncoda.experiments.flips._figure import draw
from attncoda.experiments.flips._headline import HEADLINE
from attncoda.experiments.flips._held import HELD
from attncoda.experiments.flips._result import BY_LAYER_COLUMNS, TABLE_COLUMNS, FlipsResult
from attncoda.experiments.flips._section import flips_section
from attncoda.experiments.flips._summary import summary
from attncoda.experiments.flips._sums import document_sums, entropy_sums

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
) -> FlipsResult:
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
    n_triplets = n * math.comb(n - 1, 2)
    layer_of = head_rows.layer_of
    rows, layer_rows, distances, rounding, boot = [], [], {}, {}, {}
    weights: np.ndarray | None = None
    n_docs = n_rows = 0
    note = ""
    entropies = {c: entropy_sums(head_rows, c) for c in ("keep", "drop")}
    for metric in steps(metrics, desc=f"flips {head_rows.model}: metrics", unit="metric"):
        keep = document_sums(head_rows, metric, "keep", device=on, entropies=entropies["keep"])
        drop = document_sums(head_rows, metric, "drop", device=on, entropies=entropies["drop"])
        if weights is None:
            n_docs, n_rows = len(keep.docs), int(keep.counts.sum())
            note = no_interval_note(n_docs, "documents")
            weights = resample_weights(n_docs, 0 if note else n_boot, seed)
        e_keep, e_drop = keep.rounding, drop.rounding
        point = triplet_flips(keep.distances, drop.distances, tol=tol, rounding=(e_keep, e_drop))
        rates, moved = (
            bootstrap_rates(keep, drop, weights, tol, n_triplets, threads)
            if len(weights)
            else (np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.float64))
        )
        low, high = percentile_interval(rates)
        why = note or ("" if math.isfinite(low) else "no interval: every resample ties")
        n_ties, n_flips = int(point.ties.sum()), int(point.flips.sum())
        n_fragile = int(point.fragile.sum())
        rows.append(
            (
                head_rows.model,
                metric,
                n,
                n_docs,
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
        )
        for layer in range(head_rows.n_layers):
            sel = layer_of == layer
            t, f = int(point.ties[sel].sum()), int(point.flips[sel].sum())
            k = int(point.fragile[sel].sum())
            total = point.n_triplets * int(sel.sum())
            layer_rows.append(
                (
                    head_rows.model, metric, layer, total, t, f, flip_rate(f, total - t), k,
                    float(rate_rounding(k, total - t)),
                )
            )  # fmt: skip
        distances[(metric, "keep")] = keep.distances
        distances[(metric, "drop")] = drop.distances
        rounding[(metric, "keep")], rounding[(metric, "drop")] = e_keep, e_drop
        boot[metric] = rates
    table = _typed(pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
    by_layer = _typed(pd.DataFrame(layer_rows, columns=list(BY_LAYER_COLUMNS)))
    return FlipsResult(
        model=head_rows.model,
        table=table,
        by_layer=by_layer,
        distances=distances,
        bootstrap=boot,
        n_docs=n_docs,
        n_rows=n_rows,
        tol=tol,
        rounding=rounding,
    )


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
