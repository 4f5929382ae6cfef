"""Predictor: a model-level forecast of the keep / drop flip rate from sink statistics,
frozen to a file before it meets new models (docs/design.md, "The experiments").

Features of a model (all from :class:`~attncoda.experiments.contract.HeadRows`):

- ``mean_sink_mass`` — mean over heads of the head's mean sink mass ``s``;
- ``std_sink_mass`` — standard deviation (``ddof=0``) of the head sink masses across heads:
  verdicts flip when heads differ in sink mass, not when all share one;
- ``mean_sink_share`` — the share of all pairwise squared Aitchison distances that is the
  sink term, ``sum_{A<B} S(A, B) / sum_{A<B} T(A, B)`` (see
  :func:`attncoda.experiments.safety.mean_squared_split`).

The target is, by default, the model's flip rate averaged over the metrics measured (one
number per model: with a handful of training models a per-metric fit would have as many
parameters as points); a single metric can be chosen instead. The fit is ordinary least
squares on standardised features.

The unit of the fit is a **run**: a ``train-tiny`` run and all its checkpoints are one run,
a pretrained model a run of its own. The prediction interval is **CV+ over runs** (Barber,
Candès, Ramdas and Tibshirani 2021; the jackknife+ when each run gives one model), never a
width set by hand: each run is left out in turn, the others refitted, and each training
model's residual is taken against the fit without its run
(:mod:`~attncoda.experiments.predictor._cvplus`, which states the coverage the paper
guarantees: at least ``1 - 2 alpha`` for the jackknife+, exchangeability being over runs).
The point and both ends are clipped to ``[0, 1]``. A **constant baseline** (the mean flip
rate of the training models, with the same CV+ interval) is stored beside it, and every
verdict shows both, with widths, absolute errors and interval scores
(:mod:`~attncoda.experiments.predictor._verdict`): a count of confirmations alone rewards
wide intervals. A model outside the training set's joint support (its leverage above every
training model's, :mod:`~attncoda.experiments.predictor._support`), or with a feature
outside its training range, gets an abstention that says why, never an extrapolation. Both
rules, and the ends of the interval a verdict compares with, hold within the features'
float32 rounding (:mod:`~attncoda.experiments.predictor._rounding`), so that the same model
gets the same verdict on every device; a training model matched by its weights is never
subject to abstention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attncoda.experiments.contract import (
    Command,
    Experiment,
    Inputs,
    Tables,
    Tool,
    View,
    setting,
)
from attncoda.experiments.flips import FlipsResult, flips
from attncoda.experiments.predictor._apply import (
    apply_predictor,
    check_predictor_file,
    predictor_row,
    shipped_predictor,
    sink_features,
)
from attncoda.experiments.predictor._cvplus import INTERVAL_METHOD
from attncoda.experiments.predictor._figure import draw
from attncoda.experiments.predictor._fit import FitSettings
from attncoda.experiments.predictor._headline import HEADLINE
from attncoda.experiments.predictor._held import HELD
from attncoda.experiments.predictor._identity import Relation
from attncoda.experiments.predictor._model import Predictor
from attncoda.experiments.predictor._protocol import OFF_PROTOCOL, protocol_of
from attncoda.experiments.predictor._section import predictor_section
from attncoda.experiments.predictor._summary import summary
from attncoda.experiments.predictor._verdict import (
    ROUNDING_COLUMNS,
    SCORE_COLUMNS,
    standing,
)
from attncoda.models.spec import NO_REVISION

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EXPERIMENT",
    "Settings",
    "apply_predictor",
    "check_predictor_file",
    "predictor_row",
    "shipped_predictor",
    "sink_features",
    "standing",
]


@dataclass(frozen=True)
class Settings:
    """Settings of the predictor experiment."""

    predictor: str = setting(
        "shipped",
        "frozen predictor file to apply ('shipped': the one shipped)",
        check=check_predictor_file,
    )
    protocol: str = setting(
        "fitted",
        "rows the verdict is read from: 'fitted' reads the predictor's own protocol "
        "(its windows and window length), 'run' the run's rows (no test unless they match)",
        choices=("fitted", "run"),
    )


def _predictor(settings: Settings) -> Predictor:
    path = shipped_predictor() if settings.predictor == "shipped" else settings.predictor
    return Predictor.from_json(path)


def rows_at(settings: Settings) -> dict[str, int] | None:
    """The windows the predictor unit reads: its fitted protocol's (``protocol="fitted"``,
    :meth:`~attncoda.experiments.predictor._protocol.Protocol.rows_at`), or the run's
    (``None``)."""
    if settings.protocol != "fitted":
        return None
    protocol = _predictor(settings).protocol
    assert protocol is not None  # a frozen file records it
    return protocol.rows_at()


def run(inputs: Inputs, settings: Settings) -> Tables:
    """The frozen predictor applied to the unit's model: one row of sink features, the
    prediction (or abstention), the measured flip rate and the verdict.

    The rows are read with the predictor's fitted protocol (``protocol="fitted"``: the
    runner reads its windows, :func:`rows_at`; the flip rates are counted here on them
    unless the run's own rows are those) or are the run's (``"run"``). What was read is
    recorded (``read_corpus``, ``read_windows``, ``read_window_tokens``: a Bigram-Backcopy
    checkpoint's task sequences as they are). A row that read anything else than one of
    the fit's readings, or was measured otherwise (sink, seed, metrics, tie tolerance;
    attention handed in), gets no verdict: ``verdict`` and ``baseline_verdict`` are
    ``"off protocol: no test"`` and ``off_protocol`` says how it differs.

    The predictor's and the constant baseline's predictions stand side by side:
    ``predicted``, ``predicted_low``, ``predicted_high``, ``width``, ``abs_error``,
    ``interval_score``, ``verdict``, and the same prefixed ``baseline_``; the interval is
    named by ``interval_method``, ``alpha``, ``n_training_models`` and ``n_training_runs``.

    What rounding leaves open is stated beside what it moves (docs/design.md, "Verdicts and
    ratios within rounding"; :data:`~attncoda.experiments.predictor._held.HELD` holds each
    column by it): ``feature_*_rounding``, each feature's float32 rounding from the rows
    (:func:`~attncoda.experiments.predictor._rounding.feature_rounding`); ``abstain_edge``,
    whether the abstention (or its absence) and its ``reason`` were decided within rounding
    of a threshold (a widened range end, the widened largest training leverage);
    ``predicted_rounding``, how far the features' rounding moves the point and each end
    through the fit; ``baseline_rounding``, how far the training models' measured rates
    move the baseline's ends (an end of it is one of those rates);
    ``interval_score_rounding`` and ``baseline_interval_score_rounding``, how far both
    move each interval score (with the measured rate's); ``measured_rounding``, the
    measured rate's own (its flips rows' ``rate_rounding``, averaged over the metrics as
    the rate is) over ``n_triplets`` triplets per metric; ``verdict_edge`` and
    ``baseline_edge``, whether the measured rate lies within its rounding plus twice the
    end's of a (widened) end of the interval (:func:`~attncoda.experiments.predictor.
    verdict_edge`), or the abstention is on its edge: such a verdict is
    decided by the last bits, and a report says "on the edge" rather than pick a side. A
    verdict off protocol is never on an edge. All in flip-rate units but the features'.

    ``relation`` says how the model stands to the training models
    (:meth:`Predictor.relation`): ``training`` (``in_training_set``, with
    ``matched_training_model`` and ``matched_by``: the same weights hash, ``train-tiny``
    recipe or name), ``interpolated`` or ``same run`` (a checkpoint of a run that gave
    training models, named in ``run_training_models``), or ``held out``. ``counted`` is
    true for a held-out model read on protocol: only those test the predictor.
    """
    predictor = _predictor(settings)
    flips_result = _flip_rates(inputs, predictor)
    measured_with = _measured_with(inputs, flips_result)
    model, revision = inputs.model, inputs.revision
    label = model if revision == NO_REVISION else f"{model} {revision}"
    row = predictor_row(inputs.rows, flips_result, protocol=measured_with)
    (outcome,) = apply_predictor(predictor, [{**row, "model": label}])
    matched = predictor.training_match([label, model], inputs.rows.identity)
    relation = predictor.relation([label, model], inputs.rows.identity)
    off = predictor.off_protocol(measured_with)
    stated = row["rounding"]["features"]
    record = {
        **{f"feature_{k}": float(v) for k, v in outcome["features"].items()},
        **{f"feature_{k}_rounding": float(stated[k]) for k in outcome["features"]},
        **_prediction(outcome, int(flips_result.table["n_triplets"].max())),
        "verdict": OFF_PROTOCOL if off else outcome["verdict"],
        "verdict_edge": bool(outcome["verdict_edge"]) and not off,
        "baseline_verdict": OFF_PROTOCOL if off else outcome["baseline_verdict"],
        "baseline_edge": bool(outcome["baseline_edge"]) and not off,
        "interval_method": INTERVAL_METHOD,
        "alpha": predictor.alpha,
        "n_training_models": len(predictor.training_models),
        "n_training_runs": predictor.interval.n_runs,
        **_training(matched, relation),
        "read_corpus": measured_with["corpus"],
        "read_windows": measured_with["windows"],
        "read_window_tokens": measured_with["window_tokens"],
        "on_protocol": not off,
        "off_protocol": "; ".join(off),
        "counted": relation.held_out and not off,
    }
    return Tables(frames={"predictor": _frame(record)})


#: The score columns of the predictor and of the baseline, and the rounding of each point.
_SCORES = [f"{prefix}{c}" for prefix in ("", "baseline_") for c in SCORE_COLUMNS]
_ROUNDED = [c for prefix in ("", "baseline_") for c in ROUNDING_COLUMNS[prefix][:2]]


def _flip_rates(inputs: Inputs, predictor: Predictor) -> FlipsResult:
    """The unit's flip rates: its flips unit's when it read the run's rows, else counted
    here on the rows the predictor's protocol read, as the fit counted them."""
    if inputs.shared_rows and "flips" in inputs.after:
        return FlipsResult.from_tables(inputs.model, inputs.tables_of("flips"))
    protocol = predictor.protocol
    assert protocol is not None
    seed, tol, device = inputs.seed, protocol.tol, inputs.device
    return flips(inputs.rows, protocol.metrics, n_boot=1, seed=seed, tol=tol, device=device)


def _measured_with(inputs: Inputs, flips_result: FlipsResult) -> dict[str, Any]:
    """What the unit's rows read and how its flip rates were measured (:func:`protocol_of`);
    attention handed in reads nothing."""
    read = inputs.read
    return protocol_of(
        windows=None if read is None else read.windows,
        window_tokens=None if read is None else read.window_tokens,
        corpus="given attention" if read is None else read.corpus,
        corpus_sha256=None if read is None else read.corpus_sha256,
        sink=inputs.sink,
        seed=inputs.seed,
        metrics=[str(m) for m in flips_result.table["metric"]],
        tol=flips_result.tol,
    )


def _prediction(outcome: dict[str, Any], n_triplets: int) -> dict[str, Any]:
    """The columns of the prediction (or abstention) of both predictors, their rounding and
    the measured rate's, from :func:`apply_predictor`'s ``outcome``."""
    p = outcome["prediction"]
    return {
        "abstained": bool(p.abstained),
        "reason": p.reason,
        "abstain_edge": bool(outcome["abstain_edge"]),
        **{c: outcome[c] for c in _SCORES if not c.endswith("verdict")},
        **{c: float(outcome[c]) for c in _ROUNDED},
        "measured": outcome["measured"],
        "measured_rounding": float(outcome["measured_rounding"]),
        "n_triplets": n_triplets,
    }


def _training(matched: tuple[str, str] | None, relation: Relation) -> dict[str, Any]:
    """The columns of how the model stands to the training models: the training model it
    ``matched`` and by what, and its ``relation`` (:meth:`Predictor.relation`)."""
    return {
        "in_training_set": matched is not None,
        "matched_training_model": "" if matched is None else matched[0],
        "matched_by": "" if matched is None else matched[1],
        "relation": relation.relation,
        "run_training_models": (
            ", ".join(relation.models) if relation.relation in ("interpolated", "same run") else ""
        ),
    }


def _frame(record: dict[str, Any]) -> pd.DataFrame:
    """The one-row ``predictor`` table of ``record``, typed."""
    import pandas as pd

    frame = pd.DataFrame([record])
    for column in _SCORES:
        if not column.endswith("verdict"):
            frame[column] = frame[column].astype("float64")
    frame["n_triplets"] = frame["n_triplets"].astype("int64")
    for column in ("read_windows", "read_window_tokens"):
        frame[column] = frame[column].astype("Int64")
    return frame


EXPERIMENT = Experiment(
    name="predictor",
    needs=("rows",),
    after=("flips",),
    cost=5.0,
    settings=Settings,
    run=run,
    tables=("predictor",),
    rows_at=rows_at,
    identifies=True,
    held=HELD,
    view=View(
        title="Predictor: a frozen flip-rate predictor",
        needs=("predictor",),
        section=predictor_section,
        figure_tables=("predictor",),
        figure=draw,
        headline=HEADLINE,
    ),
    command=Command(
        help="apply the frozen flip-rate predictor: predict, measure, give the verdict",
        sources="models+",
        summary=summary,
        doc="The frozen flip-rate predictor applied and checked: confirmed, abstained or failed.",
        positional="predictor",
        files=("predictor",),
        action="apply",
        tools=(
            Tool(
                action="fit",
                help="fit on models, write a frozen JSON file",
                sources="models+",
                settings=FitSettings,
                run="attncoda.run.fit:fit_tool",
                shared_rows=True,
            ),
        ),
    ),
)
