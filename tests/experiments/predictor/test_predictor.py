"""Predictor: the fit, its CV+ interval over runs against a plain loop and in simulation, the
constant baseline, the interval score, abstention outside the joint support, the frozen file
(round trip and malformed files), and the verdicts."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest

import attncoda
from attncoda import AttncodaError
from attncoda.experiments.contract import DocRows, HeadRows
from attncoda.experiments.flips import flips
from attncoda.experiments.predictor import (
    FEATURES,
    INTERVAL_METHOD,
    OFF_PROTOCOL,
    SCORE_COLUMNS,
    Prediction,
    Predictor,
    Protocol,
    apply_predictor,
    fit_predictor,
    interval_score,
    predictor_row,
    protocol_of,
    sink_features,
    standing,
    training_runs,
    verdict,
    verdict_columns,
)
from attncoda.experiments.safety import mean_squared_split
from attncoda.store import atomic_write_json

METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
COEF = {"mean_sink_mass": 0.3, "std_sink_mass": 0.8, "mean_sink_share": 0.2}
EMBEDDED = "c8eb083b42baa069630d9170cd85b057a97a56b40ff30f99fffce207cdb2ac30"
#: How every row below was read (the shipped fit's text reading).
PROTOCOL = protocol_of(
    windows=16,
    window_tokens=128,
    corpus=None,
    corpus_sha256=EMBEDDED,
    sink="first",
    seed=0,
    metrics=METRICS,
    tol=1e-6,
)


def freeze(predictor, path):
    """Write a predictor's file as the run does (the experiment writes no file)."""
    return atomic_write_json(path, predictor.to_dict())


def row(model, mass, std, share, noise=0.0):
    feats = {"mean_sink_mass": mass, "std_sink_mass": std, "mean_sink_share": share}
    rate = 0.05 + sum(COEF[f] * v for f, v in feats.items()) + noise
    # Per-metric rates whose mean is `rate`.
    offsets = np.array([-0.02, -0.01, 0.0, 0.01, 0.02])
    return {
        "model": model,
        "features": feats,
        "flip_rates": dict(zip(METRICS, (rate + offsets).tolist(), strict=True)),
        "protocol": dict(PROTOCOL),
    }


def target(r):
    return float(np.mean(list(r["flip_rates"].values())))


#: Ten models, each a run of its own (the jackknife+ case), enough for alpha = 0.1.
TRAIN = [
    row("a", 0.05, 0.02, 0.10, 0.004),
    row("b", 0.20, 0.10, 0.30, -0.003),
    row("c", 0.40, 0.15, 0.20, 0.002),
    row("d", 0.55, 0.25, 0.60, -0.001),
    row("e", 0.30, 0.05, 0.45, 0.003),
    row("f", 0.10, 0.20, 0.35, -0.004),
    row("g", 0.45, 0.30, 0.15, 0.006),
    row("h", 0.25, 0.22, 0.55, -0.005),
    row("i", 0.35, 0.12, 0.05, 0.001),
    row("j", 0.15, 0.08, 0.50, -0.002),
]
INSIDE = {"mean_sink_mass": 0.30, "std_sink_mass": 0.15, "mean_sink_share": 0.32}


def test_fit_recovers_a_linear_law_and_records_what_it_was_fitted_on():
    exact = [row(r["model"], *r["features"].values()) for r in TRAIN]
    predictor = fit_predictor(exact)
    assert predictor.features == FEATURES
    np.testing.assert_allclose(predictor.coefficients, [COEF[f] for f in FEATURES], atol=1e-12)
    assert predictor.intercept == pytest.approx(0.05, abs=1e-12)
    assert predictor.residual_std == pytest.approx(0.0, abs=1e-12)
    # An exact law: every left-out run is predicted exactly, so the interval has no width.
    np.testing.assert_allclose(predictor.interval.residuals, 0.0, atol=1e-12)
    p = predictor.apply(INSIDE)
    assert p.high - p.low == pytest.approx(0.0, abs=1e-12)
    assert predictor.alpha == 0.1 and predictor.training_runs == tuple("abcdefghij")
    assert predictor.training_models == tuple("abcdefghij")
    assert predictor.training_range[0] == (0.05, 0.55)
    assert predictor.metrics == METRICS and predictor.target == "mean"
    assert predictor.version == attncoda.__version__
    # the baseline is the mean flip rate of the training models
    assert predictor.baseline.value == pytest.approx(np.mean([target(r) for r in exact]))


# --- the CV+ interval over runs, against a plain loop ------------------------------------


#: Fourteen models of six runs (four checkpoints, three, two, two, and two pretrained models).
GROUPED = [
    row(name, m, s, sh, noise)
    for name, m, s, sh, noise in [
        ("r1@step1", 0.05, 0.02, 0.10, 0.010),
        ("r1@step2", 0.20, 0.10, 0.30, -0.020),
        ("r1@step3", 0.40, 0.15, 0.20, 0.015),
        ("r1@step4", 0.55, 0.25, 0.60, -0.030),
        ("r2@step1", 0.30, 0.05, 0.45, 0.025),
        ("r2@step2", 0.10, 0.20, 0.35, -0.010),
        ("r2@step3", 0.45, 0.30, 0.15, 0.040),
        ("r3@step1", 0.25, 0.22, 0.55, -0.035),
        ("r3@step2", 0.35, 0.12, 0.05, 0.005),
        ("r4@step1", 0.15, 0.08, 0.50, -0.015),
        ("r4@step9", 0.50, 0.18, 0.40, 0.030),
        ("pretrained-a", 0.32, 0.16, 0.25, -0.025),
        ("pretrained-b", 0.22, 0.14, 0.42, 0.020),
        ("r1@step5", 0.28, 0.11, 0.33, -0.005),
    ]
]


