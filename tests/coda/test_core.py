"""Tests of attncoda.coda.geometry and attncoda.coda.entropies: clr, log_probs, sink balance,
the Aitchison and entropy splits.

Every expected value comes from somewhere else than the code under test: numbers worked out
by hand, scikit-bio, scipy, or a plain numpy computation along a different route (the sink
balance as an inner product of clr with the ILR contrast vector, the entropy-change split as
a Shapley value over hybrid rows). Every numeric test runs on numpy and torch, float64 and
float32, and checks that outputs keep the input's type, dtype and device.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from skbio.stats.composition import clr as skbio_clr
from skbio.stats.composition import multi_replace

import attncoda.coda.entropies
import attncoda.coda.geometry
import attncoda.coda.metrics
from attncoda import (
    aitchison,
    aitchison_split,
    clr,
    entropy,
    entropy_change_split,
    entropy_split,
    log_probs,
    sink_balance,
)

LOGIT = st.floats(-20.0, 20.0, allow_nan=False, allow_infinity=False, width=64)


@st.composite
def logit_rows(draw, n_arrays: int = 1, single_sink: bool | None = None):
    """``(arrays, sink)``: ``n_arrays`` float64 logit arrays of one shape (batch, n), n in
    2..12, and a sink: an int, or a list of 1..n-1 distinct positions in any order."""
    n = draw(st.integers(2, 12), label="n_keys")
    batch = draw(st.integers(1, 4), label="batch")
    arrays = [
        draw(hnp.arrays(np.float64, (batch, n), elements=LOGIT), label=f"z{i}")
        for i in range(n_arrays)
    ]
    as_int = st.integers(0, n - 1)
    as_list = st.lists(st.integers(0, n - 1), min_size=1, max_size=n - 1, unique=True)
    if single_sink is True:
        sink = draw(as_int, label="sink")
    elif single_sink is False:
        sink = draw(as_list, label="sink")
    else:
        sink = draw(st.one_of(as_int, as_list), label="sink")
    return arrays, sink


def groups(sink, n: int) -> tuple[list[int], list[int]]:
    """Sink positions S and content positions C, computed independently of attncoda."""
    s = sorted({sink} if isinstance(sink, int) else set(sink))
    return s, [j for j in range(n) if j not in s]


def as64(backend, x) -> np.ndarray:
    return backend.numpy(x).astype(np.float64)


def softmax64(z: np.ndarray) -> np.ndarray:
    return scipy.special.softmax(np.asarray(z, dtype=np.float64), axis=-1)


def contrast(sink, n: int) -> np.ndarray:
    """The ILR contrast vector of the sink/content balance: b = <clr(z), e>."""
    s, c = groups(sink, n)
    k, m = len(s), len(c)
    e = np.empty(n)
    e[s] = math.sqrt(k * m / n) / k
    e[c] = -math.sqrt(k * m / n) / m
    return e


def skbio_part_distance(p0: np.ndarray, p1: np.ndarray) -> np.ndarray:
    """Aitchison distance between rows of positive compositions via scikit-bio's clr."""
    if p0.shape[-1] == 1:
        return np.zeros(p0.shape[0])
    return np.linalg.norm(skbio_clr(p0) - skbio_clr(p1), axis=-1)


# ------------------------------------------------------------------------ property tests


