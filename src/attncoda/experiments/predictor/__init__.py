"""predictor: a flip-rate predictor from sink statistics, fitted, frozen to a file and
applied to new models (docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`fit_predictor`,
:class:`Predictor` and its :class:`Prediction`, :func:`verdict`, the file
(:data:`FILE_KIND`, :data:`FILE_FORMAT`), the match to a training model
(:class:`TrainingIdentity`, :data:`MATCHES`), how a model stands to them (:class:`Relation`,
:data:`RELATIONS`), the protocol a verdict needs (:class:`Protocol`, :func:`protocol_of`,
:data:`OFF_PROTOCOL`) and the features (:func:`sink_features`).

Modules, one concern each: ``_model`` (the linear prediction or abstention), ``_fit`` (the
least-squares fit and its leave-one-out interval), ``_file`` (the frozen JSON file),
``_identity`` (which training model a model is, or which run), ``_protocol`` (how rows are
read for a verdict), ``_verdict`` (confirmed, abstained, failed),
``_experiment`` (the declaration and its run). They may import :mod:`attncoda.coda`,
:mod:`attncoda.experiments.contract`, the flips and safety packages, :mod:`attncoda.store`'s
JSON reading and :mod:`attncoda.training.identity`; nothing above the experiments.
"""

from __future__ import annotations

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
    fit_predictor,
)
from attncoda.experiments.predictor._identity import (
    MATCHES,
    RELATIONS,
    Relation,
    TrainingIdentity,
)
from attncoda.experiments.predictor._model import (
    DEFAULT_COVERAGE,
    FEATURES,
    Predictor,
)
from attncoda.experiments.predictor._protocol import (
    OFF_PROTOCOL,
    Protocol,
    protocol_of,
)
from attncoda.experiments.predictor._verdict import (
    VERDICTS,
    Prediction,
    verdict,
)

__all__ = [
    "DEFAULT_COVERAGE",
    "EXPERIMENT",
    "FEATURES",
    "FILE_FORMAT",
    "FILE_KIND",
    "MATCHES",
    "OFF_PROTOCOL",
    "Prediction",
    "Predictor",
    "Protocol",
    "RELATIONS",
    "Relation",
    "Settings",
    "TrainingIdentity",
    "VERDICTS",
    "apply_predictor",
    "check_predictor_file",
    "fit_predictor",
    "predictor_row",
    "protocol_of",
    "shipped_predictor",
    "sink_features",
    "standing",
    "verdict",
]