def _cv_plus_by_hand(rows, point, alpha, constant=False):
    """The CV+ interval written out from Barber et al. (2021): a least-squares fit with an
    intercept column on the raw features (or the mean, for the baseline) without each run,
    R_i against the fit without row i's run, and the floor(alpha (n+1))-th smallest of
    mu_{-g(i)}(x) - R_i and the ceil((1-alpha)(n+1))-th smallest of mu_{-g(i)}(x) + R_i."""
    run = [r["model"].split("@")[0] for r in rows]
    x = np.array([[1.0, *r["features"].values()] for r in rows])
    y = np.array([target(r) for r in rows])
    if constant:
        x = x[:, :1]
    probe = np.array([1.0, *point.values()])[: x.shape[1]]
    lows, highs = [], []
    for i in range(len(rows)):
        keep = np.array([g != run[i] for g in run])
        beta = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        residual = abs(y[i] - x[i] @ beta)
        lows.append(probe @ beta - residual)
        highs.append(probe @ beta + residual)
    n = len(rows)
    k_low = math.floor(alpha * (n + 1) + 1e-9)
    k_high = math.ceil((1 - alpha) * (n + 1) - 1e-9)
    return sorted(lows)[k_low - 1], sorted(highs)[k_high - 1]


@pytest.mark.parametrize("alpha", [0.1, 0.2, 0.25])
def test_the_interval_is_cv_plus_over_runs_as_published(alpha):
    predictor = fit_predictor(GROUPED, alpha=alpha)
    assert predictor.training_runs == (
        ("r1",) * 4
        + ("r2",) * 3
        + ("r3",) * 2
        + ("r4",) * 2
        + ("pretrained-a", "pretrained-b", "r1")
    )
    assert predictor.interval.n_runs == 6
    for point in (INSIDE, GROUPED[3]["features"], GROUPED[8]["features"]):
        values = list(point.values())
        want = _cv_plus_by_hand(GROUPED, point, alpha)
        # a plain lstsq on the raw features against the standardised fit: rounding only
        np.testing.assert_allclose(predictor.interval.bounds(values), want, rtol=0, atol=1e-12)
        p = predictor.apply(point)
        assert (p.low, p.high) == pytest.approx((max(0.0, want[0]), min(1.0, want[1])), abs=1e-12)
        base = _cv_plus_by_hand(GROUPED, point, alpha, constant=True)
        np.testing.assert_allclose(predictor.baseline.interval.bounds(()), base, atol=1e-12)


def test_leaving_one_checkpoint_out_is_not_leaving_its_run_out():
    """The residual of a checkpoint is against the fit without its whole run: not the
    leave-one-out residual, which keeps its sister checkpoints in the fit."""
    predictor = fit_predictor(GROUPED)
    x = np.array([[1.0, *r["features"].values()] for r in GROUPED])
    y = np.array([target(r) for r in GROUPED])
    others = np.arange(len(GROUPED)) >= 4  # r1's first four checkpoints out (r1@step5 too)
    others[-1] = False
    beta = np.linalg.lstsq(x[others], y[others], rcond=None)[0]
    assert predictor.interval.residuals[0] == pytest.approx(y[0] - x[0] @ beta, abs=1e-12)
    one_out = np.arange(len(GROUPED)) != 0
    loo = y[0] - x[0] @ np.linalg.lstsq(x[one_out], y[one_out], rcond=None)[0]
    assert abs(predictor.interval.residuals[0] - loo) > 1e-3


def test_jackknife_plus_covers_at_least_1_minus_2_alpha_in_simulation():
    """1,000 draws of 9 training points and one test point from a heavy-tailed linear law
    (one model per run: the jackknife+): the interval covers the test point's value at
    least 1 - 2 alpha of the time, the paper's guarantee (it is near 1 - alpha in practice)."""
    rng = np.random.default_rng(20261202)
    alpha, n, draws = 0.1, 9, 1000
    covered = 0
    for _ in range(draws):
        x = rng.uniform(0, 1, size=n + 1)
        y = 0.2 + 0.5 * x + 0.05 * rng.standard_t(3, size=n + 1)
        rows = [
            {
                "model": f"m{i}",
                "features": {"mean_sink_mass": float(x[i])},
                "flip_rates": {"tv": float(y[i])},
            }
            for i in range(n)
        ]
        fitted = fit_predictor(rows, features=("mean_sink_mass",), alpha=alpha)
        low, high = fitted.interval.bounds([float(x[n])])
        covered += low <= y[n] <= high
    assert covered / draws >= 1 - 2 * alpha
    assert covered / draws <= 1.0


def test_cv_plus_with_equal_runs_covers_the_papers_k_fold_bound_in_simulation():
    """K = 5 runs of 2 models (n = 10), alpha = 0.1: the paper's CV+ bound is
    1 - 2 alpha - min{2 (1 - 1/K) / (n/K + 1), (1 - K/n) / (K + 1)} = 0.8 - 1/12."""
    rng = np.random.default_rng(7)
    alpha, k, m, draws = 0.1, 5, 2, 1000
    n = k * m
    bound = 1 - 2 * alpha - min(2 * (1 - 1 / k) / (n / k + 1), (1 - k / n) / (k + 1))
    covered = 0
    for _ in range(draws):
        x = rng.uniform(0, 1, size=n + 1)
        y = 0.2 + 0.5 * x + 0.05 * rng.standard_normal(n + 1)
        rows = [
            {
                "model": f"run{i // m}@step{i % m}",
                "features": {"mean_sink_mass": float(x[i])},
                "flip_rates": {"tv": float(y[i])},
            }
            for i in range(n)
        ]
        fitted = fit_predictor(rows, features=("mean_sink_mass",), alpha=alpha)
        assert fitted.interval.n_runs == k
        low, high = fitted.interval.bounds([float(x[n])])
        covered += low <= y[n] <= high
    assert bound == pytest.approx(0.8 - 1 / 12)
    assert covered / draws >= bound


def test_runs_are_known_by_name_and_by_recipe():
    recipe = {"config": {"task": "bigram-backcopy", "seed": 0}, "step": 64}
    other = {"config": {"task": "bigram-backcopy", "seed": 1}, "step": 64}
    models = ["s0@step64", "s0@step512", "renamed", "copied", "smollm2", "s1@step64"]
    recipes = [recipe, None, {**recipe, "step": 2000}, None, None, other]
    # "renamed" shares s0's recipe config; "copied" is only a name of its own
    assert training_runs(models, recipes) == ("s0", "s0", "s0", "copied", "smollm2", "s1")
    # the relation closes transitively: x is y's run by name, y is s0's by recipe
    assert training_runs(["s0@step1", "y@step1", "y@step2"], [recipe, recipe, None]) == (
        "s0",
        "s0",
        "s0",
    )