@settings(max_examples=200, deadline=None)
@given(case=logit_rows(n_arrays=2))
def test_aitchison_split_is_pythagorean_and_matches_references(backend, dtype, tol, case):
    (z0, z1), sink = case
    a0, a1 = backend.array(z0, dtype), backend.array(z1, dtype)
    split = aitchison_split(a0, a1, sink=sink)
    for field in (split.total, split.sink, split.within_sink, split.content):
        backend.assert_like(field, a0)
        assert tuple(field.shape) == (z0.shape[0],)
    total, sink_t, within, content = (
        as64(backend, f) for f in (split.total, split.sink, split.within_sink, split.content)
    )
    # total² = sink² + within² + content², held to the tolerance of the distances themselves
    # (float32 rows near 15 in magnitude leave ~1e-6 of absolute error in a distance).
    lhs, rhs = total, np.sqrt(sink_t**2 + within**2 + content**2)
    assert np.all(np.abs(lhs - rhs) <= tol * np.maximum(lhs, 1.0)), (lhs, rhs)

    # Independent references, in float64 from the very inputs the function saw.
    x0, x1 = as64(backend, a0), as64(backend, a1)
    n = x0.shape[-1]
    s, c = groups(sink, n)
    p0, p1 = softmax64(x0), softmax64(x1)
    e = contrast(sink, n)
    ref_total = np.linalg.norm(skbio_clr(p0) - skbio_clr(p1), axis=-1)
    ref_sink = np.abs(skbio_clr(p0) @ e - skbio_clr(p1) @ e)
    ref_within = skbio_part_distance(p0[:, s], p1[:, s])
    ref_content = skbio_part_distance(p0[:, c], p1[:, c])
    np.testing.assert_allclose(total, ref_total, rtol=tol, atol=tol)
    np.testing.assert_allclose(sink_t, ref_sink, rtol=tol, atol=tol)
    np.testing.assert_allclose(within, ref_within, rtol=tol, atol=tol)
    np.testing.assert_allclose(content, ref_content, rtol=tol, atol=tol)
    np.testing.assert_allclose(as64(backend, aitchison(a0, a1)), ref_total, rtol=tol, atol=tol)


@settings(max_examples=200, deadline=None)
@given(case=logit_rows(n_arrays=1))
def test_entropy_identity_and_parts_match_scipy(backend, dtype, tol, case):
    (z,), sink = case
    a = backend.array(z, dtype)
    split = entropy_split(a, sink=sink)
    fields = (split.total, split.binary, split.within_sink, split.content, split.sink_mass)
    for field in fields:
        backend.assert_like(field, a)
        assert tuple(field.shape) == (z.shape[0],)
    h, hb, h_s, h_q, s_mass = (as64(backend, f) for f in fields)
    np.testing.assert_allclose(h, hb + s_mass * h_s + (1 - s_mass) * h_q, rtol=tol, atol=tol)

    p = softmax64(as64(backend, a))
    s, c = groups(sink, p.shape[-1])
    mass_s, mass_c = p[:, s].sum(-1), p[:, c].sum(-1)
    np.testing.assert_allclose(h, scipy.stats.entropy(p, axis=-1), rtol=tol, atol=tol)
    np.testing.assert_allclose(s_mass, mass_s, rtol=tol, atol=tol)
    binary = -(mass_s * np.log(mass_s) + mass_c * np.log(mass_c))
    np.testing.assert_allclose(hb, binary, rtol=tol, atol=tol)
    np.testing.assert_allclose(h_s, scipy.stats.entropy(p[:, s], axis=-1), rtol=tol, atol=tol)
    np.testing.assert_allclose(h_q, scipy.stats.entropy(p[:, c], axis=-1), rtol=tol, atol=tol)


def hybrid(p_sink: np.ndarray, p_content: np.ndarray, s: list[int], c: list[int]) -> np.ndarray:
    """The row with ``p_sink``'s sink part and ``p_content``'s content composition."""
    out = np.empty_like(p_sink)
    out[:, s] = p_sink[:, s]
    q = p_content[:, c] / p_content[:, c].sum(-1, keepdims=True)
    out[:, c] = p_sink[:, c].sum(-1, keepdims=True) * q
    return out


