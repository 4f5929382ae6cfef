"""The cluster pipeline's fragility computations against independent references: finite
differences, perturbed refits, plain loops and hand-computed cases."""

from __future__ import annotations

from itertools import combinations, product

import numpy as np
import pytest
from scipy.stats import spearmanr

from attncoda.experiments.cluster import VARIANTS, rounding_sums, used_row_mask
from attncoda.experiments.cluster._distances import document_terms
from attncoda.experiments.cluster._embedding import best_direction
from attncoda.experiments.cluster._point_rounding import (
    _guttman_step,
    _stress_hessian,
    distance_rounding,
    embedding_rounding,
    label_edges,
    worst_response,
)
from attncoda.experiments.cluster._summary_rounding import (
    ENUMERATED_EDGES,
    adjusted_rand,
    ari_rounding,
    direction_rounding,
    rank_rounding,
    share_rounding,
)
from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF, DocRows

U = FLOAT32_UNIT_ROUNDOFF


def _doc(seed: int, heads: int = 3, keys: int = 6) -> DocRows:
    """Causal rows at positions 2..keys-1 of random logits with a strong sink on key 0."""
    rng = np.random.default_rng(seed)
    positions = list(range(2, keys))
    mask = np.arange(keys)[None, :] <= np.asarray(positions)[:, None]
    z = rng.normal(size=(heads, len(positions), keys)) * 2.0
    z[:, :, 0] += np.linspace(1.0, 4.0, heads)[:, None]
    z = np.where(mask, z, -np.inf)
    lp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return DocRows(logp=np.where(mask, lp, np.nan), key_mask=mask, sink=(0,))


def _first_order_worst(doc: DocRows, used: np.ndarray) -> dict[str, np.ndarray | float]:
    """The largest first-order move, over every sign, of each variant's summed distance of
    every pair of heads (and of the mean sink share) when each recorded log moves by up to
    ``(n + 2) u |z_j|``, in units of ``u``: ``sum |dF/dz_j| (n + 2) |z_j|`` over every log,
    the slopes by central differences."""
    logp = np.asarray(doc.logp, dtype=np.float64)
    mask = np.asarray(doc.key_mask)
    heads = logp.shape[0]
    upper = np.triu_indices(heads, k=1)

    def value(lp: np.ndarray) -> dict[str, np.ndarray | float]:
        terms, sink_sq, total_sq = document_terms(DocRows(lp, mask, doc.sink), used)
        return {**terms, "share": float((sink_sq[upper] / total_sq[upper]).mean())}

    worst: dict[str, np.ndarray | float] = {v: np.zeros((heads, heads)) for v in VARIANTS}
    worst["share"] = 0.0
    keys = mask.sum(axis=-1)
    for h, r, j in zip(*np.nonzero(np.broadcast_to(mask, logp.shape)), strict=True):
        step = 1e-6 * max(abs(logp[h, r, j]), 1.0)
        up, down = logp.copy(), logp.copy()
        up[h, r, j] += step
        down[h, r, j] -= step
        high, low = value(up), value(down)
        for name in worst:
            slope = (np.asarray(high[name]) - np.asarray(low[name])) / (2 * step)
            worst[name] = worst[name] + np.abs(slope) * (keys[r] + 2) * abs(logp[h, r, j])
    return worst


@pytest.fixture(scope="module")
def small_doc() -> tuple[DocRows, np.ndarray, dict[str, np.ndarray | float]]:
    doc = _doc(3, heads=3, keys=5)
    used = used_row_mask(doc, 0, "toy")
    return doc, used, _first_order_worst(doc, used)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_distance_rounding_bounds_every_first_order_move_of_the_logs(
    small_doc: tuple, variant: str
) -> None:
    doc, used, worst_of = small_doc
    worst = worst_of[variant]
    bound = distance_rounding(rounding_sums(doc, used)[variant]) / U
    off = ~np.eye(3, dtype=bool)
    # finite differences carry ~1e-8 of the slope; the bound is float32 sums (~1e-6)
    assert (worst[off] <= bound[off] * (1 + 1e-5)).all(), (worst, bound)
    if variant == "aitchison_sink":
        # |b_A - b_B| is linear in the logs between sign changes: the bound is attained
        np.testing.assert_allclose(worst[off], bound[off], rtol=1e-5)
    else:
        assert (worst[off] >= 0.05 * bound[off]).all()  # and not a vacuous one