def test_too_few_models_or_runs_for_the_interval_are_refused():
    msg = (
        "alpha=0.1 needs at least 9 training models (the CV+ interval takes the "
        "floor(alpha (n + 1))-th smallest of n values); got 6: add models or raise alpha"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(TRAIN[:6])
    assert fit_predictor(TRAIN[:6], alpha=0.2).alpha == 0.2  # floor(0.2 * 7) = 1
    one_run = [dict(r, model=f"s@step{i}") for i, r in enumerate(TRAIN)]
    two_runs = [*one_run[:9], dict(TRAIN[9], model="other")]
    msg = (
        "a predictor needs at least 3 training runs (each is left out in turn to size the "
        "interval); got 2: s, other"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(two_runs)
    msg = "alpha must lie strictly between 0 and 0.5; got 0.5"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(TRAIN, alpha=0.5)


# --- the baseline and the scores ----------------------------------------------------------


def test_the_interval_score_is_gneiting_and_rafterys():
    # width 0.2; a miss by 0.05 costs 2 / 0.2 * 0.05 = 0.5 on either side
    assert interval_score(0.1, 0.3, 0.35, 0.2) == pytest.approx(0.7)
    assert interval_score(0.1, 0.3, 0.05, 0.2) == pytest.approx(0.7)
    assert interval_score(0.1, 0.3, 0.2, 0.2) == pytest.approx(0.2)
    assert interval_score(0.1, 0.3, 0.3, 0.1) == pytest.approx(0.2)  # the end is inside
    with pytest.raises(AttncodaError, match=re.escape("the interval [0.3, 0.1] has low > high")):
        interval_score(0.3, 0.1, 0.2, 0.2)


def test_every_verdict_shows_the_predictor_and_the_baseline_side_by_side():
    predictor = fit_predictor(TRAIN)
    p, b = predictor.apply(INSIDE), predictor.apply_baseline()
    measured = p.point + 0.01
    got = verdict_columns(p, b, measured, predictor.alpha)
    assert list(got) == [
        *SCORE_COLUMNS,
        *(f"baseline_{c}" for c in SCORE_COLUMNS),
        "predicted_rounding",
        "interval_score_rounding",
        "verdict_edge",
        "baseline_rounding",
        "baseline_interval_score_rounding",
        "baseline_edge",
    ]
    # what rounding leaves open: the rows state none, so the rates are exact and the
    # features carry one rounding each; 0.01 from the point is no edge
    assert got["predicted_rounding"] == p.rounding > 0 and got["baseline_rounding"] == 0.0
    assert got["interval_score_rounding"] == pytest.approx(2 / 0.1 * 2 * p.rounding)
    assert got["verdict_edge"] is False and got["baseline_edge"] is False
    assert got["predicted"] == p.point and got["baseline_predicted"] == b.point
    assert got["width"] == pytest.approx(p.high - p.low)
    assert got["baseline_width"] == pytest.approx(b.high - b.low)
    assert got["abs_error"] == pytest.approx(0.01)
    assert got["baseline_abs_error"] == pytest.approx(abs(measured - b.point))
    assert got["interval_score"] == pytest.approx(interval_score(p.low, p.high, measured, 0.1))
    assert got["verdict"] == verdict(p, measured)
    # the baseline is the mean rate of the training models, everywhere
    assert b.point == pytest.approx(np.mean([target(r) for r in TRAIN]))
    assert predictor.apply_baseline() == b
    # an abstention has no scores; the baseline still predicts
    far = verdict_columns(Prediction(abstained=True, reason="x"), b, measured, 0.1)
    assert far["verdict"] == "abstained" and far["width"] is None
    assert far["interval_score"] is None and far["baseline_interval_score"] is not None


def test_a_model_whose_rate_lies_outside_its_interval_fails(tmp_path):
    path = freeze(fit_predictor(TRAIN), tmp_path / "p.json")
    inside = row("new", *INSIDE.values())
    off = {**inside, "model": "off", "flip_rates": {m: 0.9 for m in METRICS}}
    outside = row("far", 0.9, 0.12, 0.33)
    outcomes = apply_predictor(path, [inside, off, outside])
    assert [o["verdict"] for o in outcomes] == ["confirmed", "failed", "abstained"]
    assert [o["baseline_verdict"] for o in outcomes] == ["confirmed", "failed", "confirmed"]
    p = outcomes[1]["prediction"]
    assert not p.abstained and not p.low <= 0.9 <= p.high
    assert outcomes[1]["interval_score"] == pytest.approx(
        (p.high - p.low) + 2 / 0.1 * (0.9 - p.high)
    )


def test_single_metric_target():
    predictor = fit_predictor(TRAIN, target="tv")
    mean = fit_predictor(TRAIN)
    assert predictor.intercept == pytest.approx(mean.intercept + 0.02, abs=1e-12)


def test_file_round_trips_exactly(tmp_path):
    predictor = fit_predictor(GROUPED)
    path = freeze(predictor, tmp_path / "frozen" / "predictor.json")
    loaded = Predictor.from_json(path)
    assert loaded == predictor
    assert Predictor.from_dict(predictor.to_dict()) == predictor
    for probe in (INSIDE, {**INSIDE, "mean_sink_mass": 0.5}):
        assert loaded.apply(probe) == predictor.apply(probe)
    assert loaded.apply_baseline() == predictor.apply_baseline()
    data = json.loads(path.read_text())
    assert data["attncoda_version"] == attncoda.__version__ and data["format"] == 5
    assert data["training_models"] == [r["model"] for r in GROUPED]
    assert data["interval"]["method"] == INTERVAL_METHOD and data["interval"]["alpha"] == 0.1
    assert [f["run"] for f in data["interval"]["left_out_fits"]] == [
        "r1",
        "r2",
        "r3",
        "r4",
        "pretrained-a",
        "pretrained-b",
    ]
    assert set(data["baseline"]["left_out_means"]) == set(predictor.training_runs)
    assert set(data) >= {"features", "coefficients", "intercept", "support", "created"}


# --- abstention outside the joint support ------------------------------------------------

#: Two features that move together over the training models, and a third independent one.
CORRELATED = [
    row(f"m{i}", mass, mass / 2 + wiggle, share)
    for i, (mass, wiggle, share) in enumerate(
        [
            (0.05, 0.01, 0.10),
            (0.10, -0.01, 0.40),
            (0.15, 0.00, 0.20),
            (0.20, 0.01, 0.60),
            (0.25, -0.01, 0.30),
            (0.30, 0.00, 0.50),
            (0.35, 0.01, 0.15),
            (0.40, -0.01, 0.45),
            (0.45, 0.00, 0.35),
            (0.50, 0.01, 0.25),
        ]
    )
]


def test_a_point_inside_every_range_but_outside_the_joint_support_abstains():
    predictor = fit_predictor(CORRELATED)
    # high mass with low spread: each inside its own range, never seen together
    probe = {"mean_sink_mass": 0.48, "std_sink_mass": 0.05, "mean_sink_share": 0.3}
    for name, (lo, hi) in zip(predictor.features, predictor.training_range, strict=True):
        assert lo <= probe[name] <= hi
    # the leverage, against the Mahalanobis distance (h = 1/n + d^2 / (n - 1), np.cov)
    x = np.array([list(r["features"].values()) for r in CORRELATED])
    d = np.array(list(probe.values())) - x.mean(axis=0)
    mahalanobis = d @ np.linalg.inv(np.cov(x, rowvar=False)) @ d
    h = predictor.support.leverage(list(probe.values()))
    assert h == pytest.approx(1 / 10 + mahalanobis / 9, rel=1e-9)
    training = [
        1 / 10 + (v - x.mean(0)) @ np.linalg.inv(np.cov(x, rowvar=False)) @ (v - x.mean(0)) / 9
        for v in x
    ]
    assert predictor.support.max_leverage == pytest.approx(max(training), rel=1e-9)
    p = predictor.apply(probe)
    assert (p.abstained, p.reason, p.point, p.low, p.high, p.edge) == (
        True,
        f"leverage {h:.4g} exceeds the largest training leverage "
        f"{max(training):.4g}: outside the training set's joint support",
        None,
        None,
        None,
        False,
    )
    assert 0 < p.rounding < 1e-6  # the features' rounding through the fit, stated all the same
    assert verdict(p, 0.4) == "abstained"
    # every training model itself lies inside
    assert not any(predictor.apply(r["features"]).abstained for r in CORRELATED)


def test_outside_a_training_range_or_not_finite_it_abstains_with_each_reason():
    predictor = fit_predictor(TRAIN)
    p = predictor.apply({**INSIDE, "mean_sink_mass": 0.91})
    assert p.abstained
    assert p.reason.startswith("leverage ") and p.reason.endswith(
        "; feature mean_sink_mass=0.91 is outside the training range [0.05, 0.55]"
    )
    # just past a range's end, where the support's ellipsoid still reaches: the range alone
    lo, hi = predictor.training_range[1]
    edge = {**INSIDE, "std_sink_mass": hi + 1e-6}
    assert predictor.support.outside(list(edge.values())) == ""
    assert predictor.apply(edge).reason == (
        f"feature std_sink_mass={hi + 1e-6:.6g} is outside the training range [{lo:.6g}, {hi:.6g}]"
    )
    p = predictor.apply({**INSIDE, "std_sink_mass": float("nan")})
    assert p.reason == "feature std_sink_mass=nan is not finite"


def test_inside_the_support_confirmed_or_failed():
    predictor = fit_predictor(TRAIN)
    p = predictor.apply(INSIDE)
    expected = 0.05 + sum(COEF[f] * v for f, v in INSIDE.items())
    assert not p.abstained and p.reason == ""
    assert p.point == pytest.approx(expected, abs=0.01)
    assert (p.low, p.high) == predictor.interval.bounds(list(INSIDE.values()))
    assert verdict(p, p.point) == "confirmed"
    assert verdict(p, p.low) == "confirmed" and verdict(p, p.high) == "confirmed"
    # within the ends' float32 rounding is inside; twice past it is not
    assert 0 < p.rounding < 1e-6
    assert verdict(p, p.high + p.rounding / 2) == "confirmed"
    assert verdict(p, p.low - p.rounding / 2) == "confirmed"
    assert verdict(p, p.high + 2 * p.rounding) == "failed"
    assert verdict(p, p.low - 2 * p.rounding) == "failed"


def test_the_point_and_both_ends_are_clipped_to_probabilities():
    noisy = [
        row(r["model"], *r["features"].values(), noise=n)
        for r, n in zip(
            TRAIN, (0.3, -0.3, 0.2, -0.2, 0.3, -0.3, 0.25, -0.25, 0.1, -0.1), strict=True
        )
    ]
    predictor = fit_predictor(noisy)
    low, high = predictor.interval.bounds(list(TRAIN[0]["features"].values()))
    assert low < 0  # the interval reaches below 0 ...
    p = predictor.apply(TRAIN[0]["features"])
    assert p.low == 0.0 and p.high == pytest.approx(min(1.0, high))  # ... clipped
    # a linear value below 0 predicts a rate of 0; an interval wholly below 0 is [0, 0]
    lowered = dataclasses.replace(
        predictor,
        intercept=predictor.intercept - 5.0,
        interval=dataclasses.replace(
            predictor.interval,
            fits=tuple(
                dataclasses.replace(f, intercept=f.intercept - 5.0) for f in predictor.interval.fits
            ),
        ),
    )
    q = lowered.apply(TRAIN[0]["features"])
    assert (q.point, q.low, q.high) == (0.0, 0.0, 0.0)
    assert verdict(q, 0.0) == "confirmed" and verdict(q, 0.01) == "failed"


def test_verdict_and_apply_errors():
    predictor = fit_predictor(TRAIN)
    p = predictor.apply(TRAIN[0]["features"])
    msg = "measured flip rate must be a finite number; got nan"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        verdict(p, float("nan"))
    msg = (
        "features lack 'mean_sink_share'; this predictor uses mean_sink_mass, std_sink_mass, "
        "mean_sink_share"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        predictor.apply({"mean_sink_mass": 0.1, "std_sink_mass": 0.1})


def test_fit_errors():
    msg = (
        "a predictor needs at least 3 training models (each run is left out in turn to size "
        "the interval); got 2"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(TRAIN[:2])
    msg = "model 'a' appears twice among the training rows"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor([*TRAIN, TRAIN[0]])
    short = {**TRAIN[1], "flip_rates": {"tv": 0.2}}
    msg = (
        "model 'b' has flip rates for ['tv'], the first model for ['cosine', 'entropy_gap', "
        "'hellinger', 'jsd', 'tv']: every training row needs the same metrics"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor([TRAIN[0], short, *TRAIN[2:]])
    msg = "target must be 'mean' or one of the metrics cosine, jsd, entropy_gap, hellinger, tv"
    with pytest.raises(AttncodaError, match=re.escape(msg + "; got 'kl'")):
        fit_predictor(TRAIN, target="kl")
    lacking = {**TRAIN[1], "features": {"mean_sink_mass": 0.2, "std_sink_mass": 0.1}}
    msg = "model 'b' lacks the feature 'mean_sink_share'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor([TRAIN[0], lacking, *TRAIN[2:]])
    nan_rate = {**TRAIN[1], "flip_rates": {**TRAIN[1]["flip_rates"], "jsd": float("nan")}}
    msg = "model 'b' has flip rate nan for 'jsd': not finite"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor([TRAIN[0], nan_rate, *TRAIN[2:]])
    msg = "training row 1 lacks the key 'flip_rates'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor([TRAIN[0], {"model": "x", "features": {}}, *TRAIN[2:]])
    flat = [{**r, "features": {**r["features"], "std_sink_mass": 0.1}} for r in TRAIN]
    msg = (
        "feature 'std_sink_mass' is constant over the training models: it cannot be fitted; "
        "drop it or add models where it varies"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(flat)
    twice = [
        {**r, "features": {**r["features"], "mean_sink_share": 2 * r["features"]["mean_sink_mass"]}}
        for r in TRAIN
    ]
    msg = (
        "the training features mean_sink_mass, std_sink_mass, mean_sink_share and the "
        "intercept have rank 3 of 4 over 10 models: their joint support is flat"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(twice)


# --- malformed files ------------------------------------------------------------------------


@pytest.fixture
def frozen(tmp_path):
    path = freeze(fit_predictor(TRAIN), tmp_path / "p.json")
    return path, json.loads(path.read_text())


def rewrite(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "key", ["coefficients", "training_range", "created", "intercept", "support", "baseline"]
)
def test_missing_key(frozen, key):
    path, data = frozen
    del data[key]
    msg = f"invalid predictor file {str(path)!r}: missing key {key!r}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"coefficients": [0.1, 0.2]},
            "key 'coefficients' must be a list of 3 finite numbers; got [0.1, 0.2]",
        ),
        ({"intercept": "0.1"}, "key 'intercept' must be a finite number; got '0.1'"),
        ({"features": []}, "key 'features' must be a non-empty list of strings; got []"),
        ({"created": 5}, "key 'created' must be a string; got 5"),
        (
            {"kind": "other"},
            "key 'kind'/'format' must be 'attncoda.flip_rate_predictor'/5; got 'other'/5",
        ),
    ],
)
def test_invalid_value(frozen, change, expected):
    path, data = frozen
    data.update(change)
    msg = f"invalid predictor file {str(path)!r}: {expected}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


@pytest.mark.parametrize(
    ("key", "change", "expected"),
    [
        ("interval", {"alpha": 0.6}, "alpha must lie strictly between 0 and 0.5; got 0.6"),
        ("interval", {"alpha": 0.05}, "alpha=0.05 needs at least 19 training models"),
        ("interval", {"residuals": [0.1]}, "key 'residuals' must be a list of 10 finite"),
        ("interval", {"runs": ["a"]}, "runs must name the run of each of the 10 training models"),
        ("interval", {"left_out_fits": []}, "left_out_fits must be one {run, coefficients"),
        ("baseline", {"left_out_means": {"a": 0.1}}, "left_out_means must map each run (a, b"),
        ("support", {"max_leverage": 1.5}, "max_leverage must lie in (0, 1]; got 1.5"),
        ("support", {"gram_inverse": [[1.0]]}, "gram_inverse must be 4 rows of 4 numbers"),
    ],
)
def test_invalid_interval_baseline_or_support(frozen, key, change, expected):
    path, data = frozen
    data[key] = {**data[key], **change}
    with pytest.raises(AttncodaError, match=re.escape(f"key {key!r}")) as err:
        Predictor.from_json(rewrite(path, data))
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("fmt", "said"),
    [
        (1, "format 1 (an interval floor set by hand) is no longer read"),
        (2, "format 2 records no protocol"),
        (3, "format 3 (a leave-one-out interval that kept a left-out checkpoint's sister"),
        (4, "format 4 states no rounding of its training models' rates and features"),
    ],
)
def test_older_formats_are_refused_with_the_reason(frozen, fmt, said):
    path, data = frozen
    data["format"] = fmt
    msg = f"invalid predictor file {str(path)!r}: {said}"
    with pytest.raises(AttncodaError, match=re.escape(msg)) as err:
        Predictor.from_json(rewrite(path, data))
    assert str(err.value).endswith(
        "refit it with 'attncoda predictor fit' (CV+ interval over runs)"
    )


def test_invalid_training_range(frozen):
    path, data = frozen
    data["training_range"] = {"mean_sink_mass": [0.1, 0.2]}
    msg = (
        f"invalid predictor file {str(path)!r}: key 'training_range' must map each feature to "
        "[min, max]; got {'mean_sink_mass': [0.1, 0.2]}"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))
    data["training_range"] = {f: [0.3, 0.2] for f in FEATURES}
    with pytest.raises(AttncodaError, match=re.escape("key 'training_range' has min > max")):
        Predictor.from_json(rewrite(path, data))


def test_not_a_predictor_file(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    msg = f"invalid predictor file {str(path)!r}: expected a JSON object; got list"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(path)
    path.write_text("{not json")
    with pytest.raises(AttncodaError, match=re.escape(f"{str(path)!r} is not valid JSON")):
        Predictor.from_json(path)
    missing = tmp_path / "absent.json"
    with pytest.raises(AttncodaError, match=re.escape(f"no such file: {str(missing)!r}")):
        Predictor.from_json(missing)


# --- features from captured rows ------------------------------------------------------------


def head_rows(seed):
    rng = np.random.default_rng(seed)
    n, keys = 6, 8
    bias = rng.uniform(-1, 3, size=n)
    mask = np.arange(keys)[None, :] < np.arange(3, keys + 1)[:, None]
    docs = []
    for _ in range(2):
        z = rng.normal(size=(n, mask.shape[0], keys))
        z[:, :, 0] += bias[:, None]
        z = np.where(mask[None], z, -np.inf)
        logp = z - np.log(np.exp(z).sum(axis=2, keepdims=True))
        docs.append(DocRows(np.where(mask[None], logp, 0.0), mask, (0,)))
    mass = np.exp(np.stack([d.logp[:, :, 0] for d in docs])).mean(axis=(0, 2))
    return HeadRows(f"model-{seed}", 2, 3, tuple(docs), mass)


def test_features_and_rows_from_head_rows():
    hr = head_rows(1)
    feats = sink_features(hr)
    assert set(feats) == set(FEATURES)
    assert feats["mean_sink_mass"] == pytest.approx(hr.sink_mass.mean())
    assert feats["std_sink_mass"] == pytest.approx(hr.sink_mass.std())
    assert feats["mean_sink_share"] == mean_squared_split(hr).sink_share
    assert 0 < feats["mean_sink_share"] < 1
    result = flips(hr, ("tv", "jsd"), n_boot=3)
    r = predictor_row(hr, result)
    assert r["model"] == "model-1" and r["features"] == feats
    assert r["flip_rates"] == dict(
        zip(result.table["metric"], result.table["flip_rate"], strict=True)
    )
    rows = [predictor_row(h, flips(h, ("tv", "jsd"), n_boot=3)) for h in map(head_rows, range(4))]
    predictor = fit_predictor(rows, alpha=0.2)
    inside = predictor.apply(rows[0]["features"])
    assert not inside.abstained
    msg = "flips_result is for model 'model-1', not 'model-2'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        predictor_row(head_rows(2), result)


# ----------------------------------------------------------- training models by content

RECIPE_A = {"config": {"task": "bigram-backcopy", "seed": 0, "steps": 2000}, "step": 2000}
RECIPE_B = {"config": {"task": "bigram-backcopy", "seed": 1, "steps": 2000}, "step": 2000}


#: A weights sketch of "a" (any 128 numbers: only distances between sketches matter).
SKETCH_A = np.random.default_rng(1).normal(size=128).tolist()


def _identified():
    """TRAIN with identities: "a" a checkpoint (hash, sketch, recipe), "b" a pretrained model
    known by its hash only."""
    rows = [dict(r) for r in TRAIN]
    rows[0]["identity"] = {
        "weights_sha256": "sha256:aa",
        "weights_sketch": SKETCH_A,
        "recipe": RECIPE_A,
    }
    rows[1]["identity"] = {"weights_sha256": "sha256:bb", "recipe": None}
    return rows


def test_a_training_model_is_matched_by_weights_then_recipe_then_name(tmp_path):
    predictor = fit_predictor(_identified())
    # the fit is the same with or without identities: they only name the training models
    plain = fit_predictor(TRAIN)
    assert predictor.coefficients == plain.coefficients and plain.identities == ()
    match = predictor.training_match
    assert match(["x"], {"weights_sha256": "sha256:bb", "recipe": None}) == ("b", "weights")
    assert match(["x"], {"weights_sha256": "sha256:aa", "recipe": RECIPE_B}) == ("a", "weights")
    # a retrained checkpoint whose weights differ in rounding: the same recipe
    recipe = json.loads(json.dumps(RECIPE_A))  # key order and a JSON round trip do not matter
    assert match(["x"], {"weights_sha256": "sha256:cc", "recipe": recipe}) == ("a", "recipe")
    assert match(["c", "x"], {"weights_sha256": "sha256:cc", "recipe": None}) == ("c", "name")
    assert match(["c"]) == ("c", "name")
    # unseen: another recipe (seed 1), other weights, another name
    assert match(["x"], {"weights_sha256": "sha256:cc", "recipe": RECIPE_B}) is None
    assert match(["x"]) is None
    # the identities travel with the file
    path = freeze(predictor, tmp_path / "p.json")
    loaded = Predictor.from_json(path)
    assert loaded == predictor and loaded.identities == predictor.identities
    data = json.loads(path.read_text())
    assert data["training_identity"] == {
        "a": {"weights_sha256": "sha256:aa", "weights_sketch": SKETCH_A, "recipe": RECIPE_A},
        "b": {"weights_sha256": "sha256:bb", "weights_sketch": None, "recipe": None},
    }
    # a file that records none: names only
    data["training_identity"] = {}
    assert Predictor.from_dict(data).identities == ()


def test_a_near_copy_of_a_training_model_is_that_model():
    """The same weights rounded (bfloat16, another fine quantisation) have another hash; their
    sketch lies within NEAR_COPY (relative) of the training model's."""
    from attncoda.training.identity import NEAR_COPY

    predictor = fit_predictor(_identified())
    scale = np.linalg.norm(SKETCH_A)
    unit = np.zeros(len(SKETCH_A))
    unit[0] = 1.0
    near = (np.array(SKETCH_A) + 0.9 * NEAR_COPY * scale * unit).tolist()
    far = (np.array(SKETCH_A) + 1.1 * NEAR_COPY * scale * unit).tolist()
    rounded = {"weights_sha256": "sha256:rounded", "weights_sketch": near, "recipe": None}
    assert predictor.training_match(["x"], rounded) == ("a", "near copy")
    assert predictor.relation(["x"], rounded).relation == "training"
    other = {"weights_sha256": "sha256:other", "weights_sketch": far, "recipe": None}
    assert predictor.training_match(["x"], other) is None
    # equal hashes come first
    same = {"weights_sha256": "sha256:bb", "weights_sketch": near, "recipe": None}
    assert predictor.training_match(["x"], same) == ("b", "weights")
    (outcome,) = apply_predictor(predictor, [{**row("x", *INSIDE.values()), "identity": rounded}])
    assert outcome["matched"] == ("a", "near copy") and not outcome["counted"]


def test_apply_says_which_training_model_a_row_is():
    predictor = fit_predictor(_identified())
    probe = row("renamed", *INSIDE.values())
    probe["identity"] = {"weights_sha256": "sha256:zz", "recipe": RECIPE_A}
    unseen = row("new", *INSIDE.values())
    outcomes = apply_predictor(predictor, [probe, unseen, row("d", *INSIDE.values())])
    assert [o["matched"] for o in outcomes] == [("a", "recipe"), None, ("d", "name")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], "must map training models to their identity; got []"),
        (
            {"zz": {"weights_sha256": None, "weights_sketch": None, "recipe": None}},
            "names 'zz', which is no training",
        ),
        (
            {"a": {"weights_sha256": None, "recipe": None}},
            "for 'a' must hold exactly 'weights_sha256', 'weights_sketch' and 'recipe'",
        ),
        (
            {"a": {"weights_sha256": 5, "weights_sketch": None, "recipe": None}},
            "for 'a': weights_sha256 5 is not a string",
        ),
        (
            {"a": {"weights_sha256": None, "weights_sketch": None, "recipe": [1]}},
            "for 'a': recipe [1] is not an object",
        ),
        (
            {"a": {"weights_sha256": None, "weights_sketch": [1.0], "recipe": None}},
            "for 'a': weights_sketch must be a list of 128 numbers or null; got [1.0]",
        ),
    ],
)
def test_invalid_training_identity(frozen, value, expected):
    path, data = frozen
    data["training_identity"] = value
    msg = f"invalid predictor file {str(path)!r}: key 'training_identity' {expected}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