@settings(max_examples=200, deadline=None)
@given(case=logit_rows(n_arrays=2))
def test_entropy_change_split_sums_and_is_the_shapley_value(backend, dtype, tol, case):
    (z0, z1), sink = case
    a0, a1 = backend.array(z0, dtype), backend.array(z1, dtype)
    change = entropy_change_split(a0, a1, sink=sink)
    for field in (change.total, change.sink, change.content):
        backend.assert_like(field, a0)
    total, sink_part, content_part = (
        as64(backend, f) for f in (change.total, change.sink, change.content)
    )
    np.testing.assert_allclose(sink_part + content_part, total, rtol=0, atol=tol)
    assert abs(sink_part.mean() + content_part.mean() - total.mean()) <= tol

    # Two-factor Shapley value by brute force: entropies of the four (sink, content) rows.
    p0, p1 = softmax64(as64(backend, a0)), softmax64(as64(backend, a1))
    s, c = groups(sink, p0.shape[-1])
    h = lambda p: scipy.stats.entropy(p, axis=-1)  # noqa: E731
    h00, h11 = h(p0), h(p1)
    h01, h10 = h(hybrid(p0, p1, s, c)), h(hybrid(p1, p0, s, c))  # (sink of, content of)
    shapley_content = ((h01 - h00) + (h11 - h10)) / 2
    shapley_sink = ((h10 - h00) + (h11 - h01)) / 2
    np.testing.assert_allclose(total, h11 - h00, rtol=tol, atol=tol)
    np.testing.assert_allclose(content_part, shapley_content, rtol=tol, atol=tol)
    np.testing.assert_allclose(sink_part, shapley_sink, rtol=tol, atol=tol)