def test_the_share_rounding_bounds_every_first_order_move_of_the_logs(small_doc: tuple) -> None:
    doc, used, worst_of = small_doc
    _, sink_sq, total_sq = document_terms(doc, used)
    sums = rounding_sums(doc, used)
    bound = share_rounding(sink_sq, total_sq, sums["sink_sq"], sums["total_sq"]) / U
    assert worst_of["share"] <= bound * (1 + 1e-5)
    assert worst_of["share"] >= 0.01 * bound


def test_the_rounding_sums_match_a_loop_over_rows_and_keys() -> None:
    doc = _doc(5, heads=2, keys=5)
    used = used_row_mask(doc, 0, "toy")
    got = rounding_sums(doc, used)
    s = 0.001
    want = {name: np.zeros(2) for name in got}
    for h in range(2):
        for r in np.flatnonzero(used):
            keys = list(np.flatnonzero(doc.key_mask[r]))
            z = doc.logp[h, r, keys].astype(float)
            a = (len(keys) + 2) * np.abs(z)
            p = np.exp(z)
            want["keep"][h] += (
                0.5
                * (1 - s)
                * sum(
                    (np.log(2) + abs(z[j])) * p[j] * (a[j] + (p * a).sum()) for j in range(len(z))
                )
            )
            q = p[1:] / p[1:].sum()
            lq = z[1:] - np.log(p[1:].sum())
            want["drop"][h] += (
                0.5
                * (1 - s)
                * sum(
                    (np.log(2) + abs(lq[j])) * q[j] * (a[1 + j] + (q * a[1:]).sum())
                    for j in range(len(q))
                )
            )
            m = len(keys) - 1
            beta = np.sqrt(m / (1 + m)) * (a[0] + a[1:].mean())
            want["aitchison_sink"][h] += beta
            want["aitchison_content"][h] += np.linalg.norm(a[1:])
            want["sink_sq"][h] += beta**2
            want["total_sq"][h] += (a**2).sum()
    for name in got:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)


def test_distance_rounding_is_u_times_both_heads_sums() -> None:
    e = distance_rounding(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(e / U, [[0, 3, 4], [3, 0, 5], [4, 5, 0]])


def _stress(xy: np.ndarray, d: np.ndarray) -> float:
    diff = xy[:, None, :] - xy[None, :, :]
    dist = np.sqrt((diff**2).sum(axis=-1))
    return float(np.triu((dist - d) ** 2, 1).sum())


def _fitted(seed: int, n: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """A stress minimum of noisy distances between random points: ``(xy, d)``, ``xy``
    centred, by SMACOF run to convergence."""
    from sklearn.manifold import smacof

    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, 2)) * 10
    d = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    noise = rng.normal(size=(n, n))
    d = d + (noise + noise.T) / 2
    np.fill_diagonal(d, 0.0)
    xy = smacof(d, n_init=1, init=points, max_iter=3000, eps=1e-14, normalized_stress=False)[0]
    return xy - xy.mean(axis=0), d


def test_the_stress_hessian_is_the_stress_second_derivative() -> None:
    xy, d = _fitted(1, n=6)

    def gradient(flat: np.ndarray) -> np.ndarray:
        x = flat.reshape(xy.shape)
        diff = x[:, None, :] - x[None, :, :]
        dist = np.sqrt((diff**2).sum(axis=-1))
        np.fill_diagonal(dist, 1.0)
        gap = dist - d
        np.fill_diagonal(gap, 0.0)
        return (2 * (gap / dist)[..., None] * diff).sum(axis=1).ravel()

    flat = xy.ravel()
    step = 1e-5
    numeric = np.stack(
        [
            (gradient(flat + step * unit) - gradient(flat - step * unit)) / (2 * step)
            for unit in np.eye(flat.size)
        ],
        axis=1,
    )
    # the gradient itself: a difference of the stress
    unit = np.eye(flat.size)[3]
    slope = (_stress((flat + 1e-6 * unit).reshape(xy.shape), d)
             - _stress((flat - 1e-6 * unit).reshape(xy.shape), d)) / 2e-6  # fmt: skip
    assert slope == pytest.approx(gradient(flat)[3], abs=1e-5)
    hessian = _stress_hessian(xy, d)
    np.testing.assert_allclose(hessian, numeric, atol=1e-6 * np.abs(hessian).max())