# the protocol: a verdict only on rows that read what the fit's read ---------------------

TASK = "5d6f1f6a7e8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d"
#: A Bigram-Backcopy checkpoint's row: 16 of its task's sequences, 64 tokens each as read.
TASK_PROTOCOL = {
    **PROTOCOL,
    "corpus": "bigram-backcopy",
    "corpus_sha256": TASK,
    "window_tokens": 64,
}


def _mixed():
    """TRAIN whose last four models are Bigram-Backcopy checkpoints (task sequences)."""
    return [dict(r, protocol=dict(TASK_PROTOCOL)) if i >= 6 else r for i, r in enumerate(TRAIN)]


def test_the_predictor_records_what_its_rows_read_and_the_file_keeps_it(tmp_path):
    predictor = fit_predictor(TRAIN)
    assert predictor.protocol == Protocol.of_rows([{"model": "a", "protocol": PROTOCOL}])
    assert predictor.protocol.describe() == (
        "16 windows of 128 tokens of the embedded corpus; sink first, seed 0"
    )
    data = json.loads(freeze(predictor, tmp_path / "p.json").read_text())
    assert data["protocol"] == {
        "readings": [
            {"corpus": "embedded", "corpus_sha256": EMBEDDED, "windows": 16, "window_tokens": 128}
        ],
        "sink": "first",
        "seed": 0,
        "metrics": list(METRICS),
        "tol": 1e-6,
    }
    assert Predictor.from_json(tmp_path / "p.json").protocol == predictor.protocol


