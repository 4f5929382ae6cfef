"""Flips: exact triplet counts against a plain-loop reference, the sink-driven cases, and the
bootstrap over documents."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attncoda import AttncodaError, head_distances, row_distance
from attncoda.experiments.contract import DocRows, HeadRows
from attncoda.experiments.flips import (
    BY_LAYER_COLUMNS,
    FLIP_METRICS,
    TABLE_COLUMNS,
    bootstrap_rates,
    count_inversions,
    flips,
    resample_weights,
    triplet_flips,
)


def flips_reference(d_keep, d_drop, tol):
    """Per-head (ties, flips) by plain Python loops over every triplet (A; B, C), B < C."""
    d_keep, d_drop = np.asarray(d_keep).tolist(), np.asarray(d_drop).tolist()
    n = len(d_keep)
    tol_keep = tol * max(abs(v) for row in d_keep for v in row)
    tol_drop = tol * max(abs(v) for row in d_drop for v in row)
    ties, flip = [0] * n, [0] * n
    for a in range(n):
        for b in range(n):
            for c in range(b + 1, n):
                if a in (b, c):
                    continue
                dk = d_keep[a][c] - d_keep[a][b]
                dd = d_drop[a][c] - d_drop[a][b]
                if abs(dk) <= tol_keep or abs(dd) <= tol_drop:
                    ties[a] += 1
                elif (dk > 0) != (dd > 0):
                    flip[a] += 1
    return ties, flip


def random_head_rows(n_layers=3, n_heads=4, n_docs=3, keys=9, seed=0, sink_mass=None):
    """Causal synthetic rows: document d records rows of lengths 2..keys (row r has r+2 keys).

    With ``sink_mass`` every head puts exactly that mass on key 0 in every row.
    """
    rng = np.random.default_rng(seed)
    n = n_layers * n_heads
    docs = []
    for _ in range(n_docs):
        lengths = np.arange(2, keys + 1)
        mask = np.arange(keys)[None, :] < lengths[:, None]
        logp = np.zeros((n, len(lengths), keys))
        for r, length in enumerate(lengths):
            p = rng.dirichlet(np.full(length, 0.7), size=n)
            if sink_mass is not None:
                q = rng.dirichlet(np.full(length - 1, 0.7), size=n)
                p = np.concatenate([np.full((n, 1), sink_mass), (1 - sink_mass) * q], axis=1)
            logp[:, r, :length] = np.log(p)
        docs.append(DocRows(logp=logp, key_mask=mask, sink=(0,)))
    sink = np.exp(np.stack([d.logp[:, :, 0] for d in docs])).mean(axis=(0, 2))
    return HeadRows("synthetic", n_layers, n_heads, tuple(docs), sink)


def pooled_distance(head_rows, metric, convention):
    """D by brute force: the mean of row_distance over every used row of every document."""
    n = head_rows.n_layers * head_rows.n_heads
    total, count = np.zeros((n, n)), 0
    for doc in head_rows.docs:
        for r in range(doc.key_mask.shape[0]):
            keys = np.flatnonzero(doc.key_mask[r])
            if len(keys) - 1 < 2:
                continue
            z = doc.logp[:, r, keys]
            total += row_distance(z[:, None, :], z[None, :, :], metric, convention=convention)
            count += 1
    return total / count


# --- exact counting -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_triplet_flips_equals_reference_on_random_matrices(seed):
    rng = np.random.default_rng(seed)
    n = 12
    a, b = rng.random((n, n)), rng.random((n, n))
    keep, drop = a + a.T, 0.5 * (a + a.T) + b + b.T
    np.fill_diagonal(keep, 0)
    np.fill_diagonal(drop, 0)
    got = triplet_flips(keep, drop)
    ties, flip = flips_reference(keep, drop, 1e-9)
    assert got.n_triplets == math.comb(n - 1, 2)
    assert got.flips.tolist() == flip
    assert got.ties.tolist() == ties
    assert sum(ties) == 0 and sum(flip) > 0


@pytest.mark.parametrize("seed", range(4))
def test_triplet_flips_equals_reference_with_exact_and_near_ties(seed):
    rng = np.random.default_rng(seed)
    n = 13
    keep = np.round(rng.random((n, n)), 1)  # exact ties in every row
    drop = rng.random((n, n))
    drop[2, 5] = drop[2, 7] + 3e-10  # a near-tie within tol * max|D| = 1e-9 * ~1
    drop[4] = drop[4, 0]  # a whole row tied
    drop[6, 1] = drop[6, 3] + 1e-6  # close, but decided
    got = triplet_flips(keep, drop)
    ties, flip = flips_reference(keep, drop, 1e-9)
    assert got.ties.tolist() == ties
    assert got.flips.tolist() == flip
    assert got.ties[4] == got.n_triplets and got.flips[4] == 0


@given(
    n=st.integers(3, 9),
    levels=st.integers(2, 6),
    tol=st.sampled_from([0.0, 1e-9, 0.1, 0.3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_triplet_flips_equals_reference_on_coarse_matrices(n, levels, tol, seed):
    # Few distinct values: exact ties everywhere, and with tol > 0 near-ties that chain.
    rng = np.random.default_rng(seed)
    keep = rng.integers(0, levels, size=(n, n)) / levels
    drop = rng.integers(0, levels, size=(n, n)) / levels + rng.normal(0, 1e-3, size=(n, n))
    got = triplet_flips(keep, drop, tol=tol)
    ties, flip = flips_reference(keep, drop, tol)
    assert (got.ties.tolist(), got.flips.tolist()) == (ties, flip)


def dense_reference(d_keep, d_drop, tol):
    """Per-head (ties, flips): every pair (B, C), B < C, of every row as numpy arrays."""
    n = d_keep.shape[0]
    tk, td = tol * np.abs(d_keep).max(), tol * np.abs(d_drop).max()
    ties, flip = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for a in range(n):
        x, y = np.delete(d_keep[a], a), np.delete(d_drop[a], a)
        dx, dy = x[None, :] - x[:, None], y[None, :] - y[:, None]
        upper = np.triu(np.ones((n - 1, n - 1), dtype=bool), 1)
        tie = upper & ((np.abs(dx) <= tk) | (np.abs(dy) <= td))
        ties[a] = tie.sum()
        flip[a] = (upper & ~tie & ((dx > 0) != (dy > 0))).sum()
    return ties, flip


@pytest.mark.parametrize("seed", range(3))
def test_triplet_flips_with_ties_in_most_rows_equals_the_pairwise_definition(seed):
    # Values on a grid of 1e-3 give exact ties and, with tol = 2e-3, chains of near-ties in
    # most rows (the case of float32 distances with tol = 1e-6); some rows stay tie-free.
    rng = np.random.default_rng(seed)
    n = 150
    keep = rng.random((n, n))
    keep[: n // 2] = np.round(keep[: n // 2], 3)
    drop = keep + 0.3 * rng.random((n, n))
    drop[::3] = np.round(drop[::3], 2) + 1e-4 * rng.random((n - 1) // 3 + 1)[:, None]
    for a in range(n - 10, n):  # rows spaced 1e-2 apart: decided pairs only
        keep[a], drop[a] = rng.permutation(n) / 100, rng.permutation(n) / 100
    got = triplet_flips(keep, drop, tol=2e-3)
    ties, flip = dense_reference(keep, drop, 2e-3)
    assert (ties > 0).sum() > n // 2 and (ties == 0).any()
    np.testing.assert_array_equal(got.ties, ties)
    np.testing.assert_array_equal(got.flips, flip)


def test_tie_tolerance_is_relative_to_each_matrix():
    rng = np.random.default_rng(5)
    n = 9
    keep = rng.random((n, n))
    drop = 1e-6 * rng.random((n, n))  # a thousand times smaller: its own scale counts
    drop[0, 1] = drop[0, 2] + 1e-16
    for tol in (0.0, 1e-9, 1e-3, 0.05):
        got = triplet_flips(keep, drop, tol=tol)
        ties, flip = flips_reference(keep, drop, tol)
        assert (got.ties.tolist(), got.flips.tolist()) == (ties, flip)
    assert triplet_flips(keep, drop, tol=0.0).ties[0] == 0
    assert triplet_flips(keep, drop, tol=1e-9).ties[0] == 1


@pytest.mark.parametrize(
    "n", [*range(1, 40), 63, 64, 65, 127, 128, 129, 255, 256, 257, 269, 399, 511, 512, 513, 2049]
)
def test_inversion_kernel_counts_every_inversion(n):
    rng = np.random.default_rng(n)
    pi = np.stack([rng.permutation(n) for _ in range(3)] + [np.arange(n)[::-1], np.arange(n)])
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    expected = [int(((p[:, None] > p[None, :]) & upper).sum()) for p in pi]
    assert count_inversions(pi).tolist() == expected
    assert expected[-2:] == [n * (n - 1) // 2, 0]


def test_triplet_flips_runs_every_triplet_of_400_heads_quickly():
    rng = np.random.default_rng(0)
    n = 400
    a = rng.random((n, n))
    keep = a + a.T
    drop = keep + 0.5 * rng.random((n, n))
    got = triplet_flips(keep, drop)
    # Row 0 checked by brute force: discordant pairs of the other heads.
    x, y = np.delete(keep[0], 0), np.delete(drop[0], 0)
    dx, dy = x[None, :] - x[:, None], y[None, :] - y[:, None]
    upper = np.triu(np.ones((n - 1, n - 1), dtype=bool), 1)
    assert got.flips[0] == int((upper & ((dx > 0) != (dy > 0))).sum())
    assert got.n_triplets == math.comb(399, 2)


# --- the experiment -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic():
    head_rows = random_head_rows()
    return head_rows, flips(head_rows, n_boot=50, seed=1)


def test_flips_table_equals_plain_loop_reference_for_every_metric(synthetic):
    head_rows, result = synthetic
    table = result.table.set_index("metric")
    n = 12
    assert list(result.table.columns) == list(TABLE_COLUMNS)
    assert list(table.index) == list(FLIP_METRICS)
    for metric in FLIP_METRICS:
        keep, drop = result.distances[(metric, "keep")], result.distances[(metric, "drop")]
        ties, flip = flips_reference(keep, drop, 1e-9)
        row = table.loc[metric]
        assert row["n_heads"] == n
        assert row["n_triplets"] == n * math.comb(n - 1, 2)
        assert (row["n_ties"], row["flips"]) == (sum(ties), sum(flip))
        assert row["flip_rate"] == sum(flip) / (row["n_triplets"] - sum(ties))
        # 3 documents: too few for an interval (tests of the bootstrap below)
        assert row["n_docs"] == 3 and row["n_boot"] == 0
        assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])


def test_flips_distances_are_means_over_every_used_row_of_every_document(synthetic):
    head_rows, result = synthetic
    for metric in FLIP_METRICS:
        for convention in ("keep", "drop"):
            expected = pooled_distance(head_rows, metric, convention)
            np.testing.assert_allclose(
                result.distances[(metric, convention)], expected, rtol=1e-10, atol=1e-12
            )
    assert result.n_docs == 3
    assert result.n_rows == 3 * 7  # rows of 3..9 keys have m >= 2 content keys


def test_flips_by_layer_adds_up_to_the_table(synthetic):
    head_rows, result = synthetic
    by_layer = result.by_layer
    assert list(by_layer.columns) == list(BY_LAYER_COLUMNS)
    assert by_layer["layer"].tolist() == [0, 1, 2] * len(FLIP_METRICS)
    sums = by_layer.groupby("metric", sort=False)[["n_triplets", "n_ties", "flips"]].sum()
    table = result.table.set_index("metric")
    for column in ("n_triplets", "n_ties", "flips"):
        assert sums[column].tolist() == table.loc[list(sums.index), column].tolist()
    for metric in FLIP_METRICS:
        keep, drop = result.distances[(metric, "keep")], result.distances[(metric, "drop")]
        ties, flip = flips_reference(keep, drop, 1e-9)
        rows = by_layer[by_layer["metric"] == metric]
        per_layer = [sum(flip[4 * layer : 4 * layer + 4]) for layer in range(3)]
        assert rows["flips"].tolist() == per_layer


def test_equal_sink_mass_gives_no_flips_where_keep_is_a_multiple_of_drop():
    # Every head puts s = 0.6 on the sink in every row, so p = (s, (1 - s) q) and
    #   tv:          TV(p, p')  = (1 - s) TV(q, q')
    #   hellinger:   He(p, p')  = sqrt(1 - s) He(q, q')
    #   jsd:         JSD(p, p') = (1 - s) JSD(q, q')      (the binary part cancels)
    #   entropy_gap: |H(p) - H(p')| = (1 - s) |H(q) - H(q')|   (H(p) = h(s) + (1 - s) H(q))
    # so D_keep = c * D_drop with one constant c, and every verdict agrees. Cosine has no
    # such identity (it mixes s with |q|), so it is not asserted.
    head_rows = random_head_rows(sink_mass=0.6, seed=3, n_docs=10)
    result = flips(head_rows, ("tv", "hellinger", "jsd", "entropy_gap", "cosine"), n_boot=5)
    table = result.table.set_index("metric")
    for metric in ("tv", "hellinger", "jsd", "entropy_gap"):
        assert table.loc[metric, "flips"] == 0, metric
        assert table.loc[metric, "n_ties"] == 0, metric
        assert table.loc[metric, "ci_high"] == 0.0  # no resample of 10 documents flips
    assert table.loc["cosine", "flips"] > 0  # not vacuous: the data do separate the heads


def sink_dominated_head_rows(seed):
    """Six heads whose sink masses are far apart and whose contents differ a little.

    Head i gets sink mass ``s_levels[sink_of[i]]`` and content ``softmax(base + t v)`` with
    ``t = t_levels[content_of[i]]``. Both level sets have super-increasing gaps (each gap
    exceeds the sum of those before it), so for any head A every head on the far side of the
    next gap is farther than every head on the near side, whatever monotone parametrisation a
    metric uses: under keep the sink gap dominates every metric, under drop only the content
    is left, and the verdicts are those of the Aitchison sink and content terms.
    """
    rng = np.random.default_rng(seed)
    n, m = 6, 6
    gaps = 4.0 ** np.arange(n - 1)
    s_levels = 0.55 + 0.40 * np.concatenate([[0], np.cumsum(gaps)]) / gaps.sum()
    t_levels = 3e-5 * np.concatenate([[0], np.cumsum(3.0 ** np.arange(n - 1))])
    sink_of, content_of = rng.permutation(n), rng.permutation(n)
    base, v = rng.normal(size=m), rng.normal(size=m)
    rows = []
    for i in range(n):
        q = np.exp(base + t_levels[content_of[i]] * v)
        s = s_levels[sink_of[i]]
        rows.append(np.log(np.concatenate([[s], (1 - s) * q / q.sum()])))
    logp = np.repeat(np.array(rows)[:, None, :], 2, axis=1)
    doc = DocRows(logp=logp, key_mask=np.ones((2, m + 1), dtype=bool), sink=(0,))
    return HeadRows("sink-dominated", 2, 3, (doc, doc), s_levels[sink_of])


def verdicts(d):
    n = len(d)
    return np.array(
        [
            np.sign(d[a, c] - d[a, b])
            for a in range(n)
            for b, c in itertools.combinations([j for j in range(n) if j != a], 2)
        ]
    )


@pytest.mark.parametrize("seed", range(3))
def test_sink_dominated_heads_flip_where_sink_and_content_terms_disagree(seed):
    head_rows = sink_dominated_head_rows(seed)
    doc = head_rows.docs[0]
    sink = verdicts(head_distances(doc.logp, "aitchison_sink", key_mask=doc.key_mask))
    content = verdicts(head_distances(doc.logp, "aitchison_content", key_mask=doc.key_mask))
    expected = int((sink != content).sum())
    assert 0 < expected < len(sink)
    result = flips(head_rows, n_boot=3)
    table = result.table.set_index("metric")
    for metric in FLIP_METRICS:
        # The construction works as intended: keep follows the sink term, drop the content.
        assert (verdicts(result.distances[(metric, "keep")]) == sink).all(), metric
        assert (verdicts(result.distances[(metric, "drop")]) == content).all(), metric
        assert table.loc[metric, "flips"] == expected, metric
        assert table.loc[metric, "n_ties"] == 0


# --- bootstrap ------------------------------------------------------------------------------


def test_bootstrap_is_seeded():
    head_rows = random_head_rows(n_docs=10, seed=2)
    first = flips(head_rows, ("tv", "jsd"), n_boot=40, seed=7)
    second = flips(head_rows, ("tv", "jsd"), n_boot=40, seed=7, n_threads=1)
    other = flips(head_rows, ("tv", "jsd"), n_boot=40, seed=8)
    assert first.table.equals(second.table)
    for metric in ("tv", "jsd"):
        np.testing.assert_array_equal(first.bootstrap[metric], second.bootstrap[metric])
        assert first.bootstrap[metric].shape == (40,)
    assert not np.array_equal(first.bootstrap["tv"], other.bootstrap["tv"])


def test_bootstrap_recounts_every_triplet_of_each_resample():
    # Independent of the implementation: draw the same documents, pool their rows, count by
    # the plain loops. (Summation order differs, so this relies on no verdict being within
    # rounding of a tie, which holds for random data.)
    head_rows = random_head_rows(n_layers=2, n_heads=3, n_docs=10, seed=11)
    result = flips(head_rows, ("jsd", "hellinger"), n_boot=6, seed=3)
    draws = np.random.default_rng(3).integers(0, 10, size=(6, 10))
    n_triplets = 6 * math.comb(5, 2)
    for metric in ("jsd", "hellinger"):
        for r, docs in enumerate(draws):
            resample = HeadRows(
                "r", 2, 3, tuple(head_rows.docs[d] for d in docs), head_rows.sink_mass
            )
            keep = pooled_distance(resample, metric, "keep")
            drop = pooled_distance(resample, metric, "drop")
            ties, flip = flips_reference(keep, drop, 1e-9)
            assert result.bootstrap[metric][r] == sum(flip) / (n_triplets - sum(ties))


def test_bootstrap_with_repeated_draws_counts_each_draw_as_itself():
    # Two documents give only 3 distinct draws: 40 resamples repeat them, and each repeat
    # must get the rate of its own draw (counted once, copied back in resample order).
    from attncoda.experiments.flips import document_sums

    head_rows = random_head_rows(n_layers=2, n_heads=3, n_docs=2, seed=5)
    keep = document_sums(head_rows, "tv", "keep")
    drop = document_sums(head_rows, "tv", "drop")
    weights = resample_weights(2, 40, 1)
    assert len(np.unique(weights, axis=0)) < 40
    rates, moved = bootstrap_rates(keep, drop, weights, 1e-9, 6 * math.comb(5, 2), 1)
    one_by_one = [
        bootstrap_rates(keep, drop, weights[i : i + 1], 1e-9, 6 * math.comb(5, 2), 1)
        for i in range(40)
    ]
    np.testing.assert_array_equal(rates, [r[0] for r, _ in one_by_one])
    np.testing.assert_array_equal(moved, [m[0] for _, m in one_by_one])


def test_bootstrap_ci_contains_the_point_estimate_on_stable_data():
    head_rows = random_head_rows(n_layers=2, n_heads=4, n_docs=24, keys=12, seed=4)
    result = flips(head_rows, n_boot=200)
    for row in result.table.itertuples():
        assert row.ci_low <= row.flip_rate <= row.ci_high, row.metric
        assert row.ci_high - row.ci_low < 0.3


@pytest.mark.parametrize("n_docs", [1, 4, 9])
def test_too_few_documents_give_no_interval_and_say_why(n_docs):
    # n documents give C(2n - 1, n) distinct resamples (1, 35, 24310): no 95% interval.
    head_rows = random_head_rows(n_layers=2, n_heads=3, n_docs=n_docs, seed=6)
    result = flips(head_rows, ("tv", "jsd"), n_boot=50)
    for row in result.table.to_dict("records"):
        assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])  # never zero width
        assert (row["n_docs"], row["n_boot"], row["ci_method"]) == (n_docs, 0, "")
        assert row["ci_note"] == f"no interval: {n_docs} documents, fewer than 10"
        assert 0.0 <= row["flip_rate"] <= 1.0  # the point estimate stands
    assert all(b.shape == (0,) for b in result.bootstrap.values())


@pytest.mark.parametrize("n_docs", [10, 16])
def test_ten_documents_or_more_give_a_named_percentile_interval(n_docs):
    head_rows = random_head_rows(n_layers=2, n_heads=3, n_docs=n_docs, seed=6)
    result = flips(head_rows, ("tv", "jsd"), n_boot=50, seed=4)
    for row in result.table.to_dict("records"):
        rates = result.bootstrap[row["metric"]]
        assert rates.shape == (50,)
        # the 2.5 and 97.5 percentiles of the resampled rates, as numpy computes them
        assert (row["ci_low"], row["ci_high"]) == tuple(np.percentile(rates, [2.5, 97.5]))
        assert row["ci_low"] < row["ci_high"]
        assert (row["n_docs"], row["n_boot"], row["ci_note"]) == (n_docs, 50, "")
        assert row["ci_method"] == "percentile bootstrap over documents"
    assert result.table["ci_low"].dtype == np.float64
    assert str(result.table["n_docs"].dtype) == "int64"


def test_documents_without_a_used_row_are_left_out():
    head_rows = random_head_rows(n_docs=2, seed=9)
    short = DocRows(
        logp=np.log(np.full((12, 1, 3), 1 / 3)), key_mask=np.ones((1, 3), bool), sink=(0, 1)
    )
    padded = HeadRows("synthetic", 3, 4, (*head_rows.docs, short), head_rows.sink_mass)
    a, b = flips(head_rows, ("tv",), n_boot=5), flips(padded, ("tv",), n_boot=5)
    assert b.n_docs == 2 and b.n_rows == a.n_rows
    np.testing.assert_array_equal(a.distances[("tv", "keep")], b.distances[("tv", "keep")])


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n_boot", [0, -3, True, 2.5])
def test_n_boot_must_be_positive(n_boot):
    msg = f"n_boot must be a positive int (bootstrap resamples over documents); got {n_boot!r}"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(random_head_rows(), n_boot=n_boot)


def test_metric_errors():
    head_rows = random_head_rows()
    msg = (
        "flips compares the keep and drop conventions of a classic metric; got 'aitchison': "
        "use one of cosine, jsd, entropy_gap, hellinger, tv"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(head_rows, ("tv", "aitchison"))
    msg = "metrics must be distinct; got ['tv', 'tv']"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(head_rows, ("tv", "tv"))
    msg = "metrics must be a non-empty sequence of metric names; got 'tv'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(head_rows, "tv")


def test_tol_seed_and_thread_errors():
    head_rows = random_head_rows()
    msg = "tol must be a non-negative float (relative to max|D|); got -1e-09"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(head_rows, tol=-1e-9)
    with pytest.raises(AttncodaError, match=re.escape("seed must be an int; got 1.5")):
        flips(head_rows, seed=1.5)
    with pytest.raises(AttncodaError, match=re.escape("n_threads must be a positive int; got 0")):
        flips(head_rows, n_threads=0)


def test_too_few_heads():
    doc = DocRows(logp=np.log(np.full((2, 1, 4), 0.25)), key_mask=np.ones((1, 4), bool), sink=(0,))
    head_rows = HeadRows("pair", 1, 2, (doc,), np.array([0.25, 0.25]))
    msg = "flips needs at least 3 heads for a triplet; model 'pair' has 2"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(head_rows)


def test_no_used_row():
    doc = DocRows(logp=np.log(np.full((3, 2, 3), 1 / 3)), key_mask=np.ones((2, 3), bool), sink=(0,))
    doc = DocRows(logp=doc.logp, key_mask=np.array([[1, 1, 0], [1, 1, 0]], bool), sink=(0,))
    head_rows = HeadRows("short", 1, 3, (doc,), np.full(3, 0.5))
    msg = (
        "model 'short' has no recorded row with every sink key present and at least 2 content "
        "keys: head distances are means over such rows"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flips(head_rows)


def test_triplet_flips_errors():
    eye = np.eye(3)
    msg = "d_keep and d_drop must have the same shape; got (3, 3) and (4, 4)"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        triplet_flips(eye, np.eye(4))
    msg = "d_keep must be a square (head, head) matrix; got shape (3, 4)"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        triplet_flips(np.ones((3, 4)), eye)
    bad = eye.copy()
    bad[1, 2] = np.nan
    msg = "d_drop has a non-finite entry at index (1, 2)"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        triplet_flips(eye, bad)
    msg = "a triplet needs at least 3 heads; the matrices have 2"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        triplet_flips(np.eye(2), np.eye(2))


# --- figure ---------------------------------------------------------------------------------


def test_flip_rate_bars_name_the_conventions_and_are_a_png(synthetic, tmp_path):
    from attncoda.experiments.flips._figure import flip_rate_figure, plot_flip_rates

    _, result = synthetic
    fig = flip_rate_figure(result.table)
    ax = fig.axes[0]
    assert ax.get_title() == "Flip rate of head-similarity verdicts, keep vs drop\nsynthetic"
    assert ax.get_ylabel() == "flip rate (keep vs drop); whiskers: bootstrap 95% CI over documents"
    # 3 documents: no interval, so no whisker and a label that says so
    assert all(t.get_text().endswith("\nno CI") for t in ax.texts)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(FLIP_METRICS)
    heights = [round(p.get_height(), 12) for p in ax.patches]
    assert heights == [round(r, 12) for r in result.table["flip_rate"]]
    path = plot_flip_rates(result.table, tmp_path / "flips.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flips.png"]


def test_flip_rate_bars_errors(synthetic):
    from attncoda.experiments.flips._figure import flip_rate_figure

    _, result = synthetic
    msg = "the flips table lacks the column 'ci_low'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        flip_rate_figure(result.table.drop(columns="ci_low"))
    with pytest.raises(AttncodaError, match=re.escape("the flips table has no rows to plot")):
        flip_rate_figure(result.table.iloc[:0])


def test_flips_reports_its_metrics_inside_a_shown_block(monkeypatch, capsys):
    # The flips unit runs for most of a minute on SmolLM2, its head distances in no loop of
    # their own long enough to report: inside a run that shows progress it counts metrics.
    from attncoda import _progress
    from attncoda._progress import shown

    monkeypatch.setattr(_progress, "EVERY", 0.0)
    head_rows = random_head_rows()
    with shown():
        flips(head_rows, metrics=("jsd", "cosine"), n_boot=5, seed=0)
    err = capsys.readouterr().err
    assert f"flips {head_rows.model}: metrics: 1/2 metric" in err
    assert f"flips {head_rows.model}: metrics: 2/2 metric, done" in err