@settings(max_examples=200, deadline=None)
@given(
    case=logit_rows(n_arrays=2),
    shifts=st.lists(st.floats(-5.0, 5.0, allow_nan=False), min_size=12, max_size=12),
    offset=st.floats(-10.0, 10.0, allow_nan=False),
    delta=st.floats(0.5, 5.0, allow_nan=False),
    sign=st.sampled_from([-1.0, 1.0]),
)
def test_content_term_invariant_and_sink_term_moves(
    backend, dtype, tol, case, shifts, offset, delta, sign
):
    (z0, z1), sink = case
    n = z0.shape[-1]
    s, c = groups(sink, n)
    a0, a1 = backend.array(z0, dtype), backend.array(z1, dtype)
    base = aitchison_split(a0, a1, sink=sink)

    # Move every sink logit (each by its own amount), then add a constant to the row.
    moved = z0.copy()
    moved[:, s] += np.asarray(shifts[: len(s)])
    moved += offset
    after = aitchison_split(backend.array(moved, dtype), a1, sink=sink)
    backend.assert_like(after.content, a0)
    np.testing.assert_allclose(
        as64(backend, after.content), as64(backend, base.content), rtol=tol, atol=tol
    )
    # Adding a constant alone leaves every term unchanged.
    shifted = aitchison_split(backend.array(z0 + offset, dtype), a1, sink=sink)
    for name in ("total", "sink", "within_sink", "content"):
        np.testing.assert_allclose(
            as64(backend, getattr(shifted, name)),
            as64(backend, getattr(base, name)),
            rtol=tol,
            atol=tol,
        )

    # Moving all sink logits together by d moves the balance by sqrt(k m / n) d, and only it.
    d = sign * delta
    pushed = z0.copy()
    pushed[:, s] += d
    k, m = len(s), len(c)
    expected = math.sqrt(k * m / n) * abs(d)
    a_pushed = backend.array(pushed, dtype)
    self_split = aitchison_split(a0, a_pushed, sink=sink)
    np.testing.assert_allclose(as64(backend, self_split.sink), expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(as64(backend, self_split.total), expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(as64(backend, self_split.content), 0.0, atol=tol)
    np.testing.assert_allclose(as64(backend, self_split.within_sink), 0.0, atol=tol)
    b_move = as64(backend, sink_balance(a_pushed, sink=sink)) - as64(
        backend, sink_balance(a0, sink=sink)
    )
    np.testing.assert_allclose(b_move, math.sqrt(k * m / n) * d, rtol=tol, atol=tol)


@settings(max_examples=200, deadline=None)
@given(case=logit_rows(n_arrays=1))
def test_clr_rows_sum_to_zero_and_ignore_normalisation(backend, dtype, tol, case):
    (z,), _ = case
    a = backend.array(z, dtype)
    out = clr(a)
    backend.assert_like(out, a)
    assert tuple(out.shape) == z.shape
    x = as64(backend, out)
    np.testing.assert_allclose(x.sum(-1), 0.0, atol=tol)
    log_sm = scipy.special.log_softmax(as64(backend, a), axis=-1)
    np.testing.assert_allclose(x, as64(backend, clr(backend.array(log_sm, dtype))), atol=tol)
    np.testing.assert_allclose(x, skbio_clr(softmax64(as64(backend, a))), atol=tol)


@settings(max_examples=200, deadline=None)
@given(case=logit_rows(n_arrays=2, single_sink=True))
def test_within_sink_is_zero_for_a_single_sink_key(backend, dtype, case):
    (z0, z1), sink = case
    a0 = backend.array(z0, dtype)
    split = aitchison_split(a0, backend.array(z1, dtype), sink=sink)
    backend.assert_like(split.within_sink, a0)
    np.testing.assert_array_equal(backend.numpy(split.within_sink), 0.0)
    es = entropy_split(a0, sink=sink)
    np.testing.assert_array_equal(backend.numpy(es.within_sink), 0.0)


# ---------------------------------------------------------------------------- references


def test_clr_matches_skbio(backend, dtype, tol):
    p = np.random.default_rng(1).dirichlet(np.full(7, 0.7), size=40)
    lp = backend.array(np.log(p), dtype)
    out = clr(lp)
    backend.assert_like(out, lp)
    ref = skbio_clr(np.exp(as64(backend, lp)))  # scikit-bio takes the probabilities
    np.testing.assert_allclose(as64(backend, out), ref, rtol=tol, atol=tol)


def test_log_probs_replace_matches_multi_replace(backend, dtype, tol):
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(6), size=12)
    p[rng.random(p.shape) < 0.3] = 0.0
    p[:, 0] += 1e-3  # no row is all zeros
    p /= p.sum(-1, keepdims=True)
    p[3] = np.full(6, 1 / 6)  # a row without zeros is only closed, never shrunk
    assert (p == 0).any()
    a = backend.array(p, dtype)
    for delta in (None, 0.01):
        out = log_probs(a, zeros="replace", delta=delta)
        backend.assert_like(out, a)
        ref = np.log(multi_replace(as64(backend, a), delta=delta))
        np.testing.assert_allclose(as64(backend, out), ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(
        as64(backend, log_probs(a, zeros="replace"))[3], np.log(1 / 6), rtol=tol, atol=tol
    )


def test_log_probs_of_positive_rows_is_the_log(backend, dtype, tol):
    p = np.random.default_rng(3).dirichlet(np.ones(5), size=(3, 4))
    a = backend.array(p, dtype)
    out = log_probs(a)
    backend.assert_like(out, a)
    assert tuple(out.shape) == p.shape
    np.testing.assert_allclose(as64(backend, out), np.log(as64(backend, a)), rtol=tol, atol=tol)


def test_entropy_matches_scipy_with_and_without_zeros(backend, dtype, tol):
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.full(9, 0.5), size=25)
    p[::3, 4] = 0.0
    p /= p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    a = backend.array(lp, dtype)
    out = entropy(a)
    backend.assert_like(out, a)
    ref = scipy.stats.entropy(np.exp(as64(backend, a)), axis=-1)
    np.testing.assert_allclose(as64(backend, out), ref, rtol=tol, atol=tol)
    # Logits give the same entropy as their log-softmax.
    shifted = backend.array(lp + 3.0, dtype)
    np.testing.assert_allclose(as64(backend, entropy(shifted)), ref, rtol=tol, atol=tol)


def test_sink_balance_by_hand(backend, dtype, tol):
    a = backend.array(np.log([0.8, 0.1, 0.1]), dtype)
    out = sink_balance(a, sink=0)
    backend.assert_like(out, a)
    # k = 1, m = 2, n = 3: b = sqrt(1*2/3) * (log 0.8 - (log 0.1 + log 0.1) / 2) = sqrt(2/3) log 8
    expected = math.sqrt(1 * 2 / 3) * (math.log(0.8) - math.log(0.1))
    assert expected == pytest.approx(1.6978569090206654, abs=1e-12)
    assert float(out) == pytest.approx(expected, rel=tol, abs=tol)
    # Two sink keys: p = [0.5, 0.2, 0.2, 0.1], S = {0, 1}: k = m = 2, n = 4, sqrt(k m / n) = 1,
    # b = (log .5 + log .2)/2 - (log .2 + log .1)/2 = (log 5) / 2.
    b = backend.array(np.log([0.5, 0.2, 0.2, 0.1]), dtype)
    assert float(sink_balance(b, sink=[1, 0])) == pytest.approx(math.log(5) / 2, rel=tol, abs=tol)
    # A sink below the content's geometric mean has a negative balance.
    c = backend.array(np.log([0.1, 0.45, 0.45]), dtype)
    assert float(sink_balance(c)) == pytest.approx(
        math.sqrt(2 / 3) * (math.log(0.1) - math.log(0.45)), rel=tol, abs=tol
    )


def test_aitchison_split_by_hand_three_keys(backend, dtype, tol):
    # p = [0.6, 0.3, 0.1], p' = [0.2, 0.4, 0.4], sink = key 0 (k = 1, m = 2, n = 3).
    # clr(p)  = [ 0.828302, 0.135155, -0.963457]   (log p minus its mean -1.339128)
    # clr(p') = [-0.462098, 0.231049,  0.231049]   (log p' minus its mean -1.147340)
    # total   = ||clr(p) - clr(p')|| = ||[1.290400, -0.095894, -1.194506]|| = 1.761015
    # b  = sqrt(2/3) (log .6 - (log .3 + log .1)/2) = sqrt(2/3) * 1.242453 =  1.014459
    # b' = sqrt(2/3) (log .2 - (log .4 + log .4)/2) = sqrt(2/3) * -0.693147 = -0.565952
    # sink term = |b - b'| = 1.580411
    # q = [0.75, 0.25], q' = [0.5, 0.5]: clr(q) = ±(log 3)/2, clr(q') = 0,
    # content term = sqrt(2) (log 3)/2 = 0.776836; within-sink = 0 (one sink key)
    # check: 1.580411**2 + 0.776836**2 = 2.497699 + 0.603474 = 3.101174 = 1.761015**2
    a = backend.array(np.log([0.6, 0.3, 0.1]), dtype)
    b = backend.array(np.log([0.2, 0.4, 0.4]), dtype)
    split = aitchison_split(a, b, sink=0)
    backend.assert_like(split.total, a)
    sink_term = math.sqrt(2 / 3) * (
        (math.log(0.6) - (math.log(0.3) + math.log(0.1)) / 2) - (math.log(0.2) - math.log(0.4))
    )
    content_term = math.sqrt(2) * math.log(3) / 2
    assert sink_term == pytest.approx(1.580411, abs=1e-6)
    assert content_term == pytest.approx(0.776836, abs=1e-6)
    assert float(split.total) == pytest.approx(1.7610150552684105, rel=tol, abs=tol)
    assert float(split.sink) == pytest.approx(sink_term, rel=tol, abs=tol)
    assert float(split.content) == pytest.approx(content_term, rel=tol, abs=tol)
    assert float(split.within_sink) == 0.0
    assert float(aitchison(a, b)) == pytest.approx(1.7610150552684105, rel=tol, abs=tol)
    np.testing.assert_allclose(
        as64(backend, clr(a)),
        [0.8283022165960001, 0.13515503603605472, -0.9634572526320546],
        rtol=tol,
        atol=tol,
    )


def test_entropy_split_by_hand(backend, dtype, tol):
    # p = [0.5, 0.25, 0.25]: H = 1.5 log 2; s = 0.5, h(s) = log 2, q = [.5, .5], H(q) = log 2.
    a = backend.array(np.log([0.5, 0.25, 0.25]), dtype)
    es = entropy_split(a, sink=0)
    log2 = math.log(2)
    assert float(es.total) == pytest.approx(1.5 * log2, rel=tol, abs=tol)
    assert float(es.binary) == pytest.approx(log2, rel=tol, abs=tol)
    assert float(es.content) == pytest.approx(log2, rel=tol, abs=tol)
    assert float(es.sink_mass) == pytest.approx(0.5, rel=tol, abs=tol)
    assert float(es.within_sink) == 0.0
    # Two sink keys [0.3, 0.2 | 0.5]: s = 0.5, H(p_S/s) = H(0.6, 0.4), H(q) = 0.
    b = backend.array(np.log([0.3, 0.2, 0.5]), dtype)
    es2 = entropy_split(b, sink=[0, 1])
    h64 = -(0.6 * math.log(0.6) + 0.4 * math.log(0.4))
    assert float(es2.within_sink) == pytest.approx(h64, rel=tol, abs=tol)
    assert float(es2.content) == pytest.approx(0.0, abs=tol)
    assert float(es2.binary) == pytest.approx(log2, rel=tol, abs=tol)


def test_entropy_change_by_hand(backend, dtype, tol):
    # State 0: [0.5, 0.25, 0.25]; state 1: [0.9, 0.05, 0.05]; the content stays uniform, so
    # the whole change is the sink's: content part exactly 0.
    a0 = backend.array(np.log([0.5, 0.25, 0.25]), dtype)
    a1 = backend.array(np.log([0.9, 0.05, 0.05]), dtype)
    ch = entropy_change_split(a0, a1)
    h1 = -(0.9 * math.log(0.9) + 0.1 * math.log(0.05))
    assert float(ch.total) == pytest.approx(h1 - 1.5 * math.log(2), rel=tol, abs=tol)
    assert float(ch.content) == pytest.approx(0.0, abs=tol)
    assert float(ch.sink) == pytest.approx(h1 - 1.5 * math.log(2), rel=tol, abs=tol)
    # Same sink mass 0.5, content [.25, .25] -> [.45, .05]: all of it is content, weight 0.5.
    a2 = backend.array(np.log([0.5, 0.45, 0.05]), dtype)
    ch2 = entropy_change_split(a0, a2)
    hq = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))
    assert float(ch2.content) == pytest.approx(0.5 * (hq - math.log(2)), rel=tol, abs=tol)
    assert float(ch2.sink) == pytest.approx(0.0, abs=tol)