def test_text_rows_and_task_rows_are_each_on_protocol():
    predictor = fit_predictor(_mixed())
    assert predictor.protocol is not None
    assert [r.corpus for r in predictor.protocol.readings] == ["embedded", "bigram-backcopy"]
    assert predictor.protocol.describe() == (
        "16 windows of 128 tokens of the embedded corpus, or 16 task sequences of 64 tokens of "
        "the bigram-backcopy task; sink first, seed 0"
    )
    # the run reads 16 windows of 128 tokens: a checkpoint cuts its task sequences to 64
    assert predictor.protocol.rows_at() == {"docs": 16, "max_tokens": 128}
    text, task = row("new", *INSIDE.values()), {**row("ckpt", *INSIDE.values())}
    task["protocol"] = dict(TASK_PROTOCOL)
    asked = {**task, "model": "asked", "protocol": {**TASK_PROTOCOL, "window_tokens": 128}}
    other_task = {
        **task,
        "model": "triggers5",
        "protocol": {**TASK_PROTOCOL, "corpus_sha256": "f" * 64},
    }
    outcomes = apply_predictor(predictor, [text, task, asked, other_task])
    assert [o["off_protocol"] for o in outcomes[:2]] == [[], []]
    # the task's sequences recorded as 128-token windows is not what was read
    assert outcomes[2]["off_protocol"] == ["window_tokens 128, not 64"]
    assert outcomes[3]["off_protocol"] == [
        "corpus 'bigram-backcopy' (sha256 ffffffffffff), not 'embedded' or 'bigram-backcopy'"
    ]
    assert outcomes[3]["verdict"] == outcomes[3]["baseline_verdict"] == OFF_PROTOCOL


