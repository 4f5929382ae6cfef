"""What rounding leaves open in the predictor's verdicts, each bound against an independent
reference (a plain loop, a brute-force perturbation, a hand-computed case): the features'
rounding from the rows, the baseline's from the training rates, the interval score's, and the
edges of the verdicts, the ranges and the joint support."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from attncoda.experiments.contract import DocRows, HeadRows
from attncoda.experiments.flips import flips
from attncoda.experiments.predictor import (
    Prediction,
    apply_predictor,
    fit_predictor,
    predictor_row,
    protocol_of,
)
from attncoda.experiments.predictor._cvplus import fit_cv_plus
from attncoda.experiments.predictor._model import Baseline
from attncoda.experiments.predictor._rounding import (
    TrainingRounding,
    feature_rounding,
    range_edges,
    share_rounding,
)
from attncoda.experiments.predictor._verdict import (
    interval_score,
    interval_score_rounding,
    verdict,
    verdict_edge,
)
from attncoda.experiments.safety import mean_squared_split

U = 2.0**-24
METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")


def rows_of(seed: int, n_heads: int = 6, keys: int = 8, docs: int = 2) -> HeadRows:
    """Random causal log-probability rows (``n_heads`` heads as 2 layers, ``keys`` keys), the
    heads apart in sink logit; the sink mass of each head its rows' mean."""
    rng = np.random.default_rng(seed)
    bias = rng.uniform(-1, 3, size=n_heads)
    mask = np.arange(keys)[None, :] < np.arange(3, keys + 1)[:, None]
    found = []
    for _ in range(docs):
        z = rng.normal(size=(n_heads, mask.shape[0], keys))
        z[:, :, 0] += bias[:, None]
        z = np.where(mask[None], z, -np.inf)
        logp = z - np.log(np.exp(z).sum(axis=2, keepdims=True))
        found.append(DocRows(np.where(mask[None], logp, 0.0), mask, (0,)))
    mass = np.exp(np.stack([d.logp[:, :, 0] for d in found])).mean(axis=(0, 2))
    return HeadRows(f"model-{seed}", 2, n_heads // 2, tuple(found), mass)


# --- the features' rounding ---------------------------------------------------------------


def test_the_head_means_carry_the_row_statistic_bound_over_their_keys():
    rows = rows_of(0)
    got = feature_rounding(rows, mean_squared_split(rows))
    n = 8  # the rows' padded length: the most keys a row sees
    bounds = []
    for m in rows.sink_mass:  # a plain loop over heads: u (n + 2) (m_h + log n)
        bounds.append(U * (n + 2) * (m + math.log(n)))
    assert got["mean_sink_mass"] == pytest.approx(sum(bounds) / len(bounds), rel=1e-12)
    # the std moves by sum_h |m_h - m| d_h / (H sigma): below the stated sqrt(mean d_h^2)
    m, sigma = rows.sink_mass.mean(), rows.sink_mass.std()
    moved = sum(abs(mh - m) * d for mh, d in zip(rows.sink_mass, bounds, strict=True))
    moved /= len(bounds) * sigma
    stated = math.sqrt(sum(d * d for d in bounds) / len(bounds))
    assert got["std_sink_mass"] == pytest.approx(stated, rel=1e-12)
    assert moved <= stated
    # and every head mean moved by its bound, each way, moves the std by at most that
    for signs in itertools.product((-1.0, 1.0), repeat=len(bounds)):
        shifted = rows.sink_mass + np.asarray(signs) * np.asarray(bounds)
        assert abs(shifted.std() - sigma) <= stated * (1 + 1e-6)


def _first_order_share(rows: HeadRows) -> float:
    """The share's first-order move, summed pair by pair and row by row (a plain loop, no
    Cauchy-Schwarz): ``(dS + share dT) / T`` with ``dS = (2/R) sum |b_A - b_B| (beta_A +
    beta_B)`` and ``dT`` alike, each log within ``u (2 |z| + log n)``."""
    n_heads = rows.n_layers * rows.n_heads
    d_sink = d_total = 0.0
    s = t = 0.0
    n_rows = 0
    for doc in rows.docs:
        for r in range(doc.logp.shape[1]):
            keys = np.flatnonzero(doc.key_mask[r])
            content = [k for k in keys if k not in doc.sink]
            if len(content) < 2:
                continue
            n_rows += 1
            k, m = len(doc.sink), len(content)
            coef = math.sqrt(k * m / (k + m))
            b, clr, beta, gamma = [], [], [], []
            for h in range(n_heads):
                z = doc.logp[h, r, keys]
                w = 2 * np.abs(z) + math.log(len(keys))
                sink_z = np.mean([doc.logp[h, r, j] for j in doc.sink])
                b.append(coef * (sink_z - np.mean(doc.logp[h, r, content])))
                clr.append(z - z.mean())
                sink_w = np.mean([w[list(keys).index(j)] for j in doc.sink])
                content_w = np.mean([w[list(keys).index(j)] for j in content])
                beta.append(U * coef * (sink_w + content_w))
                gamma.append(U * math.sqrt(float(w @ w)))
            for a, c in itertools.combinations(range(n_heads), 2):
                s += (b[a] - b[c]) ** 2
                t += float((clr[a] - clr[c]) @ (clr[a] - clr[c]))
                d_sink += 2 * abs(b[a] - b[c]) * (beta[a] + beta[c])
                d_total += 2 * math.sqrt(float((clr[a] - clr[c]) @ (clr[a] - clr[c]))) * (
                    gamma[a] + gamma[c]
                )
    return (d_sink + (s / t) * d_total) / t


def test_the_share_bound_covers_its_first_order_move_pair_by_pair():
    rows = rows_of(1)
    squares = mean_squared_split(rows)
    stated = share_rounding(rows, squares)
    plain = _first_order_share(rows)
    # Cauchy-Schwarz over pairs and rows: at least the plain sum, and of its order
    assert plain <= stated <= 20 * plain
    assert stated == feature_rounding(rows, squares)["mean_sink_share"]


def test_the_share_moved_by_its_logs_rounding_stays_within_its_bound():
    rows = rows_of(2)
    share = mean_squared_split(rows).sink_share
    stated = share_rounding(rows, mean_squared_split(rows))
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(20):
        docs = []
        for doc in rows.docs:
            n = doc.key_mask.sum(axis=1)[None, :, None]
            room = U * (2 * np.abs(doc.logp) + np.log(n))
            # each log within its rounding, and any error common to a row's keys
            moved = doc.logp + rng.uniform(-1, 1, size=doc.logp.shape) * room
            moved = moved + rng.normal(size=(doc.logp.shape[0], doc.logp.shape[1], 1))
            docs.append(DocRows(np.where(doc.key_mask[None], moved, 0.0), doc.key_mask, doc.sink))
        again = HeadRows(rows.model, rows.n_layers, rows.n_heads, tuple(docs), rows.sink_mass)
        worst = max(worst, abs(mean_squared_split(again).sink_share - share))
    assert 0 < worst <= stated


# --- the baseline's rounding ---------------------------------------------------------------

#: Twelve training targets in six runs, as the shipped predictor's: one run's model far above
#: the others (its own rate is then the upper end, as SmolLM2's is).
RUNS = ("a", "b", "c", "c", "c", "c", "d", "d", "e", "e", "f", "f")
Y = np.array([0.275, 0.185, 0.011, 0.098, 0.048, 0.082, 0.135, 0.142, 0.011, 0.015, 0.013, 0.02])


def _baseline(y: np.ndarray) -> Baseline:
    interval = fit_cv_plus(
        np.zeros((len(y), 0)), y, RUNS, alpha=0.1, fit=lambda x, v: (np.zeros(0), v.mean())
    )
    return Baseline(float(y.mean()), interval)


def test_the_baseline_moves_by_at_most_its_stated_rounding_when_its_rates_do():
    rng = np.random.default_rng(3)
    eps = rng.uniform(1e-4, 3e-3, size=len(Y))
    base = _baseline(Y)
    stated = base.rounding(tuple(eps))
    p = base.apply(tuple(eps))
    assert p.rounding == stated > 0
    worst = 0.0
    for _ in range(400):  # the rates moved within their roundings, the baseline refitted
        moved = Y + rng.choice((-1.0, 1.0), size=len(Y)) * eps * rng.uniform(0.5, 1, len(Y))
        q = _baseline(moved).apply()
        for a, b in ((p.low, q.low), (p.high, q.high)):
            assert a is not None and b is not None
            worst = max(worst, abs(a - b))
        # the point, the mean, within the mean rounding (no verdict is decided at it)
        assert q.point is not None and p.point is not None
        assert abs(q.point - p.point) <= eps.mean()
    assert worst <= stated
    assert worst >= 0.5 * stated  # the bound is of the moves' size, not far above


def test_an_end_that_is_one_training_rate_carries_that_rate_s_rounding():
    eps = np.full(len(Y), 1e-6)
    eps[0] = 2e-3  # the model that sets the upper end
    base = _baseline(Y)
    p = base.apply(tuple(eps))
    assert p.high == pytest.approx(Y[0], abs=1e-15) and p.low == 0.0
    # by hand: the end is y_a itself (its residual far from 0), the next value far below;
    # the clipped lower end moves by nothing
    assert p.rounding == pytest.approx(2e-3, rel=1e-12)
    assert base.rounding(()) == 0.0 and base.apply().rounding == 0.0


# --- the interval score's and the verdicts' edges ------------------------------------------


def test_the_interval_score_moves_by_at_most_its_stated_rounding():
    rng = np.random.default_rng(4)
    alpha, r, m = 0.1, 2e-4, 5e-4
    stated = interval_score_rounding(r, m, alpha)
    assert stated == pytest.approx(2 / alpha * (2 * r + m))
    worst = 0.0
    for low, high, y in ((0.1, 0.3, 0.2), (0.1, 0.3, 0.3001), (0.1, 0.3, 0.05), (0.1, 0.3, 0.1)):
        here = interval_score(low, high, y, alpha)
        for _ in range(200):  # two devices: each end within r of the exact, so 2 r apart
            dl, dh = rng.uniform(-2 * r, 2 * r, size=2)
            dy = rng.uniform(-m, m)
            worst = max(worst, abs(interval_score(low + dl, high + dh, y + dy, alpha) - here))
    assert worst <= stated and worst >= 0.5 * stated


def test_a_verdict_is_on_its_edge_within_the_measured_and_twice_the_ends_rounding():
    p = Prediction(abstained=False, point=0.2, low=0.1, high=0.3, rounding=1e-4)
    m = 5e-4
    threshold = 0.3 + 1e-4  # verdict() takes a rate within the ends' rounding as inside
    band = m + 2e-4
    for past, edge in ((0.0, True), (0.9 * band, True), (-0.9 * band, True), (1.1 * band, False)):
        assert verdict_edge(p, threshold + past, m) is edge, past
    assert verdict(p, threshold - 1e-9) == "confirmed" and verdict(p, threshold + 1e-9) == "failed"
    assert verdict_edge(p, 0.2, m) is False  # inside, far from both ends
    assert verdict_edge(p, 0.1 - 1e-4 - 0.9 * band, m) is True  # the low end alike
    # an end clipped to 0 is no edge: no rate falls below it on any device
    clipped = Prediction(abstained=False, point=0.01, low=0.0, high=0.3, rounding=1e-4)
    assert verdict_edge(clipped, 0.0, m) is False
    # an abstention, or its absence, decided on its edge makes the verdict an edge one
    assert verdict_edge(Prediction(abstained=True, reason="x", edge=True), 0.2) is True
    assert verdict_edge(Prediction(abstained=True, reason="x"), 0.2) is False
    assert verdict_edge(Prediction(False, "", 0.2, 0.1, 0.3, 1e-4, edge=True), 0.2) is True


def test_a_range_end_is_an_edge_within_twice_the_value_s_rounding_plus_the_end_s():
    names, ranges = ["f"], [(0.1, 0.5)]
    e, e_hi = 1e-5, 3e-5
    widened = 0.5 + e + e_hi
    for past, edge in ((0.0, True), (0.9, True), (-0.9, True), (1.1, False), (-1.1, False)):
        value = widened + past * (2 * e + e_hi)
        got = range_edges(names, [value], ranges, {"f": e}, [(0.0, e_hi)])
        assert (got == ["f"]) is edge, past


def _fitted(rounding: bool = True):
    """A predictor fitted on rows that state their rounding (one model of each run)."""
    protocol = protocol_of(
        windows=2,
        window_tokens=8,
        corpus=None,
        corpus_sha256="c" * 64,
        sink="first",
        seed=0,
        metrics=("tv", "jsd"),
        tol=1e-6,
    )
    rows = []
    for seed in range(6):
        hr = rows_of(seed)
        row = predictor_row(hr, flips(hr, ("tv", "jsd"), n_boot=1), protocol=protocol)
        if not rounding:
            del row["rounding"]
        rows.append(row)
    return fit_predictor(rows, alpha=0.2), rows


def test_a_row_states_its_rates_rounding_and_the_predictor_its_training_values():
    predictor, rows = _fitted()
    row = rows[0]
    table = flips(rows_of(0), ("tv", "jsd"), n_boot=1).table
    assert row["rounding"]["flip_rates"] == dict(
        zip(table["metric"], table["rate_rounding"], strict=True)
    )
    (outcome,) = apply_predictor(predictor, [row])
    assert outcome["measured_rounding"] == pytest.approx(float(table["rate_rounding"].mean()))
    # the training values' rounding, as stated by their rows: each range end's, each target's
    stated = predictor.rounding
    assert isinstance(stated, TrainingRounding)
    targets = [float(np.mean(list(r["rounding"]["flip_rates"].values()))) for r in rows]
    assert stated.targets == pytest.approx(targets, rel=1e-12)
    for j, name in enumerate(predictor.features):
        values = [r["features"][name] for r in rows]
        errors = [r["rounding"]["features"][name] for r in rows]
        lo, hi = predictor.training_range[j]
        assert stated.ends[j] == (errors[values.index(lo)], errors[values.index(hi)])
        assert stated.largest[j] == max(errors)
    # the file keeps them
    from attncoda.experiments.predictor import Predictor

    assert Predictor.from_dict(predictor.to_dict()).rounding == stated
    # rows that state none: one rounding of each feature by value, exact rates
    bare, _ = _fitted(rounding=False)
    assert bare.rounding is not None and set(bare.rounding.targets) == {0.0}


def test_the_support_is_on_its_edge_within_twice_the_point_s_share_plus_the_training_one():
    import dataclasses

    predictor, rows = _fitted()
    support, features = predictor.support, predictor.features
    values = np.array([rows[0]["features"][f] for f in features])
    errors = np.array([rows[0]["rounding"]["features"][f] for f in features])
    largest = np.array(predictor.rounding.largest)
    gram, scale = np.asarray(support.gram_inverse), np.asarray(support.scale)
    # by hand: the point's share sum_f |dh/dx_f| e_f, dh/dz = 2 [G x~]_z; the training
    # model's 2 sqrt(h_max d' |G_zz| d), d the largest training rounding in standard units
    z = (values - np.asarray(support.mean)) / scale
    x = np.concatenate([[1.0], z])
    own = float(np.abs(2 * (gram @ x)[1:] / scale) @ errors)
    d = largest / scale
    h = float(x @ gram @ x)
    for gap, edge in ((0.0, True), (0.9, True), (-0.9, True), (1.1, False), (-1.1, False)):
        top = h
        for _ in range(60):  # the largest training leverage whose threshold is h + gap band
            theirs = 2 * math.sqrt(top * float(d @ np.abs(gram[1:, 1:]) @ d))
            top = (h - own - theirs + gap * (2 * own + theirs)) / (1 + 1e-9)
        theirs = 2 * math.sqrt(top * float(d @ np.abs(gram[1:, 1:]) @ d))
        threshold = top * (1 + 1e-9) + own + theirs
        assert threshold - h == pytest.approx(gap * (2 * own + theirs), abs=1e-3 * own)
        shifted = dataclasses.replace(support, max_leverage=float(top))
        assert shifted.threshold(values, errors, largest)[0] == pytest.approx(threshold)
        assert shifted.on_edge(values, errors, largest) is edge, gap
        if gap:  # at the threshold itself the last bit decides, as the edge says
            assert (shifted.outside(values, errors, largest) == "") is (gap > 0)