# ------------------------------------------------------------------- broadcasting, axis


def _split_fields(result):
    if hasattr(result, "__dataclass_fields__"):
        return [getattr(result, f) for f in result.__dataclass_fields__]
    return [result]


UNARY = {
    "clr": lambda x, axis: clr(x, axis=axis),
    "sink_balance": lambda x, axis: sink_balance(x, sink=[0, 2], axis=axis),
    "entropy": lambda x, axis: entropy(x, axis=axis),
    "entropy_split": lambda x, axis: entropy_split(x, sink=1, axis=axis),
}
BINARY = {
    "aitchison": lambda x, y, axis: aitchison(x, y, axis=axis),
    "aitchison_split": lambda x, y, axis: aitchison_split(x, y, sink=[0, 2], axis=axis),
    "entropy_change_split": lambda x, y, axis: entropy_change_split(x, y, sink=0, axis=axis),
}
KEYED = {"clr"}  # outputs that keep the key axis


@pytest.mark.parametrize("name", sorted(UNARY))
def test_key_axis_argument_equals_moving_the_axis(backend, dtype, tol, name):
    z = np.random.default_rng(5).normal(size=(2, 3, 5)) * 3
    f = UNARY[name]
    last = _split_fields(f(backend.array(z, dtype), -1))
    keys_first = backend.array(np.moveaxis(z, -1, 0), dtype)
    first = _split_fields(f(keys_first, 0))
    for got, want in zip(first, last, strict=True):
        backend.assert_like(got, keys_first)
        got = as64(backend, got)
        if name in KEYED:
            got = np.moveaxis(got, 0, -1)  # the key axis comes back where it was
        np.testing.assert_allclose(got, as64(backend, want), rtol=tol, atol=tol)
    middle = _split_fields(f(backend.array(np.moveaxis(z, -1, 1), dtype), 1))
    for got, want in zip(middle, last, strict=True):
        got = as64(backend, got)
        if name in KEYED:
            got = np.moveaxis(got, 1, -1)
        np.testing.assert_allclose(got, as64(backend, want), rtol=tol, atol=tol)


