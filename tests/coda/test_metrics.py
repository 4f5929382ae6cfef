"""Tests of attncoda.coda.metrics: row metrics under a convention, head distance matrices.

References: scipy (Jensen–Shannon, cosine, entropy), hand formulas written here in plain
numpy (Hellinger, total variation), scikit-bio's clr for the Aitchison family, and a plain
Python loop over head pairs and rows calling ``row_distance`` for ``head_distances``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.spatial.distance import cosine as scipy_cosine
from scipy.spatial.distance import jensenshannon
from skbio.stats.composition import clr as skbio_clr

from attncoda import head_distances, row_distance

CLASSIC = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
COMPOSITIONAL = ("aitchison", "aitchison_sink", "aitchison_content")
METRIC_CONVENTIONS = [(m, c) for m in CLASSIC for c in ("keep", "drop")] + [
    (m, None) for m in COMPOSITIONAL
]
IDS = [f"{m}-{c}" if c else m for m, c in METRIC_CONVENTIONS]


def groups(sink, n: int) -> tuple[list[int], list[int]]:
    s = sorted({sink} if isinstance(sink, int) else set(sink))
    return s, [j for j in range(n) if j not in s]


def as64(backend, x) -> np.ndarray:
    return backend.numpy(x).astype(np.float64)


def classic_reference(p: np.ndarray, q: np.ndarray, metric: str) -> float:
    """One classic metric between two probability vectors, without attncoda."""
    if metric == "jsd":
        # scipy returns the distance (natural log by default), the divergence squared; it
        # takes the sqrt of a divergence that rounding can leave a hair below 0 (NaN then),
        # which only happens when the true divergence is 0 to rounding.
        with np.errstate(invalid="ignore"):
            js = float(jensenshannon(p, q))
        return 0.0 if math.isnan(js) else js**2
    if metric == "cosine":
        return float(scipy_cosine(p, q))
    if metric == "entropy_gap":
        return float(abs(scipy.stats.entropy(p) - scipy.stats.entropy(q)))
    if metric == "hellinger":
        return float(np.sqrt(np.sum((np.sqrt(p) - np.sqrt(q)) ** 2)) / np.sqrt(2))
    if metric == "tv":
        return float(0.5 * np.sum(np.abs(p - q)))
    raise AssertionError(metric)


def reference(z0: np.ndarray, z1: np.ndarray, metric: str, convention, sink) -> float:
    """Any metric between two logit rows (float64), without attncoda."""
    n = z0.shape[-1]
    s, c = groups(sink, n)
    p0 = scipy.special.softmax(z0.astype(np.float64))
    p1 = scipy.special.softmax(z1.astype(np.float64))
    if metric in CLASSIC:
        if convention == "drop":
            p0, p1 = p0[c] / p0[c].sum(), p1[c] / p1[c].sum()
        return classic_reference(p0, p1, metric)
    c0, c1 = skbio_clr(p0), skbio_clr(p1)
    if metric == "aitchison":
        return float(np.linalg.norm(c0 - c1))
    if metric == "aitchison_content":
        return float(np.linalg.norm(skbio_clr(p0[c]) - skbio_clr(p1[c])))
    k, m = len(s), len(c)  # aitchison_sink: the balance as <clr, contrast>
    e = np.zeros(n)
    e[s], e[c] = 1 / k, -1 / m
    return float(abs(math.sqrt(k * m / n) * (c0 - c1) @ e))


def sinky_logits(rng: np.random.Generator, shape, sink_strength: float = 4.0) -> np.ndarray:
    z = rng.normal(size=shape) * 2.0
    z[..., 0] += sink_strength * rng.random(shape[:-1])
    return z


# ------------------------------------------------------------------------- row metrics


@pytest.mark.parametrize("sink", [0, [3, 0]], ids=["sink0", "sink03"])
@pytest.mark.parametrize(("metric", "convention"), METRIC_CONVENTIONS, ids=IDS)
def test_row_distance_matches_reference(backend, dtype, tol, metric, convention, sink):
    rng = np.random.default_rng(10)
    z0, z1 = sinky_logits(rng, (30, 9)), sinky_logits(rng, (30, 9))
    a0, a1 = backend.array(z0, dtype), backend.array(z1, dtype)
    out = row_distance(a0, a1, metric, convention=convention, sink=sink)
    backend.assert_like(out, a0)
    assert tuple(out.shape) == (30,)
    x0, x1 = as64(backend, a0), as64(backend, a1)
    ref = [reference(x0[r], x1[r], metric, convention, sink) for r in range(30)]
    np.testing.assert_allclose(as64(backend, out), ref, rtol=tol, atol=tol)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_jsd_matches_scipy_under_both_conventions(backend, dtype, tol, data):
    n = data.draw(st.integers(3, 12), label="n_keys")
    elements = st.floats(-20.0, 20.0, allow_nan=False, width=64)
    z = data.draw(hnp.arrays(np.float64, (2, 3, n), elements=elements), label="z")
    sink = data.draw(
        st.one_of(
            st.integers(0, n - 1),
            st.lists(st.integers(0, n - 1), min_size=1, max_size=n - 1, unique=True),
        ),
        label="sink",
    )
    a0, a1 = backend.array(z[0], dtype), backend.array(z[1], dtype)
    x0, x1 = as64(backend, a0), as64(backend, a1)
    for convention in ("keep", "drop"):
        out = row_distance(a0, a1, "jsd", convention=convention, sink=sink)
        backend.assert_like(out, a0)
        ref = [reference(x0[r], x1[r], "jsd", convention, sink) for r in range(3)]
        np.testing.assert_allclose(as64(backend, out), ref, rtol=tol, atol=tol)


def test_keep_versus_drop_same_content(backend, dtype, tol):
    # Same content composition, different sink mass: drop sees nothing, keep sees the sink.
    p = backend.array(np.log([0.90, 0.05, 0.05]), dtype)
    q = backend.array(np.log([0.50, 0.25, 0.25]), dtype)
    # JSD = H(m) - (H(p) + H(q)) / 2 with m = (p + q) / 2 = [0.7, 0.15, 0.15], by hand:
    h = lambda v: -sum(x * math.log(x) for x in v)  # noqa: E731
    jsd = h([0.7, 0.15, 0.15]) - (h([0.9, 0.05, 0.05]) + h([0.5, 0.25, 0.25])) / 2
    assert jsd == pytest.approx(0.101749225079, abs=1e-12)  # not the docstring's 0.1034
    assert jsd == pytest.approx(jensenshannon([0.9, 0.05, 0.05], [0.5, 0.25, 0.25]) ** 2)
    assert float(row_distance(p, q, "jsd", convention="keep")) == pytest.approx(
        jsd, rel=tol, abs=tol
    )
    assert float(row_distance(p, q, "jsd", convention="drop")) == pytest.approx(0.0, abs=tol)
    assert float(row_distance(p, q, "aitchison_content")) == pytest.approx(0.0, abs=tol)
    assert float(row_distance(p, q, "tv", convention="keep")) == pytest.approx(0.4, rel=tol)


# ---------------------------------------------------------------------- head distances


def loop_head_distances(backend, z, metric, convention, sink, mask) -> np.ndarray:
    """D[a, b] by a plain loop over head pairs and rows with m >= 2, calling row_distance."""
    heads, rows, keys = z.shape
    k = 1 if isinstance(sink, int) else len(sink)
    out = np.zeros((heads, heads))
    for a in range(heads):
        for b in range(heads):
            values = []
            for r in range(rows):
                present = np.flatnonzero(mask[r])
                if len(present) - k < 2:
                    continue
                # Causal rows keep keys 0..r, so the sink positions are unchanged.
                d = row_distance(
                    z[a, r, : len(present)],
                    z[b, r, : len(present)],
                    metric,
                    convention=convention,
                    sink=sink,
                )
                values.append(float(d))
            out[a, b] = sum(values) / len(values)
    return out


def causal_case(rng, heads: int, n: int, garbage: float):
    z = sinky_logits(rng, (heads, n, n))
    mask = np.tril(np.ones((n, n), dtype=bool))
    return np.where(mask, z, garbage), mask


@pytest.mark.parametrize("masked", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("metric", "convention"), METRIC_CONVENTIONS, ids=IDS)
def test_head_distances_equal_a_loop_over_row_distance(
    backend, dtype, tol, metric, convention, masked
):
    rng = np.random.default_rng(11)
    heads, n = 4, 7
    if masked:
        z, mask = causal_case(rng, heads, n, np.nan)
        z[1][~mask] = 1e30  # garbage of another kind in another head
        sink = 0
    else:
        z, mask = sinky_logits(rng, (heads, n, n)), np.ones((n, n), dtype=bool)
        sink = [2, 0]
    a = backend.array(z, dtype)
    key_mask = mask if backend.name == "numpy" else torch.as_tensor(mask)
    out = head_distances(
        a, metric, convention=convention, sink=sink, key_mask=key_mask if masked else None
    )
    backend.assert_like(out, a)
    assert tuple(out.shape) == (heads, heads)
    d = backend.numpy(out)
    np.testing.assert_array_equal(d, d.T)
    np.testing.assert_array_equal(np.diag(d), 0.0)
    ref = loop_head_distances(backend, a, metric, convention, sink, mask)
    np.fill_diagonal(ref, 0.0)
    np.testing.assert_allclose(d.astype(np.float64), ref, rtol=tol, atol=tol)
    assert np.all(d[~np.eye(heads, dtype=bool)] > 0)


@pytest.mark.parametrize(("metric", "convention"), METRIC_CONVENTIONS, ids=IDS)
def test_head_distances_of_shuffled_rows_with_holes_in_small_blocks(
    backend, metric, convention, monkeypatch
):
    # Rows come out of causal order and some keys inside a row's extent are absent, and the
    # blocks are a few rows each: the blocks trimmed to their rows' extent must still see
    # every key of every row.
    from attncoda.coda import _pairs

    monkeypatch.setattr(_pairs, "_PAIR_BYTES", 256)
    monkeypatch.setattr(_pairs, "_SLAB_BYTES", 256)
    monkeypatch.setattr(_pairs, "_CHUNK_BYTES", 256)
    rng = np.random.default_rng(21)
    heads, n = 4, 12
    z, mask = causal_case(rng, heads, n, np.nan)
    holes = rng.random((n, n)) < 0.2
    holes[:, 0] = False
    mask = mask & ~holes
    order = rng.permutation(n)
    z, mask = z[:, order], mask[order]
    z = np.where(mask, z, np.nan)
    out = head_distances(
        backend.array(z, "float64"),
        metric,
        convention=convention,
        key_mask=backend.array(mask, "bool"),
    )
    ref = np.zeros((heads, heads))
    count = 0
    for r in range(n):
        keys = np.flatnonzero(mask[r])
        if len(keys) - 1 < 2:
            continue
        zr = z[:, r, keys]
        ref += row_distance(zr[:, None, :], zr[None, :, :], metric, convention=convention)
        count += 1
    ref /= count
    np.fill_diagonal(ref, 0.0)
    # Sums of a few float64 terms in another order: within 1e-12 (rounding, not maths).
    np.testing.assert_allclose(backend.numpy(out), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("metric", "convention"), METRIC_CONVENTIONS, ids=IDS)
def test_head_distances_ignore_absent_keys_and_short_rows(backend, metric, convention):
    rng = np.random.default_rng(12)
    z, mask = causal_case(rng, 3, 6, 0.0)
    results = []
    for garbage in (np.nan, 1e30, -1e30, 0.0):
        zg = np.where(mask, z, garbage)
        # Rows 0 and 1 have m = 0 and m = 1 content keys: whatever they hold is left out.
        zg[:, :2, :2] = rng.normal(size=(3, 2, 2)) * 10
        out = head_distances(
            backend.array(zg, "float64"),
            metric,
            convention=convention,
            key_mask=backend.array(mask, "bool"),
        )
        results.append(backend.numpy(out))
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


def test_head_distances_leave_out_rows_with_fewer_than_two_content_keys(backend):
    # Rows 0..2 of a causal mask have m = 0, 1, 2 content keys (sink 0). Rows 0 and 1 are
    # left out: the result equals head_distances over rows 2.. only.
    rng = np.random.default_rng(13)
    z, mask = causal_case(rng, 3, 6, 0.0)
    full = head_distances(
        backend.array(z, "float64"), "jsd", convention="drop", key_mask=backend.array(mask, "bool")
    )
    tail = head_distances(
        backend.array(z[:, 2:], "float64"),
        "jsd",
        convention="drop",
        key_mask=backend.array(mask[2:], "bool"),
    )
    np.testing.assert_allclose(backend.numpy(full), backend.numpy(tail), rtol=1e-12)


def test_head_distances_on_attention_with_zeros_keep_classic(backend):
    # Exact zeros (-inf logs) in present keys are fine for the classic metrics.
    rng = np.random.default_rng(14)
    z = sinky_logits(rng, (3, 5, 6))
    z[0, :, 3] = -np.inf
    a = backend.array(z, "float64")
    for metric in ("jsd", "tv", "hellinger", "cosine", "entropy_gap"):
        out = head_distances(a, metric, convention="keep")
        ref = loop_head_distances(backend, a, metric, "keep", 0, np.ones((5, 6), dtype=bool))
        np.fill_diagonal(ref, 0.0)
        np.testing.assert_allclose(backend.numpy(out), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("metric", ["aitchison", "aitchison_content", "hellinger"])
def test_head_distances_of_nearly_identical_heads(backend, dtype, tol, metric):
    """The Gram-matrix shortcut must not lose precision for nearly identical heads.

    ``sqrt(|x|^2 + |y|^2 - 2 x.y)`` cancels catastrophically when x ~ y: two heads whose
    logits differ by ~1e-3 (float32) or ~1e-6 (float64) came out up to 55% off (float32
    aitchison_content: 0.00156 for 0.00344) before close pairs were recomputed directly.
    """
    rng = np.random.default_rng(16)
    eps = 1e-3 if dtype == "float32" else 1e-6
    base = rng.normal(size=(20, 16)) * 5
    z = np.stack([base, base + eps * rng.normal(size=base.shape)])
    a = backend.array(z, dtype)
    convention = None if metric.startswith("aitchison") else "keep"
    out = head_distances(a, metric, convention=convention)
    x = as64(backend, a)
    ref = np.mean([reference(x[0, r], x[1, r], metric, convention, 0) for r in range(20)])
    assert float(backend.numpy(out)[0, 1]) == pytest.approx(ref, rel=tol, abs=tol)


def test_metric_inputs_are_not_modified(backend, dtype):
    rng = np.random.default_rng(18)
    z, mask = causal_case(rng, 3, 6, np.nan)
    a = backend.array(z, dtype)
    m = backend.array(mask, "bool")
    r0, r1 = backend.array(z[0, 5], dtype), backend.array(z[1, 5], dtype)
    before = [backend.numpy(x) for x in (a, m, r0, r1)]
    for metric, convention in METRIC_CONVENTIONS:
        head_distances(a, metric, convention=convention, key_mask=m)
        row_distance(r0, r1, metric, convention=convention, sink=[0, 2])
    for x, y in zip((a, m, r0, r1), before, strict=True):
        np.testing.assert_array_equal(backend.numpy(x), y)  # NaN == NaN here


# ---------------------------------------------------------------------- edge cases


def test_head_distances_causal_rows_with_a_two_key_sink(backend):
    # Row 0 of a causal mask has only key 0; with sink [0, 1] it has no content keys, so it
    # is left out ("mean over rows with every sink key present and m >= 2"), like query 0
    # with sink 0, and the mean over the other rows is the per-row loop's.
    rng = np.random.default_rng(15)
    z, mask = causal_case(rng, 3, 6, 0.0)
    a = backend.array(z, "float64")
    out = head_distances(a, "aitchison", sink=[0, 1], key_mask=backend.array(mask, "bool"))
    ref = loop_head_distances(backend, a, "aitchison", None, [0, 1], mask)
    np.fill_diagonal(ref, 0.0)
    np.testing.assert_allclose(backend.numpy(out), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("metric", ["aitchison", "aitchison_content"])
def test_head_distances_float32_pairs_just_above_the_recompute_threshold(backend, metric):
    # Pairs with d^2 just above 1e-4 (|x_a|^2 + |x_b|^2), in float32. There the Gram form
    # alone is ~6e-4 relative off (eps32 * 1e4 / 2), ~2e-4 on a distance of ~0.33: so
    # _pairs.gram_mean's recompute threshold is max(1e-4, 1e5 eps) of the scale, 1.2e-2 in
    # float32, and these pairs are recomputed from their difference, within 1e-4 of the
    # float64 reference. (In float64, 1e-4 is ample: eps64 * 1e4 ~ 2e-12.)
    rng = np.random.default_rng(17)
    base = rng.normal(size=(1, 1, 16)) * 5
    eps = np.linspace(0.04, 0.12, 24)[:, None, None]
    z = np.concatenate([base, base + eps * rng.normal(size=(24, 1, 16))]).astype(np.float32)
    out = head_distances(backend.array(z, "float32"), metric)
    x = z.astype(np.float64)
    if metric == "aitchison_content":
        x = x[..., 1:]  # sink 0
    c = x - x.mean(-1, keepdims=True)
    ref = np.linalg.norm(c[:, None] - c[None, :], axis=-1).mean(-1)
    np.testing.assert_allclose(as64(backend, out), ref, rtol=1e-4, atol=1e-4)


def test_head_distances_leave_out_rows_without_their_sink():
    # A row that cannot see a sink key (e.g. a query before a token sink) has no sink/content
    # split: it is left out, like a row with fewer than two content keys.
    rng = np.random.default_rng(7)
    z = rng.normal(size=(3, 5, 5))
    mask = ~np.eye(5, dtype=bool)  # row r lacks key r; row 0 lacks the sink
    got = head_distances(z, "tv", convention="drop", key_mask=mask)
    rows = range(1, 5)
    want = np.array(
        [
            [
                np.mean(
                    [
                        row_distance(z[a, r][mask[r]], z[b, r][mask[r]], "tv", convention="drop")
                        for r in rows
                    ]
                )
                for b in range(3)
            ]
            for a in range(3)
        ]
    )
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