def test_the_guttman_step_is_one_smacof_iteration() -> None:
    from sklearn.manifold import smacof

    xy, d = _fitted(2)
    start = xy + np.random.default_rng(0).normal(size=xy.shape)  # off the minimum
    start -= start.mean(axis=0)
    after = smacof(d, n_init=1, init=start, max_iter=1, normalized_stress=False)[0]
    np.testing.assert_allclose(_guttman_step(start, d), after - start, atol=1e-12)


def test_the_worst_response_bounds_a_refit_to_perturbed_distances() -> None:
    from sklearn.manifold import smacof

    xy, d = _fitted(3)
    rng = np.random.default_rng(4)
    e = np.abs(rng.normal(size=d.shape)) * 1e-6
    e = (e + e.T) / 2
    np.fill_diagonal(e, 0.0)
    bound = worst_response(xy, d, e, n_iter=10**9)  # the converged fixed point's response
    dist = np.sqrt(((xy[:, None] - xy[None]) ** 2).sum(-1))
    moved = []
    for _ in range(5):
        delta = e * rng.choice([-1.0, 1.0], size=e.shape)
        delta = np.triu(delta, 1) + np.triu(delta, 1).T
        again = smacof(
            d + delta, n_init=1, init=xy, max_iter=3000, eps=1e-14, normalized_stress=False
        )[0]
        new = np.sqrt(((again[:, None] - again[None]) ** 2).sum(-1))
        moved.append(np.abs(new - dist).max())
    assert max(moved) <= bound
    assert max(moved) > 0.0
    # a stopped fit is stated as its distances' rounding plus one more iteration's move
    stated = embedding_rounding(xy, d, e, n_iter=100)
    assert stated.worst <= bound  # a converged mode's response only grows with t


def test_a_head_near_two_centres_is_on_the_edge() -> None:
    centres = np.array([[0.0, 0.0], [10.0, 0.0]])
    xy = np.array([[-1.0, 0.0], [1.0, 0.0], [5.1, 0.0], [9.0, 0.0], [11.0, 0.0]])
    labels = np.array([0, 0, 1, 1, 1])
    # head 2 is 5.1 from centre 0 and 4.9 from centre 1: a margin of 0.2. Its room is twice
    # its own move plus the mean move of each centre's points.
    for move, edge in ((0.049, False), (0.051, True)):
        found, alternative = label_edges(xy, labels, centres, np.full(5, move))
        assert found.tolist() == [False, False, edge, False, False]
        assert alternative.tolist() == [1, 1, 0, 0, 0]
    # one cluster: no edge
    found, _ = label_edges(xy, np.zeros(5, np.int64), centres[:1], np.full(5, 100.0))
    assert not found.any()


def test_rank_rounding_by_hand() -> None:
    # heads 2 and 3 are near-tied on x; each may take the other's rank: |ry - c| = 0.5, 1.5
    x, y = np.array([1.0, 2.0, 3.0, 3.1]), np.array([1.0, 2.0, 3.0, 4.0])
    n_near, bound = rank_rounding(x, np.full(4, 0.06), y, np.zeros(4))
    assert n_near == 1
    assert bound == pytest.approx(12 * (0.5 + 1.5) / (4 * 15))
    # the swap itself moves rho from 1 to 0.8: within the bound
    assert spearmanr([1, 2, 3.1, 3], y).statistic == pytest.approx(0.8)