def test_rows_read_with_different_protocols_are_not_fitted_together():
    rows = [dict(r) for r in TRAIN]
    rows[2]["protocol"] = {**PROTOCOL, "windows": 4}
    with pytest.raises(
        AttncodaError,
        match=r"model 'c' was read with another protocol than 'a' "
        r"\(windows 4, not 16\): fit on rows read one way",
    ):
        fit_predictor(rows)
    rows[2]["protocol"] = {**PROTOCOL, "metrics": ["cosine"]}
    with pytest.raises(AttncodaError, match="metrics"):
        fit_predictor(rows)
    # task rows read another corpus, but the run's one window count
    mixed = _mixed()
    mixed[7]["protocol"] = {**TASK_PROTOCOL, "windows": 8}
    with pytest.raises(AttncodaError, match=r"model 'h' .* than 'g' \(windows 8, not 16\)"):
        fit_predictor(mixed)


def test_a_predictor_fitted_on_rows_without_protocol_is_never_frozen_and_gives_no_verdict(
    tmp_path,
):
    bare = [{k: v for k, v in r.items() if k != "protocol"} for r in TRAIN]
    predictor = fit_predictor(bare)
    assert predictor.protocol is None
    with pytest.raises(AttncodaError, match="records no protocol, so it cannot be frozen"):
        freeze(predictor, tmp_path / "p.json")
    (outcome,) = apply_predictor(predictor, [row("new", *INSIDE.values())])
    assert outcome["verdict"] == OFF_PROTOCOL and not outcome["counted"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {
                "readings": [
                    {
                        "corpus": "embedded",
                        "corpus_sha256": EMBEDDED,
                        "windows": "16",
                        "window_tokens": 128,
                    }
                ],
                "sink": "first",
                "seed": 0,
                "metrics": list(METRICS),
                "tol": 1e-6,
            },
            "protocol windows must be a positive whole number; got '16'",
        ),
        (
            {"readings": [], "sink": "first", "seed": 0, "metrics": list(METRICS), "tol": 1e-6},
            "protocol readings must be a non-empty list; got []",
        ),
        ({"windows": 16}, "a protocol must hold exactly readings, sink, seed, metrics, tol"),
    ],
)
def test_invalid_protocol(frozen, value, expected):
    path, data = frozen
    data["protocol"] = value
    msg = f"invalid predictor file {str(path)!r}: key 'protocol': {expected}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"windows": 4}, "windows 4, not 16"),  # the demo scale's rows
        ({"window_tokens": 64}, "window_tokens 64, not 128"),
        ({"corpus": "my.txt", "corpus_sha256": "a" * 64}, "corpus 'my.txt' (sha256 aaaaaaaaaaaa)"),
        ({"sink": "bos"}, "sink 'bos', not 'first'"),
        ({"seed": 1}, "seed 1, not 0"),
        ({"metrics": ["cosine"]}, "metrics ['cosine'], not ['cosine', 'jsd'"),
        ({"tol": 0.0}, "tol 0.0, not 1e-06"),
        (
            {"windows": None, "corpus": "given attention", "corpus_sha256": None},
            "corpus 'given attention' (no sha256), not 'embedded'",
        ),
    ],
)
def test_a_row_read_off_protocol_gets_no_verdict_and_is_never_counted(change, said):
    predictor = fit_predictor(TRAIN)
    inside = row("new", *INSIDE.values())  # well inside the interval: on protocol, confirmed
    off = {**inside, "protocol": {**PROTOCOL, **change}}
    missing = {k: v for k, v in inside.items() if k != "protocol"}
    on, away, bare = apply_predictor(predictor, [inside, off, missing])
    assert on["verdict"] == "confirmed" and on["counted"] and on["off_protocol"] == []
    assert away["verdict"] == away["baseline_verdict"] == OFF_PROTOCOL and not away["counted"]
    assert any(d.startswith(said) for d in away["off_protocol"]), away["off_protocol"]
    # the predictions are still made (shown), only the verdicts are withheld
    assert away["prediction"] == on["prediction"] and away["baseline"] == on["baseline"]
    assert bare["verdict"] == OFF_PROTOCOL and "windows not recorded" in bare["off_protocol"]


