"""predictor: a flip-rate predictor from sink statistics, fitted, frozen to a file and
applied to new models beside a constant baseline (docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`fit_predictor`,
:class:`Predictor` and its :class:`Baseline`, its interval (:class:`CVPlus`,
:class:`LeftOutFit`, :data:`INTERVAL_METHOD`, :data:`DEFAULT_ALPHA`) and its joint support
(:class:`Support`), :class:`Prediction`, :func:`verdict`, :func:`interval_score` and
:func:`verdict_columns` (:data:`SCORE_COLUMNS`), the file (:data:`FILE_KIND`,
:data:`FILE_FORMAT`), the match to a training model (:class:`TrainingIdentity`,
:data:`MATCHES`), the run a model belongs to (:func:`run_of`, :func:`training_runs`), how a
model stands to the training models (:class:`Relation`, :data:`RELATIONS`), the protocol a
verdict needs (:class:`Protocol`, :func:`protocol_of`, :data:`OFF_PROTOCOL`; what rows read
is the contract's :class:`~attncoda.experiments.contract.Reading`) and the features
(:func:`sink_features`); what rounding leaves open (:class:`TrainingRounding`, the
predictor's statement of its training values' rounding; :func:`verdict_edge`, whether a
verdict is decided within rounding; :data:`ROUNDING_COLUMNS`; docs/design.md, "Verdicts and
ratios within rounding").

Modules, one concern each: ``_model`` (the prediction or abstention, and the baseline),
``_fit`` (the least-squares fit), ``_cvplus`` (the CV+ interval over runs), ``_support``
(the joint support, by leverage), ``_file`` (the frozen JSON file), ``_identity`` (which
training model a model is, or which run), ``_protocol`` (what rows read for a verdict),
``_verdict`` (confirmed, abstained, failed; widths, errors, interval scores; edges),
``_rounding`` (the float32 rounding of the features and of the training values),
``_held`` (how ``attncoda compare`` holds the table's columns), ``_apply`` (the frozen
predictor applied to a model's rows: its features, prediction and verdicts), ``_experiment`` (the
declaration and its run). They may import :mod:`attncoda.coda`,
:mod:`attncoda.experiments.contract`, the flips and safety packages, :mod:`attncoda.store`'s
JSON reading and :mod:`attncoda.training.identity`; nothing above the experiments.
"""

from __future__ import annotations

from attncoda.experiments.predictor._cvplus import (
    INTERVAL_METHOD,
    CVPlus,
    LeftOutFit,
)
from attncoda.experiments.predictor._experiment import (
    EXPERIMENT,
    Settings,
    apply_predictor,
    check_predictor_file,
    predictor_row,
    shipped_predictor,
    sink_features,
    standing,
)
from attncoda.experiments.predictor._file import (
    FILE_FORMAT,
    FILE_KIND,
)
from attncoda.experiments.predictor._fit import (
    FitSettings,
    fit_predictor,
)
from attncoda.experiments.predictor._identity import (
    MATCHES,
    RELATIONS,
    Relation,
    TrainingIdentity,
    run_of,
    training_runs,
)
from attncoda.experiments.predictor._model import (
    DEFAULT_ALPHA,
    FEATURES,
    Baseline,
    Predictor,
)
from attncoda.experiments.predictor._protocol import (
    OFF_PROTOCOL,
    Protocol,
    protocol_of,
)
from attncoda.experiments.predictor._rounding import TrainingRounding
from attncoda.experiments.predictor._support import (
    Support,
)
from attncoda.experiments.predictor._verdict import (
    ROUNDING_COLUMNS,
    SCORE_COLUMNS,
    VERDICTS,
    Prediction,
    interval_score,
    verdict,
    verdict_columns,
    verdict_edge,
)

__all__ = [
    "DEFAULT_ALPHA",
    "FitSettings",
    "EXPERIMENT",
    "FEATURES",
    "FILE_FORMAT",
    "FILE_KIND",
    "INTERVAL_METHOD",
    "MATCHES",
    "OFF_PROTOCOL",
    "RELATIONS",
    "ROUNDING_COLUMNS",
    "SCORE_COLUMNS",
    "VERDICTS",
    "Baseline",
    "CVPlus",
    "LeftOutFit",
    "Prediction",
    "Predictor",
    "Protocol",
    "Relation",
    "Settings",
    "Support",
    "TrainingIdentity",
    "TrainingRounding",
    "apply_predictor",
    "check_predictor_file",
    "fit_predictor",
    "interval_score",
    "predictor_row",
    "protocol_of",
    "run_of",
    "shipped_predictor",
    "sink_features",
    "standing",
    "training_runs",
    "verdict",
    "verdict_columns",
    "verdict_edge",
]