def test_log_probs_axis_argument(backend, dtype, tol):
    p = np.random.default_rng(6).dirichlet(np.ones(4), size=(3, 2))
    out = log_probs(backend.array(np.moveaxis(p, -1, 0), dtype), axis=0)
    assert tuple(out.shape) == (4, 3, 2)
    np.testing.assert_allclose(
        np.moveaxis(as64(backend, out), 0, -1), np.log(p), rtol=tol, atol=tol
    )


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_functions_broadcast_and_take_axis(backend, dtype, tol, name):
    rng = np.random.default_rng(7)
    z = rng.normal(size=(2, 3, 5)) * 3
    ref_row = rng.normal(size=5) * 3
    f = BINARY[name]
    broadcast = _split_fields(f(backend.array(z, dtype), backend.array(ref_row, dtype), -1))
    tiled = _split_fields(
        f(backend.array(z, dtype), backend.array(np.broadcast_to(ref_row, z.shape), dtype), -1)
    )
    for got, want in zip(broadcast, tiled, strict=True):
        assert tuple(got.shape) == (2, 3)
        backend.assert_like(got, backend.array(z, dtype))
        np.testing.assert_allclose(as64(backend, got), as64(backend, want), rtol=tol, atol=tol)
    # Keys on axis 0 for both arguments.
    zt = np.moveaxis(z, -1, 0)
    rt = np.moveaxis(np.broadcast_to(ref_row, z.shape), -1, 0)
    axis0 = _split_fields(f(backend.array(zt, dtype), backend.array(rt, dtype), 0))
    for got, want in zip(axis0, tiled, strict=True):
        np.testing.assert_allclose(as64(backend, got), as64(backend, want), rtol=tol, atol=tol)
    # A row-by-row loop over the leading axes gives the same numbers.
    for i in range(2):
        for j in range(3):
            one = _split_fields(f(backend.array(z[i, j], dtype), backend.array(ref_row, dtype), -1))
            for got, want in zip(one, tiled, strict=True):
                assert float(got) == pytest.approx(
                    float(as64(backend, want)[i, j]), rel=tol, abs=tol
                )


