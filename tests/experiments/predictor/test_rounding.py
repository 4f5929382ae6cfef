"""The predictor's support check and verdict thresholds hold within the features' float32
rounding; a training model matched by its weights never abstains."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from attncoda.experiments.predictor import (
    Predictor,
    apply_predictor,
    shipped_predictor,
    verdict,
)
from attncoda.experiments.predictor._rounding import feature_errors

U = 2.0**-24  # float32 unit roundoff
ROWS = json.loads(Path(shipped_predictor()).with_name("flip_predictor_rows.json").read_text())
TRAINING = {r["model"]: r for r in ROWS["training"]}
STEP2000 = TRAINING["bigram-backcopy-seed0@step2000"]


@pytest.fixture(scope="module")
def shipped():
    return Predictor.from_json(shipped_predictor())


def ulp_away(value: float, direction: float) -> float:
    """``value`` moved by one float32 ulp (at its size) towards ``direction``, in float64."""
    return value + math.copysign(float(np.spacing(np.float32(abs(value)))), direction)


def test_the_issue_case_one_float32_ulp_above_the_upper_end_is_inside(shipped):
    # bigram-backcopy@step2000 sets the upper end of std_sink_mass (0.445724)
    names = list(shipped.features)
    lo, hi = shipped.training_range[names.index("std_sink_mass")]
    assert hi == STEP2000["features"]["std_sink_mass"]
    above = ulp_away(hi, math.inf)
    assert above - hi == pytest.approx(2.0**-25)  # one float32 ulp at 0.45
    features = {**STEP2000["features"], "std_sink_mass": above}
    # as an unknown model (no identity, another name): the rounding rule alone accepts it
    p = shipped.apply(features)
    assert not p.abstained and p.reason == ""
    # clearly outside: 1e-4 above the end (about 3,400 float32 ulps) abstains, as before
    far = {**STEP2000["features"], "std_sink_mass": hi + 1e-4}
    p = shipped.apply(far)
    assert p.abstained
    assert f"feature std_sink_mass={hi + 1e-4:.6g} is outside the training range " in p.reason
    assert f"[{lo:.6g}, {hi:.6g}]" in p.reason


def test_past_the_value_s_and_the_end_s_rounding_a_range_end_is_outside(shipped):
    # the allowance at the end of std_sink_mass is the value's rounding plus the end's: the
    # value's one rounding by value (a row that states none), the end's as the file states it,
    # bigram-backcopy@step2000's std over its 64-token rows, u (n + 2) sqrt((m + log n)^2 +
    # sigma^2) with n = 64
    names = list(shipped.features)
    j = names.index("std_sink_mass")
    _, hi = shipped.training_range[j]
    assert shipped.rounding is not None
    end = shipped.rounding.ends[j][1]
    m, sigma = STEP2000["features"]["mean_sink_mass"], hi
    assert end == pytest.approx(U * 66 * math.hypot(m + math.log(64), sigma), rel=1e-6)
    for past, inside in ((0.99, True), (1.01, False)):
        features = {**STEP2000["features"], "std_sink_mass": hi}
        own = feature_errors(features)["std_sink_mass"]
        p = shipped.apply({**features, "std_sink_mass": hi + past * (own + end)})
        assert p.abstained is (not inside)
        # within twice the value's rounding plus the end's of the widened end: on the edge
        assert p.edge
        if not inside:
            assert "outside the training range" in p.reason
    far = shipped.apply({**STEP2000["features"], "std_sink_mass": hi + 1e-3})
    assert far.abstained and not far.edge


@pytest.mark.parametrize("model", sorted(TRAINING))
def test_every_training_model_moved_by_a_float32_ulp_is_inside(shipped, model):
    """Each training model, every feature moved one float32 ulp in or out: inside the joint
    support (its leverage included: the largest training leverage is one of them) and each
    range, without its identity."""
    features = TRAINING[model]["features"]
    names = list(shipped.features)
    for signs in itertools.product((-math.inf, math.inf), repeat=len(names)):
        moved = {n: ulp_away(features[n], s) for n, s in zip(names, signs, strict=True)}
        p = shipped.apply(moved)
        assert not p.abstained, (model, signs, p.reason)


def test_feature_errors_are_the_unit_roundoff_times_the_magnitudes():
    features = {"mean_sink_mass": 0.3, "std_sink_mass": 0.4, "mean_sink_share": 0.25}
    errors = feature_errors(features)
    assert errors["mean_sink_mass"] == pytest.approx(U * 0.3, rel=1e-12)
    # u sqrt(mean^2 + std^2) = u sqrt(0.09 + 0.16) = u / 2
    assert errors["std_sink_mass"] == pytest.approx(U * 0.5, rel=1e-12)
    assert errors["mean_sink_share"] == pytest.approx(2 * U * 0.25, rel=1e-12)
    # rows of n keys: each head mean a row statistic, u (n + 2) (m + log n); by hand, n = 128
    errors = feature_errors(features, n_keys=128)
    log_n = math.log(128)
    assert errors["mean_sink_mass"] == pytest.approx(U * 130 * (0.3 + log_n), rel=1e-12)
    assert errors["std_sink_mass"] == pytest.approx(
        U * 130 * math.sqrt((0.3 + log_n) ** 2 + 0.16), rel=1e-12
    )
    assert errors["mean_sink_share"] == pytest.approx(2 * U * 130 * 0.25, rel=1e-12)


def test_a_verdict_within_the_ends_rounding_is_confirmed(shipped):
    p = shipped.apply(TRAINING["bigram-backcopy-seed1@step2000"]["features"])
    assert not p.abstained and p.high is not None and p.low is not None
    # the ends move by at most max over fits of sum |c_f| e_f: here, by hand
    errors = feature_errors(TRAINING["bigram-backcopy-seed1@step2000"]["features"])
    fits = [shipped.coefficients, *(f.coefficients for f in shipped.interval.fits)]
    by_hand = max(
        sum(abs(c) * errors[n] for c, n in zip(cs, shipped.features, strict=True)) for cs in fits
    )
    assert p.rounding == pytest.approx(by_hand, rel=1e-12)
    assert 0 < p.rounding < 1e-6
    assert verdict(p, p.high + 0.9 * p.rounding) == "confirmed"
    assert verdict(p, p.high + 1.1 * p.rounding) == "failed"


def test_a_training_model_matched_by_its_weights_never_abstains(shipped):
    features = {**STEP2000["features"], "std_sink_mass": 0.9, "mean_sink_mass": 0.95}
    base = {
        "model": "a copy under another name",
        "features": features,
        "flip_rates": STEP2000["flip_rates"],
        "protocol": STEP2000["protocol"],
    }
    # unknown: far outside the training range and the joint support, it abstains
    (unknown,) = apply_predictor(shipped, [base])
    assert unknown["prediction"].abstained and unknown["matched"] is None
    assert "outside the training range" in unknown["prediction"].reason
    # the same features from the training model's own weights: no abstention
    identity = {"weights_sha256": STEP2000["identity"]["weights_sha256"]}
    (known,) = apply_predictor(shipped, [{**base, "identity": identity}])
    assert known["matched"] == ("bigram-backcopy-seed0@step2000", "weights")
    assert known["relation"].relation == "training" and not known["counted"]
    assert not known["prediction"].abstained
    assert known["verdict"] in ("confirmed", "failed")
    # a near copy (its sketch within 2^-7) is matched by its weights too
    sketch = {"weights_sketch": STEP2000["identity"]["weights_sketch"]}
    (near,) = apply_predictor(shipped, [{**base, "identity": sketch}])
    assert near["matched"] == ("bigram-backcopy-seed0@step2000", "near copy")
    assert not near["prediction"].abstained
    # a match by recipe is not by weights (a retrained model): the support check applies
    recipe = {"recipe": STEP2000["identity"]["recipe"]}
    (retrained,) = apply_predictor(shipped, [{**base, "identity": recipe}])
    assert retrained["matched"] == ("bigram-backcopy-seed0@step2000", "recipe")
    assert retrained["prediction"].abstained


def test_smollm2_s_baseline_verdict_is_on_its_edge(shipped):
    """The issue's case: SmolLM2's measured rate is the baseline's upper end (a training
    model's own rate), decided by the last bit: 0.27499711342796450 (an AMD EPYC) against
    the end 0.27499711342796446 gave "failed", and "confirmed" on an Intel Xeon."""
    smollm2 = TRAINING["smollm2"]
    rates = list(smollm2["flip_rates"].values())
    own = float(np.mean(list(smollm2["rounding"]["flip_rates"].values())))
    baseline = shipped.apply_baseline()
    # the end is SmolLM2's rate; its rounding is SmolLM2's rate's (the next end value is far)
    assert baseline.high == pytest.approx(np.mean(rates), abs=1e-15)
    assert shipped.rounding is not None
    assert shipped.rounding.targets[shipped.training_models.index("smollm2")] == own > 0
    assert baseline.rounding == pytest.approx(own, rel=1e-12)
    # either side of the end by the last bits: the same verdict, and on the edge
    for measured in (0.27499711342796450, 0.27499711342796446, baseline.high):
        row = {**smollm2, "flip_rates": dict.fromkeys(smollm2["flip_rates"], measured)}
        (outcome,) = apply_predictor(shipped, [row])
        assert outcome["baseline_edge"] and outcome["baseline_verdict"] == "confirmed"
        assert outcome["measured_rounding"] == pytest.approx(own, rel=1e-12)
    # past the widened end (high + r) by more than its rounding plus twice the end's: no edge
    row = {**smollm2, "flip_rates": dict.fromkeys(smollm2["flip_rates"], baseline.high + 5 * own)}
    (outcome,) = apply_predictor(shipped, [row])
    assert not outcome["baseline_edge"] and outcome["baseline_verdict"] == "failed"


def test_the_shipped_file_states_the_rounding_of_every_training_value(shipped):
    assert shipped.rounding is not None
    targets = [
        float(np.mean(list(TRAINING[m]["rounding"]["flip_rates"].values())))
        for m in shipped.training_models
    ]
    assert list(shipped.rounding.targets) == pytest.approx(targets, rel=1e-12)
    for j, name in enumerate(shipped.features):
        values = {m: TRAINING[m]["features"][name] for m in shipped.training_models}
        errors = {m: TRAINING[m]["rounding"]["features"][name] for m in shipped.training_models}
        lo, hi = shipped.training_range[j]
        at_lo = max(e for m, e in errors.items() if values[m] == lo)
        at_hi = max(e for m, e in errors.items() if values[m] == hi)
        assert shipped.rounding.ends[j] == (at_lo, at_hi)
        assert shipped.rounding.largest[j] == max(errors.values())
        # each a row statistic's bound over 64 or 128 keys: far above one rounding
        assert min(errors.values()) > 0


def test_a_refit_from_the_stored_rows_states_the_shipped_rounding(shipped):
    from attncoda.experiments.predictor import fit_predictor

    again = fit_predictor(ROWS["training"])
    assert again.rounding == shipped.rounding
