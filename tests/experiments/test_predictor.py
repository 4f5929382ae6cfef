"""Predictor: the fit, the frozen file (round trip and malformed files), abstention outside the
training range, and the verdicts."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

import attncoda
from attncoda import AttncodaError
from attncoda.experiments.contract import DocRows, HeadRows
from attncoda.experiments.flips import flips
from attncoda.experiments.predictor import (
    FEATURES,
    OFF_PROTOCOL,
    Prediction,
    Predictor,
    Protocol,
    apply_predictor,
    fit_predictor,
    predictor_row,
    protocol_of,
    sink_features,
    standing,
    verdict,
)
from attncoda.experiments.safety import mean_squared_split
from attncoda.store import atomic_write_json

METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
COEF = {"mean_sink_mass": 0.3, "std_sink_mass": 0.8, "mean_sink_share": 0.2}
#: How every row below was read (the shipped fit's protocol).
PROTOCOL = protocol_of(
    windows=16, window_tokens=128, corpus=None, sink="first", seed=0, metrics=METRICS, tol=1e-6
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


TRAIN = [
    row("a", 0.05, 0.02, 0.10, 0.004),
    row("b", 0.20, 0.10, 0.30, -0.003),
    row("c", 0.40, 0.15, 0.20, 0.002),
    row("d", 0.55, 0.25, 0.60, -0.001),
    row("e", 0.30, 0.05, 0.45, 0.003),
    row("f", 0.10, 0.20, 0.35, -0.004),
]


def test_fit_recovers_a_linear_law_and_records_what_it_was_fitted_on():
    exact = [row(r["model"], *r["features"].values()) for r in TRAIN]
    predictor = fit_predictor(exact)
    assert predictor.features == FEATURES
    np.testing.assert_allclose(predictor.coefficients, [COEF[f] for f in FEATURES], atol=1e-12)
    assert predictor.intercept == pytest.approx(0.05, abs=1e-12)
    assert predictor.residual_std == pytest.approx(0.0, abs=1e-12)
    # An exact law: every left-out model is predicted exactly, so the interval has no width.
    assert predictor.half_width == pytest.approx(0.0, abs=1e-12)
    assert len(predictor.loo_residuals) == 6 and predictor.coverage == 0.8
    assert predictor.training_models == ("a", "b", "c", "d", "e", "f")
    assert predictor.training_range == ((0.05, 0.55), (0.02, 0.25), (0.10, 0.60))
    assert predictor.metrics == METRICS and predictor.target == "mean"
    assert predictor.version == attncoda.__version__


def _loo_by_hand(rows):
    """Leave-one-out residuals from a plain least-squares fit with an intercept column."""
    x = np.array([[1.0, *r["features"].values()] for r in rows])
    y = np.array([np.mean(list(r["flip_rates"].values())) for r in rows])
    out = []
    for i in range(len(rows)):
        keep = np.arange(len(rows)) != i
        beta = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        out.append(y[i] - x[i] @ beta)
    return np.array(out)


def test_interval_comes_from_leave_one_out_residuals():
    predictor = fit_predictor(TRAIN)
    expected = _loo_by_hand(TRAIN)  # 5 points, 4 parameters: each refit is unique
    # Standardised and raw least squares agree to rounding (condition numbers ~1e2).
    np.testing.assert_allclose(predictor.loo_residuals, expected, rtol=0, atol=1e-10)
    # n = 6, coverage 0.8: k = ceil(7 * 0.8) = 6, the largest |residual|.
    assert predictor.half_width == pytest.approx(np.abs(expected).max(), abs=1e-10)
    assert predictor.residual_std is not None and predictor.residual_std > 0
    half = fit_predictor(TRAIN, coverage=0.5)  # k = ceil(3.5) = 4
    assert half.half_width == pytest.approx(np.sort(np.abs(expected))[3], abs=1e-10)


def test_too_few_models_for_the_interval_are_refused():
    msg = "coverage=0.8 needs at least 4 training models; got 3: add models or lower coverage"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(TRAIN[:3])
    # Three features, four models: the minimum-norm fit still passes through all four.
    full = fit_predictor(TRAIN[:4])
    assert full.residual_std is None
    for r in TRAIN[:4]:
        assert full.apply(r["features"]).point == pytest.approx(
            np.mean(list(r["flip_rates"].values())), abs=1e-12
        )


def test_a_model_whose_rate_lies_outside_its_interval_fails(tmp_path):
    from attncoda.experiments.predictor import apply_predictor

    path = freeze(fit_predictor(TRAIN), tmp_path / "p.json")
    inside = row("new", 0.25, 0.12, 0.33)
    off = {**inside, "model": "off", "flip_rates": {m: 0.9 for m in METRICS}}
    outside = row("far", 0.9, 0.12, 0.33)
    outcomes = apply_predictor(path, [inside, off, outside])
    assert [o["verdict"] for o in outcomes] == ["confirmed", "failed", "abstained"]
    p = outcomes[1]["prediction"]
    assert not p.abstained and not p.low <= 0.9 <= p.high


def test_single_metric_target():
    predictor = fit_predictor(TRAIN, target="tv")
    mean = fit_predictor(TRAIN)
    assert predictor.intercept == pytest.approx(mean.intercept + 0.02, abs=1e-12)


def test_file_round_trips_exactly(tmp_path):
    predictor = fit_predictor(TRAIN)
    path = freeze(predictor, tmp_path / "frozen" / "predictor.json")
    loaded = Predictor.from_json(path)
    assert loaded == predictor
    assert Predictor.from_dict(predictor.to_dict()) == predictor
    probe = {"mean_sink_mass": 0.33, "std_sink_mass": 0.11, "mean_sink_share": 0.41}
    assert loaded.apply(probe) == predictor.apply(probe)
    data = json.loads(path.read_text())
    assert data["attncoda_version"] == attncoda.__version__
    assert data["training_models"] == ["a", "b", "c", "d", "e", "f"]
    assert data["training_range"]["std_sink_mass"] == [0.02, 0.25]
    assert set(data) >= {"features", "coefficients", "intercept", "interval_half_width", "created"}


def test_outside_the_training_range_it_abstains_with_the_reason():
    predictor = fit_predictor(TRAIN)
    p = predictor.apply({"mean_sink_mass": 0.91, "std_sink_mass": 0.1, "mean_sink_share": 0.3})
    assert p == Prediction(
        abstained=True,
        reason="feature mean_sink_mass=0.91 is outside the training range [0.05, 0.55]",
    )
    assert verdict(p, 0.4) == "abstained"
    p = predictor.apply(
        {"mean_sink_mass": 0.01, "std_sink_mass": float("nan"), "mean_sink_share": 0.3}
    )
    assert p.reason == (
        "feature mean_sink_mass=0.01 is outside the training range [0.05, 0.55]; "
        "feature std_sink_mass=nan is not finite"
    )


def test_inside_the_range_confirmed_or_failed():
    predictor = fit_predictor(TRAIN)
    features = {"mean_sink_mass": 0.25, "std_sink_mass": 0.12, "mean_sink_share": 0.33}
    p = predictor.apply(features)
    expected = 0.05 + sum(COEF[f] * v for f, v in features.items())
    assert not p.abstained and p.reason == ""
    assert p.point == pytest.approx(expected, abs=0.01)
    assert p.low == p.point - predictor.half_width and p.high == p.point + predictor.half_width
    assert verdict(p, p.point) == "confirmed"
    assert verdict(p, p.low) == "confirmed" and verdict(p, p.high) == "confirmed"
    assert verdict(p, p.high + 1e-9) == "failed"
    assert verdict(p, p.low - 1e-9) == "failed"


def test_interval_is_clipped_to_probabilities():
    noisy = [
        row(r["model"], *r["features"].values(), noise=n)
        for r, n in zip(TRAIN, (0.3, -0.3, 0.2, -0.2, 0.3, -0.3), strict=True)
    ]
    predictor = fit_predictor(noisy)
    p = predictor.apply(TRAIN[0]["features"])
    assert p.point - predictor.half_width < 0  # the interval reaches below 0 ...
    assert p.low == 0.0 and p.high == pytest.approx(p.point + predictor.half_width)  # ... clipped
    # A linear value below 0 predicts a rate of 0, and an interval that lies wholly below 0
    # is [0, 0], never low > high: here the linear value is p.point - 1, far below -half_width.
    lowered = dataclasses.replace(predictor, intercept=predictor.intercept - 1.0)
    q = lowered.apply(TRAIN[0]["features"])
    assert p.point - 1.0 + predictor.half_width < 0
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
        "a predictor needs at least 3 training models (each is left out in turn to size the "
        "interval); got 2"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(TRAIN[:2])
    msg = "model 'a' appears twice among the training rows"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor([TRAIN[0], TRAIN[1], TRAIN[2], TRAIN[0]])
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
    msg = "coverage must lie strictly between 0 and 1; got 1.0"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        fit_predictor(TRAIN, coverage=1.0)


# --- malformed files ------------------------------------------------------------------------


@pytest.fixture
def frozen(tmp_path):
    path = freeze(fit_predictor(TRAIN), tmp_path / "p.json")
    return path, json.loads(path.read_text())


def rewrite(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("key", ["coefficients", "training_range", "created", "intercept"])
def test_missing_key(frozen, key):
    path, data = frozen
    del data[key]
    msg = f"invalid predictor file {str(path)!r}: missing key {key!r}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "coefficients",
            [0.1, 0.2],
            "key 'coefficients' must be a list of 3 finite numbers; got [0.1, 0.2]",
        ),
        ("intercept", "0.1", "key 'intercept' must be a finite number; got '0.1'"),
        ("interval_half_width", -0.1, "key 'interval_half_width' must be at least 0; got -0.1"),
        ("coverage", 1.5, "key 'coverage' must lie strictly between 0 and 1; got 1.5"),
        (
            "loo_residuals",
            [0.1],
            "key 'loo_residuals' must be a list of 6 finite numbers; got [0.1]",
        ),
        ("features", [], "key 'features' must be a non-empty list of strings; got []"),
        ("created", 5, "key 'created' must be a string; got 5"),
        (
            "kind",
            "other",
            "key 'kind'/'format' must be 'attncoda.flip_rate_predictor'/3; got 'other'/3",
        ),
    ],
)
def test_invalid_value(frozen, key, value, expected):
    path, data = frozen
    data[key] = value
    msg = f"invalid predictor file {str(path)!r}: {expected}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


def test_a_format_1_file_with_a_hand_set_floor_is_refused(frozen):
    path, data = frozen
    data["format"] = 1
    del data["coverage"], data["loo_residuals"]
    msg = (
        f"invalid predictor file {str(path)!r}: format 1 (an interval floor set by hand) is no "
        "longer read; refit it with 'attncoda predictor fit' (leave-one-out interval)"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


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
    predictor = fit_predictor(rows)
    inside = predictor.apply(rows[0]["features"])
    assert not inside.abstained
    msg = "flips_result is for model 'model-1', not 'model-2'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        predictor_row(head_rows(2), result)


# ----------------------------------------------------------- training models by content

RECIPE_A = {"config": {"task": "bigram-backcopy", "seed": 0, "steps": 2000}, "step": 2000}
RECIPE_B = {"config": {"task": "bigram-backcopy", "seed": 1, "steps": 2000}, "step": 2000}


def _identified():
    """TRAIN with identities: "a" a checkpoint (hash and recipe), "b" a pretrained model."""
    rows = [dict(r) for r in TRAIN]
    rows[0]["identity"] = {"weights_sha256": "sha256:aa", "recipe": RECIPE_A}
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
        "a": {"weights_sha256": "sha256:aa", "recipe": RECIPE_A},
        "b": {"weights_sha256": "sha256:bb", "recipe": None},
    }
    # a file that records none is read as before: names only
    del data["training_identity"]
    assert Predictor.from_dict(data).identities == ()


def test_apply_says_which_training_model_a_row_is():
    predictor = fit_predictor(_identified())
    probe = row("renamed", 0.30, 0.10, 0.30)
    probe["identity"] = {"weights_sha256": "sha256:zz", "recipe": RECIPE_A}
    unseen = row("new", 0.30, 0.10, 0.30)
    outcomes = apply_predictor(predictor, [probe, unseen, row("d", 0.3, 0.1, 0.3)])
    assert [o["matched"] for o in outcomes] == [("a", "recipe"), None, ("d", "name")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], "must map training models to their identity; got []"),
        ({"zz": {"weights_sha256": None, "recipe": None}}, "names 'zz', which is no training"),
        (
            {"a": {"weights_sha256": None}},
            "for 'a' must hold exactly 'weights_sha256' and 'recipe'",
        ),
        ({"a": {"weights_sha256": 5, "recipe": None}}, "for 'a': weights_sha256 5 is not a string"),
        ({"a": {"weights_sha256": None, "recipe": [1]}}, "for 'a': recipe [1] is not an object"),
    ],
)
def test_invalid_training_identity(frozen, value, expected):
    path, data = frozen
    data["training_identity"] = value
    msg = f"invalid predictor file {str(path)!r}: key 'training_identity' {expected}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


# the protocol: a verdict only on rows read as the fit's were -----------------------------


def test_the_predictor_records_its_protocol_and_the_file_keeps_it(tmp_path):
    predictor = fit_predictor(TRAIN)
    assert predictor.protocol == Protocol.from_dict(PROTOCOL)
    assert predictor.protocol.describe() == (
        "16 windows of 128 tokens of the embedded corpus, sink first, seed 0"
    )
    data = json.loads(freeze(predictor, tmp_path / "p.json").read_text())
    assert data["format"] == 3 and data["protocol"] == PROTOCOL
    assert Predictor.from_json(tmp_path / "p.json").protocol == predictor.protocol


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


def test_a_predictor_fitted_on_rows_without_protocol_is_never_frozen_and_gives_no_verdict(
    tmp_path,
):
    bare = [{k: v for k, v in r.items() if k != "protocol"} for r in TRAIN]
    predictor = fit_predictor(bare)
    assert predictor.protocol is None
    with pytest.raises(AttncodaError, match="records no protocol, so it cannot be frozen"):
        freeze(predictor, tmp_path / "p.json")
    (outcome,) = apply_predictor(predictor, [row("new", 0.3, 0.1, 0.3)])
    assert outcome["verdict"] == OFF_PROTOCOL and not outcome["counted"]


def test_a_format_2_file_without_protocol_is_refused(frozen):
    path, data = frozen
    data["format"] = 2
    del data["protocol"]
    msg = f"invalid predictor file {str(path)!r}: format 2 records no protocol"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        Predictor.from_json(rewrite(path, data))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({**PROTOCOL, "windows": "16"}, "protocol windows must be a whole number; got '16'"),
        ({**PROTOCOL, "metrics": []}, "protocol metrics must be a non-empty list of names"),
        ({**PROTOCOL, "tol": -1}, "protocol tol must be a number >= 0; got -1"),
        ({"windows": 16}, "a protocol must hold exactly windows, window_tokens, corpus"),
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
        ({"corpus": "my.txt"}, "corpus 'my.txt', not 'embedded'"),
        ({"sink": "bos"}, "sink 'bos', not 'first'"),
        ({"seed": 1}, "seed 1, not 0"),
        ({"metrics": ["cosine"]}, "metrics ['cosine'], not ['cosine', 'jsd'"),
        ({"tol": 0.0}, "tol 0.0, not 1e-06"),
        ({"windows": None, "corpus": "given attention"}, "windows None, not 16"),
    ],
)
def test_a_row_read_off_protocol_gets_no_verdict_and_is_never_counted(change, said):
    predictor = fit_predictor(TRAIN)
    inside = row("new", 0.30, 0.10, 0.30)  # well inside the interval: on protocol, confirmed
    off = {**inside, "protocol": {**PROTOCOL, **change}}
    missing = {k: v for k, v in inside.items() if k != "protocol"}
    on, away, bare = apply_predictor(predictor, [inside, off, missing])
    assert on["verdict"] == "confirmed" and on["counted"] and on["off_protocol"] == []
    assert away["verdict"] == OFF_PROTOCOL and not away["counted"]
    assert any(d.startswith(said) for d in away["off_protocol"]), away["off_protocol"]
    # the prediction is still made (shown), only the verdict is withheld
    assert away["prediction"] == on["prediction"]
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
    probe = {**row("x", 0.30, 0.10, 0.30), "identity": {"weights_sha256": None, "recipe": recipe}}
    (outcome,) = apply_predictor(predictor, [probe])
    assert outcome["verdict"] == "confirmed"  # given, but counted only when held out
    assert outcome["counted"] == (relation == "held out")


def test_a_checkpoint_of_a_training_run_is_known_by_name_too():
    rows = [
        dict(r, model=m)
        for r, m in zip(
            TRAIN,
            ("s0@step64", "s0@step512", "s0@step2000", "s1@step128", "smollm2", "minilm"),
            strict=True,
        )
    ]
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