# held out, or a checkpoint of a training run ----------------------------------------------

RUN_A = {"task": "bigram-backcopy", "seed": 0, "steps": 2000}


def _run_rows():
    """TRAIN whose "a", "b", "c" are steps 64, 512 and 2000 of one train-tiny run."""
    rows = [dict(r) for r in TRAIN]
    for i, step in enumerate((64, 512, 2000)):
        rows[i]["identity"] = {
            "weights_sha256": f"sha256:{i}",
            "recipe": {"config": RUN_A, "step": step},
        }
    return rows


@pytest.mark.parametrize(
    ("recipe", "relation"),
    [
        ({"config": RUN_A, "step": 1000}, "interpolated"),  # between steps 512 and 2000
        ({"config": RUN_A, "step": 64}, "training"),  # the recipe of "a"
        ({"config": RUN_A, "step": 0}, "same run"),  # before its first training checkpoint
        ({"config": {**RUN_A, "seed": 2}, "step": 1000}, "held out"),  # another run
        ({"config": {**RUN_A, "steps": 1000}, "step": 1000}, "held out"),  # another schedule
    ],
)
def test_only_a_checkpoint_of_no_training_run_is_held_out(recipe, relation):
    predictor = fit_predictor(_run_rows())
    found = predictor.relation(["x"], {"weights_sha256": "sha256:new", "recipe": recipe})
    assert found.relation == relation
    assert found.held_out == (relation == "held out")
    if relation in ("interpolated", "same run"):
        assert found.models == ("a", "b", "c") and found.how == "recipe"
    probe = {**row("x", *INSIDE.values()), "identity": {"weights_sha256": None, "recipe": recipe}}
    (outcome,) = apply_predictor(predictor, [probe])
    assert outcome["verdict"] == "confirmed"  # given, but counted only when held out
    assert outcome["counted"] == (relation == "held out")


