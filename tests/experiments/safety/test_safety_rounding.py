"""What rounding leaves open in the safety map (docs/design.md, "Verdicts and ratios within
rounding"): each cell's fragile and edge triplets against plain loops over the triplets,
the coordinates' and the edges' rounding against the moves of perturbed inputs, the
interval's rounding against every count in its box, and the comparison that holds the
tables by them (a count moved past what its row states fails, an edge verdict may go
either way)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from attncoda import AttncodaError
from attncoda.experiments.contract import DocRows, HeadRows, compare_frames
from attncoda.experiments.flips import flips, rate_rounding
from attncoda.experiments.safety import EXPERIMENT, mean_squared_split, safety_map
from attncoda.experiments.safety._bins import (
    Binning,
    TripletCells,
    assign_bins,
    bin_edges,
    cell_counts,
    interval_rounding,
)
from attncoda.experiments.safety._edges import bin_reach, edge_counts, edge_rounding
from attncoda.experiments.safety._split import (
    share_reach,
    share_rounding,
    triplet_coordinates,
    triplet_rounding,
)

pd = pytest.importorskip("pandas")

U = 2.0**-24


def random_head_rows(n_layers=2, n_heads=4, n_docs=3, keys=9, sink=(0,), seed=0):
    """Causal synthetic rows (row r sees keys 0..r+len(sink)), heads of spread sink masses."""
    rng = np.random.default_rng(seed)
    n = n_layers * n_heads
    lengths = np.arange(len(sink) + 1, keys + 1)
    mask = np.arange(keys)[None, :] < lengths[:, None]
    docs = []
    for _ in range(n_docs):
        z = rng.normal(size=(n, len(lengths), keys))
        z[:, :, list(sink)] += rng.uniform(-1.0, 3.0, size=n)[:, None, None]
        z = np.where(mask[None], z, -np.inf)
        logp = z - np.log(np.exp(z).sum(axis=2, keepdims=True))
        docs.append(DocRows(logp=np.where(mask[None], logp, np.nan), key_mask=mask,
                            sink=tuple(sink)))  # fmt: skip
    mass = np.mean([np.exp(d.logp[:, :, list(sink)]).sum(axis=2).mean(axis=1) for d in docs], 0)
    return HeadRows("synthetic", n_layers, n_heads, tuple(docs), mass)


# --- fragile triplets per cell ----------------------------------------------------------------


def symmetric(rng, n):
    d = rng.uniform(0.1, 1.0, size=(n, n))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0.0)
    return d


def near_edge(rng, n, tol, e):
    """Keep and drop matrices with some triplets a fraction of ``e`` from the tie edge."""
    keep, drop = symmetric(rng, n), symmetric(rng, n)
    for d in (keep, drop):
        for a in rng.choice(n, size=4, replace=False):
            b, c = rng.choice([h for h in range(n) if h != a], size=2, replace=False)
            d[a, c] = d[c, a] = d[a, b] + tol * np.abs(d).max() + rng.uniform(-2, 2) * e
    return keep, drop


def cells_by_loop(keep, drop, e_keep, e_drop, cell, valid, tol, n_cells):
    """Ties, flips and fragile triplets per cell by plain loops over the triplets: a triplet
    is fragile under a matrix when ``t - band <= |D(A,C) - D(A,B)| <= t + band``, ``t = tol
    max|D|``, ``band = 2 max_B e(A, B) + tol e(argmax |D|)`` (under keep and drop apart)."""
    n = len(keep)
    b, c = np.triu_indices(n, 1)
    ties, flip, fragile = ([0] * n_cells for _ in range(3))
    edges = []
    for d, e in ((keep, e_keep), (drop, e_drop)):
        i, j = np.unravel_index(np.argmax(np.abs(d)), d.shape)
        t = tol * abs(d[i, j])
        bands = [2 * max(e[a, h] for h in range(n) if h != a) + tol * e[i, j] for a in range(n)]
        edges.append((d, t, bands))
    for a in range(n):
        for p in range(len(b)):
            if not valid[a, p]:
                continue
            k = cell[a, p]
            gaps = [d[a, c[p]] - d[a, b[p]] for d, _, _ in edges]
            tie = any(abs(g) <= t for g, (_, t, _) in zip(gaps, edges, strict=True))
            ties[k] += tie
            flip[k] += (not tie) and ((gaps[0] > 0) != (gaps[1] > 0))
            for g, (_, t, bands) in zip(gaps, edges, strict=True):
                fragile[k] += t - bands[a] <= abs(g) <= t + bands[a]
    return ties, flip, fragile


@pytest.mark.parametrize("seed", range(3))
def test_fragile_triplets_per_cell_equal_a_plain_loop(seed):
    rng = np.random.default_rng(seed)
    n, tol, e = 9, 1e-3, 1e-5
    keep, drop = near_edge(rng, n, tol, e)
    e_keep, e_drop = rng.uniform(0, e, size=(2, n, n))
    pairs = math.comb(n, 2)
    cell = rng.integers(0, 4, size=(n, pairs)).astype(np.int32)
    b, c = np.triu_indices(n, 1)
    heads = np.arange(n)[:, None]
    valid = (heads != b) & (heads != c)
    got = cell_counts(keep, drop, TripletCells(cell, valid, 4), tol, rounding=(e_keep, e_drop))
    want = cells_by_loop(keep, drop, e_keep, e_drop, cell, valid, tol, 4)
    assert [g.tolist() for g in got] == [list(w) for w in want]
    assert got[2].sum() > 0  # the constructed near-edge triplets are found


# --- triplets at a bin edge ---------------------------------------------------------------


def reach_by_loop(x, e, edges, rounding):
    """The bins a value can fall in when it moves within ``e`` and each edge within its
    rounding: bin ``i`` (``[E_i, E_i+1)``, the outer edges unbounded) is reachable when
    ``x - e < E_i+1 + r_i+1`` and ``x + e >= E_i - r_i``."""
    n = len(edges) - 1
    return [
        i
        for i in range(n)
        if (i == n - 1 or x - e < edges[i + 1] + rounding[i + 1])
        and (i == 0 or x + e >= edges[i] - rounding[i])
    ]


@pytest.mark.parametrize("seed", range(3))
def test_edge_triplets_per_bin_and_cell_equal_a_plain_loop(seed):
    rng = np.random.default_rng(seed)
    n, pairs = 7, 15
    s_edges, g_edges = np.array([0.0, 0.3, 0.5, 1.0]), np.array([0.0, 0.2, 1.0])
    s_round, g_round = np.array([0.0, 0.01, 0.02, 0.0]), np.array([0.0, 0.015, 0.0])
    share = rng.uniform(0, 1, size=(n, pairs))
    gap = rng.uniform(0, 1, size=pairs)
    # Some values right at an edge, within its rounding and just beyond it.
    share.flat[rng.choice(share.size, 12, replace=False)] = rng.choice(
        [0.3, 0.5, 0.295, 0.31, 0.475, 0.52, 0.2701], 12
    )
    gap[rng.choice(pairs, 5, replace=False)] = rng.choice([0.2, 0.19, 0.21, 0.23], 5)
    e_share = rng.uniform(0, 0.02, size=share.shape)
    e_gap = rng.uniform(0, 0.02, size=pairs)
    valid = rng.uniform(size=share.shape) < 0.8
    bins = (assign_bins(share, s_edges), assign_bins(gap, g_edges))
    cells, by_share, by_gap = edge_counts(
        bin_reach(share, e_share, s_edges, s_round),
        bin_reach(gap, e_gap, g_edges, g_round),
        bins,
        valid,
        (3, 2),
    )
    want_cells, want_share, want_gap = np.zeros(6, int), np.zeros(3, int), np.zeros(2, int)
    for a, p in itertools.product(range(n), range(pairs)):
        if not valid[a, p]:
            continue
        rs = reach_by_loop(share[a, p], e_share[a, p], s_edges, s_round)
        rg = reach_by_loop(gap[p], e_gap[p], g_edges, g_round)
        assert bins[0][a, p] in rs and bins[1][p] in rg
        if len(rs) > 1:
            want_share[rs] += 1
        if len(rg) > 1:
            want_gap[rg] += 1
        if len(rs) > 1 or len(rg) > 1:
            for i, j in itertools.product(rs, rg):
                want_cells[i * 2 + j] += 1
    assert cells.tolist() == want_cells.tolist()
    assert by_share.tolist() == want_share.tolist()
    assert by_gap.tolist() == want_gap.tolist()
    assert by_share.sum() > 0 and by_gap.sum() > 0


def test_a_value_at_an_edge_with_no_rounding_stays_in_its_bin():
    edges, none = np.array([0.0, 0.5, 1.0]), np.zeros(3)
    at, low, high = bin_reach(np.array([0.5, 0.25]), np.zeros(2), edges, none)
    assert at.size == 0 and low.size == 0 and high.size == 0
    # A hair of rounding on the value or on the edge: it may fall on either side.
    for e, r in ((1e-12, 0.0), (0.0, 1e-12)):
        at, low, high = bin_reach(np.array([0.5, 0.25]), np.array([e, e]), edges, none + r)
        assert (at.tolist(), low.tolist(), high.tolist()) == ([0], [0], [1])


@pytest.mark.parametrize("seed", range(3))
def test_quantile_edges_move_by_no_more_than_their_rounding(seed):
    rng = np.random.default_rng(seed)
    values = rng.beta(0.5, 3.0, size=2000)
    rounding = rng.uniform(0, 1e-3, size=values.size) * (rng.uniform(size=values.size) < 0.3)
    edges = bin_edges(values, 5, None, "sink_share")
    stated = edge_rounding(values, rounding, Binning(edges, 5))
    for move in (-rounding, rounding, rng.uniform(-1, 1, size=values.size) * rounding):
        moved = bin_edges(values + move, 5, None, "sink_share")
        # (x + e) - x rounds in float64: a few units of the last place of the edge.
        assert (np.abs(moved - edges) <= stated + 4 * np.spacing(edges)).all()
    # The exact move of each edge, its quantile of the values all moved down or up, is
    # within the stated one (which reads only the values within reach of the edge).
    levels = np.linspace(0, 1, 6)
    exact = np.maximum(
        edges - np.quantile(values - rounding, levels),
        np.quantile(values + rounding, levels) - edges,
    )
    assert (exact <= stated + 4 * np.spacing(edges)).all() and (stated <= rounding.max()).all()
    # The same read from values partitioned by the quantiles themselves, and from a
    # function of the positions instead of an array.
    counted = values.copy()
    assert (bin_edges(counted, 5, None, "sink_share", overwrite=True) == edges).all()
    again = edge_rounding(values, lambda at: rounding[at], Binning(edges, 5), ranked=counted,
                          reach=float(rounding.max()))  # fmt: skip
    assert (again == stated).all()
    msg = "a rounding given as a function of positions needs the bound of every value: give reach="
    with pytest.raises(AttncodaError, match=msg):
        edge_rounding(values, lambda at: rounding[at], Binning(edges, 5))
    # Fixed edges are settings and do not move.
    assert edge_rounding(values, rounding, Binning(edges, 2, (0, 0.5, 1))).tolist() == [0.0] * 6


def test_an_edge_moves_by_the_rounding_of_the_values_within_reach_of_it():
    # Edges at the 0, 1/3, 2/3 and 1 quantiles, the 0th, 2nd, 4th and 6th order statistics.
    # The edge at 3 lies within reach (0.1, the largest rounding) of 3.05, whose rounding is
    # 0.1: it carries 0.1. The edge at 4 does not move: the values within reach of it do
    # not, and 3.05 moved up by 0.1 stays below it.
    values = np.array([1.0, 2.0, 3.0, 3.05, 4.0, 5.0, 6.0])
    rounding = np.array([0.01, 0.02, 0.03, 0.1, 0.0, 0.0, 0.05])
    edges = bin_edges(values, 3, None, "sink_gap")
    assert edges.tolist() == [1.0, 3.0, 4.0, 6.0]
    stated = edge_rounding(values, rounding, Binning(edges, 3))
    assert stated.tolist() == [0.02, 0.1, 0.0, 0.05]


# --- the coordinates' rounding ----------------------------------------------------------------


def perturbed(head_rows, rng, how):
    """The rows with every recorded log-probability ``z`` moved to ``z (1 + delta)``,
    ``|delta| <= (n + 2) u`` (``n`` the most keys a row sees, their stated rounding): all
    up, all down, or each at random."""
    docs = []
    for doc in head_rows.docs:
        z = np.asarray(doc.logp, dtype=np.float64)
        most = (doc.key_mask.shape[-1] + 2) * U
        if how == "random":
            delta = rng.uniform(-most, most, size=z.shape)
        else:
            delta = np.full(z.shape, most if how == "up" else -most)
        docs.append(DocRows(z * (1 + delta), doc.key_mask, doc.sink))
    return HeadRows(head_rows.model, head_rows.n_layers, head_rows.n_heads, tuple(docs),
                    head_rows.sink_mass)  # fmt: skip


@pytest.mark.parametrize("sink", [(0,), (0, 1)])
def test_shares_move_by_no_more_than_their_stated_rounding(sink):
    rng = np.random.default_rng(len(sink))
    head_rows = random_head_rows(sink=sink, seed=11 + len(sink))
    squares = mean_squared_split(head_rows)
    mass = head_rows.sink_mass
    share, _, valid, _ = triplet_coordinates(squares, mass)
    e_share, _ = triplet_rounding(squares, share, mass)
    for how in ("up", "down", "random"):
        other = mean_squared_split(perturbed(head_rows, rng, how))
        assert (np.abs(other.total - squares.total) <= squares.total_rounding).all()
        assert (np.abs(other.sink - squares.sink) <= squares.sink_rounding).all()
        moved = np.abs(triplet_coordinates(other, mass)[0] - share)
        assert (moved[valid] <= e_share[valid]).all()
    # The bound is the rounding of the inputs, not a guess: (n + 2) times a few hundred u.
    assert 0 < e_share[valid].max() < 11 * 1e3 * U


def test_the_magnitudes_of_the_rounding_equal_plain_loops_over_the_rows():
    head_rows = random_head_rows(sink=(0, 1), seed=4)
    squares = mean_squared_split(head_rows)
    n = 8
    logs, balances, gram, rows = np.zeros(n), np.zeros(n), np.zeros(n), 0
    for doc in head_rows.docs:
        used = [r for r in range(doc.key_mask.shape[0]) if doc.key_mask[r].sum() - 2 >= 2]
        flat = []
        for r in used:
            keys = np.flatnonzero(doc.key_mask[r])
            z = doc.logp[:, r, keys].astype(np.float64)
            k, m = 2, len(keys) - 2
            logs += (z**2).sum(axis=1)
            size = np.abs(z)
            balances += (
                math.sqrt(k * m / (k + m)) * (size[:, :2].mean(1) + size[:, 2:].mean(1))
            ) ** 2
            clr = np.zeros((n, doc.key_mask.shape[1]))
            clr[:, keys] = z - z.mean(axis=1, keepdims=True)
            flat.append(clr)
        x = np.concatenate(flat, axis=1)
        x = x - x.mean(axis=0)
        gram += 2 * 2.0**-53 * x.shape[1] * (x**2).sum(axis=1)
        rows += len(used)
    np.testing.assert_allclose(squares.log_norm, np.sqrt(logs / rows), rtol=1e-12)
    np.testing.assert_allclose(squares.balance_norm, np.sqrt(balances / rows), rtol=1e-12)
    np.testing.assert_allclose(squares.gram_rounding, gram / rows, rtol=1e-12)
    # T(0, 5) by hand: 2 v sqrt(T) (l_0 + l_5) + v^2 (l_0 + l_5)^2 + g_0 + g_5, v = 11 u.
    v, pair = 11 * U, squares.log_norm[0] + squares.log_norm[5]
    by_hand = 2 * v * math.sqrt(squares.total[0, 5]) * pair + (v * pair) ** 2
    by_hand += squares.gram_rounding[0] + squares.gram_rounding[5]
    assert squares.total_rounding[0, 5] == pytest.approx(by_hand, rel=1e-12)


def test_a_triplets_share_rounding_by_hand_and_the_reach_above_every_one():
    squares = mean_squared_split(random_head_rows(seed=9))
    mass = np.linspace(0.1, 0.8, 8)
    share, _, valid, pairs = triplet_coordinates(squares, mass)
    e_share, _ = triplet_rounding(squares, share, mass)
    # (A; B, C) = (0; 3, 6): (e_N + sigma e_D) / (D - e_D).
    p = int(np.flatnonzero((pairs[0] == 3) & (pairs[1] == 6))[0])
    e_t, e_s = squares.total_rounding, squares.sink_rounding
    den, e_den = squares.total[0, 3] + squares.total[0, 6], e_t[0, 3] + e_t[0, 6]
    by_hand = (e_s[0, 3] + e_s[0, 6] + share[0, p] * e_den) / (den - e_den)
    assert e_share[0, p] == pytest.approx(by_hand, rel=1e-12)
    some = np.array([p, 5 * share.shape[1] + 2])
    np.testing.assert_array_equal(share_rounding(squares, share, some), e_share.ravel()[some])
    reach = share_reach(squares, float(share[valid].max()))
    assert e_share[valid].max() <= reach <= 10 * e_share[valid].max()


def test_the_gap_is_good_to_both_head_means_rounding():
    squares = mean_squared_split(random_head_rows(seed=2))
    mass = np.linspace(0.1, 0.8, 8)
    share = triplet_coordinates(squares, mass)[0]
    _, e_gap = triplet_rounding(squares, share, mass)
    # Pair (0, 1): u (n + 2) (s + log n) for each of the two means, n = 9 keys.
    assert squares.keys == 9
    by_hand = U * 11 * (0.1 + math.log(9)) + U * 11 * (0.2 + math.log(9))
    assert e_gap[0] == pytest.approx(by_hand, rel=1e-12)


def test_identical_heads_have_a_share_that_does_not_move():
    base = random_head_rows(n_layers=1, n_heads=1, seed=5)
    docs = tuple(DocRows(np.repeat(d.logp, 4, axis=0), d.key_mask, d.sink) for d in base.docs)
    head_rows = HeadRows("same", 1, 4, docs, np.repeat(base.sink_mass, 4))
    squares = mean_squared_split(head_rows)
    share = triplet_coordinates(squares, head_rows.sink_mass)[0]
    e_share, e_gap = triplet_rounding(squares, share, head_rows.sink_mass)
    assert (share == 0).all() and (e_share == 0).all()


# --- the interval's rounding ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flips", "decided", "moved"),
    [(30, 200, 3), (0, 50, 2), (50, 50, 4), (0, 0, 2), (3, 4, 6), (10, 1000, 0), (1, 2, 1)],
)
def test_interval_rounding_is_the_largest_move_over_its_box(flips, decided, moved):
    from attncoda.experiments.contract import flip_rate_interval

    low, high = flip_rate_interval(flips, decided)
    largest = 0.0
    for f, d in itertools.product(range(flips - moved, flips + moved + 1),
                                  range(decided - moved, decided + moved + 1)):  # fmt: skip
        if 0 <= f <= d:
            lo, hi = flip_rate_interval(f, d)
            largest = max(largest, abs(lo - low), abs(hi - high))
    assert interval_rounding(flips, decided, moved) == pytest.approx(largest, abs=1e-15)


# --- the tables ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mapped():
    # Heads 6 and 7 read identical rows: every (A; 6, 7) is a tie within rounding of the
    # tie edge (fragile). With 28 pairs, 3 gap bins put their edges on pairs' own gaps
    # (the 9th and 18th order statistics): those pairs lie within rounding of an edge.
    base = random_head_rows(seed=7)
    docs = tuple(
        DocRows(np.concatenate([d.logp[:7], d.logp[6:7]]), d.key_mask, d.sink) for d in base.docs
    )
    mass = np.append(base.sink_mass[:7], base.sink_mass[6])
    head_rows = HeadRows("synthetic", 2, 4, docs, mass)
    result = flips(head_rows, n_boot=5)
    return head_rows, result, safety_map(head_rows, flips_result=result, n_bins=3)


def test_fragile_counts_add_up_to_those_of_flips(mapped):
    _, result, safety = mapped
    fragile = result.table.set_index("metric")["n_fragile"]
    assert fragile.sum() > 0
    for kind in ("sink_share", "sink_gap"):
        part = safety.table[safety.table["bin_kind"] == kind]
        assert part.groupby("metric")["n_fragile"].sum().to_dict() == fragile.to_dict()
    assert safety.grid.groupby("metric")["n_fragile"].sum().to_dict() == fragile.to_dict()


def test_rates_ends_and_verdicts_are_stated_from_the_counts(mapped):
    safety = mapped[2]
    for frame in (safety.table, safety.grid):
        moved = frame["n_fragile"] + frame["n_edge"]
        np.testing.assert_array_equal(
            frame["rate_rounding"], rate_rounding(moved, frame["n_decided"])
        )
        ends = [
            interval_rounding(r.flips, r.n_decided, r.n_fragile + r.n_edge)
            for r in frame.itertuples()
        ]
        np.testing.assert_array_equal(frame["ci_rounding"], ends)
        edge = (frame["flip_rate_high"] - frame["safe_threshold"]).abs() <= frame["ci_rounding"]
        assert (frame["safe_edge"] == edge).all() and frame["safe_edge"].dtype == bool
        assert (frame["n_edge"] > 0).any()
    assert (safety.table["bin_rounding"] > 0).all()
    for kind in ("sink_share", "sink_gap"):
        assert (safety.grid[f"{kind}_rounding"] > 0).all()


def test_edge_triplets_of_the_map_equal_a_plain_loop(mapped):
    head_rows, _, safety = mapped
    squares = mean_squared_split(head_rows)
    share, gap, valid, _ = triplet_coordinates(squares, head_rows.sink_mass)
    e_share, e_gap = triplet_rounding(squares, share, head_rows.sink_mass)
    s_edges, g_edges = safety.share_edges, safety.gap_edges
    s_round = edge_rounding(share, e_share, Binning(s_edges, 3), where=valid)
    g_round = edge_rounding(gap, e_gap, Binning(g_edges, 3))
    n_s, n_g = len(s_edges) - 1, len(g_edges) - 1
    cells, by_share, by_gap = np.zeros(n_s * n_g, int), np.zeros(n_s, int), np.zeros(n_g, int)
    for a, p in zip(*np.nonzero(valid), strict=True):
        rs = reach_by_loop(share[a, p], e_share[a, p], s_edges, s_round)
        rg = reach_by_loop(gap[p], e_gap[p], g_edges, g_round)
        by_share[rs] += len(rs) > 1
        by_gap[rg] += len(rg) > 1
        if len(rs) > 1 or len(rg) > 1:
            for i, j in itertools.product(rs, rg):
                cells[i * n_g + j] += 1
    grid = safety.grid[safety.grid["metric"] == "tv"]
    assert grid["n_edge"].tolist() == cells.tolist() and cells.sum() > 0
    table = safety.table[safety.table["metric"] == "tv"]
    assert table[table["bin_kind"] == "sink_share"]["n_edge"].tolist() == by_share.tolist()
    assert table[table["bin_kind"] == "sink_gap"]["n_edge"].tolist() == by_gap.tolist()
    rounding = table[table["bin_kind"] == "sink_gap"]["bin_rounding"].to_numpy()
    np.testing.assert_array_equal(rounding, np.maximum(g_round[:-1], g_round[1:]))


def test_recomputed_distances_give_the_same_fragile_triplets(mapped):
    head_rows, result, safety = mapped
    again = safety_map(head_rows, ("jsd", "tv"), n_bins=3)
    reused = safety.grid[safety.grid["metric"].isin(["jsd", "tv"])].reset_index(drop=True)
    assert again.grid.equals(reused)


def test_a_flips_result_without_the_distances_rounding_is_refused(mapped):
    from attncoda.experiments.flips import FlipsResult

    head_rows, result, _ = mapped
    tables = result.to_tables()
    assert {k for k in tables.arrays if k.startswith("rounding:")} == {
        f"rounding:{m}:{c}" for m in result.table["metric"] for c in ("keep", "drop")
    }
    back = FlipsResult.from_tables(result.model, tables)
    for key, e in result.rounding.items():
        np.testing.assert_array_equal(back.rounding[key], e)
    old = type(tables)(
        frames=tables.frames,
        arrays={k: v for k, v in tables.arrays.items() if not k.startswith("rounding:")},
    )
    before = FlipsResult.from_tables(result.model, old)
    assert before.rounding == {}
    msg = (
        "flips_result has no rounding of the distances of metric 'tv' (a flips result "
        "recorded before it was stored); run flips again"
    )
    with pytest.raises(AttncodaError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        safety_map(head_rows, ("tv",), flips_result=before)


# --- compared by its rules ------------------------------------------------------------------


def held(table):
    return EXPERIMENT.held[table]


def test_every_float_column_declares_its_rule(mapped):
    safety = mapped[2]
    for name, frame in (("safety", safety.table), ("safety_grid", safety.grid)):
        floats = {c for c in frame.columns if frame[c].dtype == np.float64}
        assert floats - set(held(name)) == {"safe_threshold"}, name


def test_a_count_moved_past_its_stated_fragility_fails(mapped):
    ref = mapped[2].table
    row = int(np.argmax(ref["n_edge"] + ref["n_fragile"]))
    stated = int(ref.at[row, "n_fragile"] + ref.at[row, "n_edge"])
    edge = int(ref.at[row, "n_edge"])
    for column, allowed in (
        ("n_ties", stated), ("flips", stated), ("n_decided", stated), ("n_triplets", edge),
    ):  # fmt: skip
        within, beyond = ref.copy(), ref.copy()
        within.loc[row, column] += allowed
        beyond.loc[row, column] += allowed + 1
        assert compare_frames("safety", within, ref, held("safety")).same, column
        (cell,) = compare_frames("safety", beyond, ref, held("safety")).cells
        assert (cell.column, cell.difference, cell.allowed) == (column, allowed + 1, allowed)


def test_a_rate_or_an_end_moved_past_its_rounding_fails(mapped):
    ref = mapped[2].grid
    row = int(np.argmax(ref["rate_rounding"]))
    for column, bound in (("flip_rate", "rate_rounding"), ("flip_rate_high", "ci_rounding"),
                          ("sink_gap_low", "sink_gap_rounding")):  # fmt: skip
        moved = ref.copy()
        moved.loc[row, column] += 0.999 * ref.at[row, bound]
        assert compare_frames("safety_grid", moved, ref, held("safety_grid")).same, column
        moved.loc[row, column] += 0.002 * ref.at[row, bound]
        (cell,) = compare_frames("safety_grid", moved, ref, held("safety_grid")).cells
        assert cell.column == column


def test_a_fragility_count_inflated_fails(mapped):
    ref = mapped[2].table
    row = int(np.argmax(ref["n_edge"]))
    for column in ("n_fragile", "n_edge"):
        inflated = ref.copy()
        inflated.loc[row, column] = math.ceil(ref.at[row, column] * 1.01) + 4
        cells = compare_frames("safety", inflated, ref, held("safety")).cells
        assert [c.column for c in cells] == [column]


def test_a_verdict_flipped_fails_unless_it_is_on_the_edge():
    rows = []
    for high, rounding in ((0.0499, 0.001), (0.03, 0.001), (0.07, 0.001)):
        rows.append({"model": "m", "metric": "tv", "bin": len(rows), "flip_rate_high": high,
                     "ci_rounding": rounding, "safe_threshold": 0.05, "safe": high < 0.05,
                     "safe_edge": abs(high - 0.05) <= rounding})  # fmt: skip
    ref = pd.DataFrame(rows)
    assert ref["safe_edge"].tolist() == [True, False, False]
    flipped = ref.assign(safe=~ref["safe"])
    cells = compare_frames("safety", flipped, ref, {"safe": held("safety")["safe"]}).cells
    assert [c.row for c in cells] == [1, 2]


# --- safe regions, the section and the summary ------------------------------------------------


def edge_table(safe, edge):
    """A safety table by hand: one metric, bins 0.. of width 0.1, given verdicts."""
    rows = []
    for b, (s, e) in enumerate(zip(safe, edge, strict=True)):
        rows.append({"model": "m", "metric": "tv", "bin_kind": "sink_gap", "bin": b,
                     "bin_low": 0.1 * b, "bin_high": 0.1 * (b + 1), "n_triplets": 1000,
                     "n_ties": 0, "flips": 20 if s else 60, "flip_rate": 0.02 if s else 0.06,
                     "flip_rate_low": 0.01, "flip_rate_high": 0.049 if e else 0.03,
                     "n_decided": 1000, "safe_threshold": 0.05, "safe": s, "safe_edge": e,
                     "ci_rounding": 0.002})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_safe_region_never_counts_a_bin_on_the_edge():
    from attncoda.experiments.safety import safe_regions

    # Safe, safe on the edge, unsafe on the edge, safe: the region is the first bin; it
    # may reach 0.3 through the two bins on the edge.
    # Safe, safe on the edge, unsafe on the edge, safe, unsafe: the region is the first
    # bin; were the two bins on the edge safe, it would reach 0.4.
    table = edge_table([True, True, False, True, False], [False, True, True, False, False])
    region = safe_regions(table).set_index("metric").loc["all"]
    assert (region["n_safe_bins"], region["n_edge_bins"]) == (1, 3)
    assert region["safe_below"] == pytest.approx(0.1)
    assert region["edge_below"] == pytest.approx(0.4)
    assert region["statement"].endswith(
        "; bins on the edge follow it (their upper bound within rounding of 5%: safe or not "
        "by rounding), so the region may reach 0.4"
    )
    none = safe_regions(edge_table([True, False], [True, False])).set_index("metric")
    assert (none.loc["all", "n_safe_bins"], none.loc["all", "n_edge_bins"]) == (0, 1)
    assert none.loc["all", "statement"] == (
        "no region of the sink-mass gap |s_B - s_C| between the two heads is safe beyond "
        "rounding for every metric: in its lowest bin the upper 95% Clopper-Pearson bound of "
        "the flip rate is 4.9%, within rounding of 5% (on the edge: safe or not by rounding)"
    )
    clear = safe_regions(edge_table([True, False], [False, False])).set_index("metric")
    assert clear.loc["all", "n_edge_bins"] == 0 and np.isnan(clear.loc["all", "edge_below"])


def test_the_summary_and_the_section_call_an_edge_bin_so():
    from attncoda.experiments.safety._section import _rate_n
    from attncoda.experiments.safety._summary import summary

    table = edge_table([True, True, False], [False, True, True])
    lines = summary({"safety": table}, lambda *_: {}, "bos").splitlines()
    assert lines[1].endswith("  SAFE")
    assert lines[2].endswith("  EDGE (within 0.002 of 5%)") and "SAFE" not in lines[2]
    assert lines[3].endswith("  EDGE (within 0.002 of 5%)")
    marks = [_rate_n(r) for r in table.to_dict("records")]
    assert marks[0].endswith("✓ safe") and marks[1].endswith("≈ edge")
    assert marks[2].endswith("≈ edge")
