"""How the predictor's table is held when two runs are compared (docs/design.md, "The same
evidence, by one rule"): every value to the rounding its row states of what it is made of,
every verdict equal unless its row states it is on the edge.

The bounds a row states are of two kinds. A feature's rounding (``feature_*_rounding``) and
the prediction's (``predicted_rounding``) bound how far one computation lies from the
exact value, so two runs differ by up to twice the bound (each column below names it twice).
The measured rate's (``measured_rounding``, from its flips rows' fragile triplets) is a
bound between two devices already. The baseline's point is read from the predictor file,
and its ends and width are made from the file alone; they are held to the baseline's
rounding, that of the training models' rates they are made of (a run cannot move them).
"""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.contract import Bound, Held, Stated, Verdict
from attncoda.experiments.predictor._model import FEATURES

__all__ = ["HELD"]

#: A rate's bound made of counted triplets: its unit one triplet of the measured model's
#: count.
_RATE_BOUND = Bound(per="n_triplets")
#: A bound made of magnitudes (the features' float32 rounding, what the fit makes of it,
#: the training rates' bounds the file states): held to its share of itself alone.
_FLOAT_BOUND = Bound(units=0)
_PREDICTED = ("predicted_rounding", "predicted_rounding")
_EDGE = "abstain_edge"

#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`.
HELD: Mapping[str, Mapping[str, Held]] = {
    "predictor": {
        **{f"feature_{f}": Stated((f"feature_{f}_rounding",) * 2) for f in FEATURES},
        **{f"feature_{f}_rounding": _FLOAT_BOUND for f in FEATURES},
        "abstained": Verdict(_EDGE),
        "reason": Verdict(_EDGE),
        "abstain_edge": Verdict(_EDGE),
        "predicted": Stated(_PREDICTED, edge=_EDGE),
        "predicted_low": Stated(_PREDICTED, edge=_EDGE),
        "predicted_high": Stated(_PREDICTED, edge=_EDGE),
        # both ends: twice the two runs' difference of one
        "width": Stated(_PREDICTED * 2, edge=_EDGE),
        "abs_error": Stated(("measured_rounding", *_PREDICTED), edge=_EDGE),
        "interval_score": Stated("interval_score_rounding", edge=_EDGE),
        "baseline_predicted_low": Stated("baseline_rounding"),
        "baseline_predicted_high": Stated("baseline_rounding"),
        "baseline_width": Stated(("baseline_rounding", "baseline_rounding")),
        "baseline_abs_error": Stated(("measured_rounding", "baseline_rounding")),
        "baseline_interval_score": Stated("baseline_interval_score_rounding"),
        "predicted_rounding": _FLOAT_BOUND,
        "interval_score_rounding": _FLOAT_BOUND,
        "baseline_rounding": _FLOAT_BOUND,
        "baseline_interval_score_rounding": _FLOAT_BOUND,
        "measured": Stated("measured_rounding"),
        "measured_rounding": _RATE_BOUND,
        "verdict": Verdict("verdict_edge"),
        "verdict_edge": Verdict("verdict_edge"),
        "baseline_verdict": Verdict("baseline_edge"),
        "baseline_edge": Verdict("baseline_edge"),
    },
}
