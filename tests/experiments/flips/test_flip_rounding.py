"""What float32 rounding of the head distances leaves open in flips: the fragile triplets
against a plain-loop reference, counts and rates that move by no more than they state when
the distances move within their rounding, and the interval's ends (docs/design.md,
"Verdicts and ratios within rounding")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attncoda.experiments.flips import interval_rounding, rate_rounding, triplet_flips
from attncoda.experiments.flips._sums import METRIC_ROUNDING, distance_rounding


def symmetric(rng, n, scale=1.0):
    d = rng.uniform(0.1, scale, size=(n, n))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0.0)
    return d


def fragile_reference(d_keep, d_drop, e_keep, e_drop, tol):
    """Per-head fragile triplets by plain loops: ``| |D(A,C) - D(A,B)| - tol max|D| |`` within
    ``2 max_B e(A, B) + tol e(argmax |D|)``, under keep and under drop counted apart."""
    n = len(d_keep)
    found = [0] * n
    for d, e in ((d_keep, e_keep), (d_drop, e_drop)):
        i, j = np.unravel_index(np.argmax(np.abs(d)), d.shape)
        t = tol * abs(d[i, j])
        for a in range(n):
            band = 2 * max(e[a, b] for b in range(n) if b != a) + tol * e[i, j]
            for b, c in itertools.combinations([h for h in range(n) if h != a], 2):
                if abs(abs(d[a, c] - d[a, b]) - t) <= band:
                    found[a] += 1
    return found


def near_edge(rng, n, tol, e):
    """Keep and drop matrices with some triplets a fraction of ``e`` from the tie edge."""
    keep, drop = symmetric(rng, n), symmetric(rng, n)
    for d in (keep, drop):
        for a in rng.choice(n, size=3, replace=False):
            b, c = rng.choice([h for h in range(n) if h != a], size=2, replace=False)
            edge = tol * np.abs(d).max() + rng.uniform(-2, 2) * e
            d[a, c] = d[c, a] = d[a, b] + edge
    return keep, drop


@pytest.mark.parametrize("seed", range(3))
def test_fragile_triplets_equal_a_plain_loop_reference(seed):
    rng = np.random.default_rng(seed)
    n, tol, e = 9, 1e-3, 1e-5
    keep, drop = near_edge(rng, n, tol, e)
    e_keep = rng.uniform(0, e, size=(n, n))
    e_drop = rng.uniform(0, e, size=(n, n))
    got = triplet_flips(keep, drop, tol=tol, rounding=(e_keep, e_drop))
    assert got.fragile.tolist() == fragile_reference(keep, drop, e_keep, e_drop, tol)
    assert got.fragile.sum() > 0  # the constructed near-edge triplets are found
    # without rounding, only a difference exactly at the edge would be fragile
    assert triplet_flips(keep, drop, tol=tol).fragile.sum() == 0


@pytest.mark.parametrize("seed", range(4))
def test_counts_and_rates_move_by_no_more_than_the_fragile_triplets(seed):
    # Distances moved anywhere within their stated rounding (the corners included) change
    # ties and flips by at most the fragile triplets, and the rate by at most rate_rounding.
    rng = np.random.default_rng(10 + seed)
    n, tol, e = 10, 1e-3, 2e-4
    keep, drop = near_edge(rng, n, tol, e)
    e_keep, e_drop = np.full((n, n), e), np.full((n, n), e)
    base = triplet_flips(keep, drop, tol=tol, rounding=(e_keep, e_drop))
    k = int(base.fragile.sum())
    total = n * base.n_triplets
    decided = total - int(base.ties.sum())
    rate = base.flips.sum() / decided
    bound = float(rate_rounding(k, decided))
    moved_any = False
    for _ in range(60):
        signs = [rng.choice([-1.0, 0.0, 1.0], size=(n, n)) * rng.uniform(0, 1, size=(n, n))
                 for _ in range(2)]  # fmt: skip
        k2, d2 = (d + s * e for d, s in zip((keep, drop), signs, strict=True))
        for d in (k2, d2):
            d[:] = (d + d.T) / 2  # a distance stays symmetric; the move stays within e
            np.fill_diagonal(d, 0.0)
        got = triplet_flips(k2, d2, tol=tol)
        assert abs(int(got.ties.sum()) - int(base.ties.sum())) <= k
        assert abs(int(got.flips.sum()) - int(base.flips.sum())) <= k
        new_rate = got.flips.sum() / (total - got.ties.sum())
        assert abs(new_rate - rate) <= bound + 1e-15
        moved_any |= bool(got.ties.sum() != base.ties.sum())
    assert moved_any  # rounding does move this case's counts: the bound is needed


def test_rate_rounding_bounds_every_move_of_k_triplets():
    # F flips of N decided; each of k triplets can go tie <-> decided, flip <-> not.
    for n_decided, n_flips, k in [(168, 9, 1), (168, 9, 2), (20, 19, 3), (5, 0, 2)]:
        worst = 0.0
        for moves in itertools.product(range(4), repeat=k):
            f, d = n_flips, n_decided
            for m in moves:  # flip -> tie, non-flip -> tie, tie -> flip, tie -> non-flip
                f, d = f - (m == 0) + (m == 2), d - (m < 2) + (m >= 2)
            if 0 <= f <= d and d > 0:
                worst = max(worst, abs(f / d - n_flips / n_decided))
        assert worst <= rate_rounding(k, n_decided) + 1e-15
    assert rate_rounding(1, 168) == pytest.approx(1 / 167)
    assert rate_rounding(0, 168) == 0.0 and rate_rounding(3, 3) == 1.0


def test_interval_ends_move_by_no_more_than_stated():
    rng = np.random.default_rng(3)
    rates = rng.uniform(0.05, 0.15, size=200)
    moved = np.where(rng.uniform(size=200) < 0.1, 1 / 167, 0.0)
    low, high = np.percentile(rates, [2.5, 97.5])
    bound = interval_rounding(rates, moved, (float(low), float(high)))
    assert 0 < bound <= 1 / 167
    for _ in range(200):
        shifted = rates + moved * rng.choice([-1.0, 1.0], size=200)
        lo2, hi2 = np.percentile(shifted, [2.5, 97.5])
        assert abs(lo2 - low) <= bound + 1e-15 and abs(hi2 - high) <= bound + 1e-15
    assert np.isnan(interval_rounding(rates, moved, (np.nan, np.nan)))


def test_distance_rounding_is_the_stated_formula():
    # e(A, B) = u [(n + 2)(c + H_A + H_B) + R |D(A, B)|], by hand for one entry.
    class Of:
        keys, rows, constant = 64, 62, METRIC_ROUNDING["jsd"]

    d = np.array([[0.0, 0.25], [0.25, 0.0]])
    h = np.array([1.5, 2.0])
    e = distance_rounding(d, h, Of)
    assert e[0, 1] == pytest.approx(2.0**-24 * (66 * (np.log(2) + 3.5) + 62 * 0.25), rel=1e-12)
    assert METRIC_ROUNDING["entropy_gap"] == 0.0 and METRIC_ROUNDING["tv"] == 1.0


def test_row_entropies_are_those_of_scipy_and_finite_with_a_zero_probability():
    # The magnitudes behind the rounding: each head's row entropies summed over the used
    # rows, under keep and drop (the content renormalised), a key of log-probability -inf
    # (allowed by the classic metrics) contributing nothing.
    from scipy.stats import entropy

    from attncoda.experiments.contract import DocRows, HeadRows
    from attncoda.experiments.flips import entropy_sums

    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(5), size=(3, 4))  # (head, row, key)
    p[1, 2, 3] = 0.0
    p /= p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        logp = np.log(p).astype(np.float32)
    mask = np.ones((4, 5), dtype=bool)
    mask[0, 3:] = False  # row 0 sees 3 keys: sink + 2 content, still used
    logp[:, 0, 3:] = 0.0  # absent keys hold anything
    rows = HeadRows("x", 1, 3, (DocRows(logp=logp, key_mask=mask, sink=(0,)),), np.zeros(3))
    keep, drop = entropy_sums(rows, "keep")[0], entropy_sums(rows, "drop")[0]
    for h in range(3):
        rows_p = [p[h, r, mask[r]] / p[h, r, mask[r]].sum() for r in range(4)]
        assert keep[h] == pytest.approx(sum(entropy(q) for q in rows_p), rel=1e-5)
        assert drop[h] == pytest.approx(sum(entropy(q[1:]) for q in rows_p), rel=1e-5)
    assert np.isfinite(keep).all() and np.isfinite(drop).all()