def test_a_checkpoint_of_a_training_run_is_known_by_name_too():
    names = ("s0@step64", "s0@step512", "s0@step2000", "s1@step128", "smollm2", "minilm")
    rows = [dict(r, model=m) for r, m in zip(TRAIN, (*names, "p", "q", "r", "s"), strict=True)]
    predictor = fit_predictor(rows)
    rel = predictor.relation
    assert rel(["s0@step1000"]).relation == "interpolated"
    assert rel(["s0@step0"]).relation == "same run"
    assert rel(["s0@step1000"]).models == ("s0@step64", "s0@step512", "s0@step2000")
    assert rel(["s1@step512"]).relation == "same run"  # s1 gave one checkpoint, step 128
    assert rel(["s2@step1000"]).relation == "held out"
    assert rel(["gemma3"]).relation == "held out"
    assert rel(["smollm2"]).relation == "training"


def test_standing_of_a_table_row():
    base = {
        "counted": False,
        "off_protocol": "",
        "matched_training_model": "",
        "matched_by": "",
        "run_training_models": "",
    }
    assert standing({**base, "counted": True, "relation": "held out"}) == (True, "held out")
    assert standing(
        {**base, "relation": "training", "matched_training_model": "a", "matched_by": "recipe"}
    ) == (False, "training model: a (recipe)")
    assert standing({**base, "relation": "interpolated", "run_training_models": "a, b"}) == (
        False,
        "interpolated: a checkpoint of the run of a, b",
    )
    said = standing({**base, "relation": "held out", "off_protocol": "windows 4, not 16"})
    assert said == (False, f"{OFF_PROTOCOL} (windows 4, not 16); held out")
    assert standing({"relation": "held out", "verdict": "confirmed"})[0] is False  # old table