# -------------------------------------------------------------------- inputs unmodified


def _snapshot(x):
    return x.clone() if isinstance(x, torch.Tensor) else x.copy()


def _same(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return bool(torch.equal(x, y))
    return bool(np.array_equal(x, y))


CALLS = {
    "log_probs": lambda p, z, y: log_probs(p, axis=0),
    "log_probs_replace": lambda p, z, y: log_probs(p, zeros="replace"),
    "clr": lambda p, z, y: clr(z),
    "clr_axis0": lambda p, z, y: clr(z, axis=0),
    "sink_balance": lambda p, z, y: sink_balance(z, sink=[1, 0]),
    "aitchison": lambda p, z, y: aitchison(z, y),
    "aitchison_split": lambda p, z, y: aitchison_split(z, y, sink=[0, 2]),
    "entropy": lambda p, z, y: entropy(z),
    "entropy_split": lambda p, z, y: entropy_split(z, sink=0),
    "entropy_change_split": lambda p, z, y: entropy_change_split(z, y, sink=[2]),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_inputs_are_not_modified(backend, dtype, name):
    rng = np.random.default_rng(8)
    p = rng.dirichlet(np.ones(4), size=4)
    p[1, 2] = 0.0
    p /= p.sum(-1, keepdims=True)
    arrays = [backend.array(x, dtype) for x in (p, rng.normal(size=(4, 4)), rng.normal(size=4))]
    if name == "log_probs":
        arrays[0] = backend.array(np.full((4, 4), 0.25), dtype)
    before = [_snapshot(x) for x in arrays]
    CALLS[name](*arrays)
    for x, y in zip(arrays, before, strict=True):
        assert _same(x, y)


# ------------------------------------------------------------------------ documentation


@pytest.mark.parametrize(
    "module",
    [attncoda.coda.geometry, attncoda.coda.entropies, attncoda.coda.metrics],
    ids=["geometry", "entropies", "metrics"],
)
def test_docstring_examples_hold(module):
    """The numbers printed in the docstrings are what the functions return."""
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(verbose=False)
    failed = []
    for test in finder.find(module, module.__name__):
        result = runner.run(test, out=lambda text: None)
        if result.failed:
            failed.append(test.name)
    assert not failed, f"docstring examples that do not hold: {failed}"