def test_rank_rounding_bounds_every_perturbation_within_the_moves() -> None:
    rng = np.random.default_rng(8)
    x = np.sort(rng.normal(size=12)).round(1)  # ties and near ties
    x += rng.normal(size=12) * 1e-3
    y = rng.normal(size=12)
    y[3] = y[7] + 1e-4
    x_moves, y_moves = np.full(12, 0.03), np.full(12, 1e-4)
    n_near, bound = rank_rounding(x, x_moves, y, y_moves)
    loop = sum(
        abs(x[i] - x[j]) <= 2 * 0.03 or abs(y[i] - y[j]) <= 2e-4
        for i, j in combinations(range(12), 2)
    )
    assert n_near == loop
    rho = spearmanr(x, y).statistic
    moved = [
        abs(
            spearmanr(
                x + rng.uniform(-1, 1, 12) * x_moves, y + rng.uniform(-1, 1, 12) * y_moves
            ).statistic
            - rho
        )
        for _ in range(500)
    ]
    assert max(moved) <= bound
    assert max(moved) > 0.0


def test_direction_rounding_bounds_moved_and_turned_embeddings() -> None:
    rng = np.random.default_rng(9)
    xy = rng.normal(size=(15, 2)) * [5.0, 2.0]
    y = rng.normal(size=15)
    point, angle = np.full(15, 0.02), 0.003
    bound = direction_rounding(xy, point, angle, y, np.zeros(15), 360)
    best = best_direction(xy, y)
    assert best is not None
    moved = []
    for _ in range(300):
        turn = rng.uniform(-angle, angle)
        rotation = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
        step = rng.normal(size=(15, 2))
        step *= (point * rng.uniform(0, 1, 15) / np.linalg.norm(step, axis=1))[:, None]
        other = best_direction((xy + step) @ rotation.T, y)
        assert other is not None
        moved.append(abs(other - best))
    assert max(moved) <= bound


def _ari_by_pairs(a: np.ndarray, b: np.ndarray) -> float:
    """The adjusted Rand index from its pair counts, one pair of heads at a time."""
    pairs = list(combinations(range(len(a)), 2))
    both = sum(a[i] == a[j] and b[i] == b[j] for i, j in pairs)
    in_a = sum(a[i] == a[j] for i, j in pairs)
    in_b = sum(b[i] == b[j] for i, j in pairs)
    expected = in_a * in_b / len(pairs)
    return (both - expected) / ((in_a + in_b) / 2 - expected)


def test_adjusted_rand_by_hand_and_by_pairs() -> None:
    a = np.array([0, 0, 1, 1])
    assert adjusted_rand(a, a) == 1.0
    assert adjusted_rand(a, np.array([0, 1, 0, 1])) == pytest.approx(-0.5)
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 3, 20), rng.integers(0, 4, 20)
    assert adjusted_rand(x, y) == pytest.approx(_ari_by_pairs(x, y))


@pytest.mark.parametrize("n_edges", [3, ENUMERATED_EDGES + 2])
def test_ari_rounding_covers_every_way_the_edge_heads_fall(n_edges: int) -> None:
    rng = np.random.default_rng(n_edges)
    n = 24
    a, b = rng.integers(0, 3, n), rng.integers(0, 3, n)
    a_alt, b_alt = (a + 1) % 3, (b + 2) % 3
    a_edge, b_edge = np.zeros(n, bool), np.zeros(n, bool)
    a_edge[: (n_edges + 1) // 2] = True
    b_edge[n - n_edges // 2 :] = True
    base = _ari_by_pairs(a, b)
    worst = 0.0
    ea, eb = np.flatnonzero(a_edge), np.flatnonzero(b_edge)
    for pick in product((False, True), repeat=ea.size + eb.size):
        moved_a, moved_b = a.copy(), b.copy()
        for k, take in zip(np.concatenate([ea, eb]), pick, strict=True):
            if take and k in ea:
                moved_a[k] = a_alt[k]
            elif take:
                moved_b[k] = b_alt[k]
        worst = max(worst, abs(_ari_by_pairs(moved_a, moved_b) - base))
    bound = ari_rounding(a, a_edge, a_alt, b, b_edge, b_alt)
    if n_edges <= ENUMERATED_EDGES:
        assert bound == pytest.approx(worst)
    else:
        assert worst <= bound <= 2.0
    assert ari_rounding(a, np.zeros(n, bool), a_alt, b, np.zeros(n, bool), b_alt) == 0.0
