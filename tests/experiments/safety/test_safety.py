"""Safety map: squared Aitchison terms against row-by-row splits, binned counts against
triplet-by-triplet loops, totals against flips, and the heatmap figure."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from attncoda import AttncodaError, aitchison_split
from attncoda.experiments.contract import DocRows, HeadRows
from attncoda.experiments.flips import FLIP_METRICS, flips
from attncoda.experiments.safety import (
    GRID_COLUMNS,
    SAFETY_COLUMNS,
    mean_squared_split,
    safety_map,
)
from attncoda.experiments.safety._figure import plot_safety, safety_figure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def random_head_rows(n_layers=2, n_heads=4, n_docs=3, keys=9, sink=(0,), seed=0):
    """Causal synthetic rows with row r holding keys 0..r+len(sink)+... (lengths vary)."""
    rng = np.random.default_rng(seed)
    n = n_layers * n_heads
    docs = []
    for _ in range(n_docs):
        lengths = np.arange(len(sink) + 1, keys + 1)
        mask = np.arange(keys)[None, :] < lengths[:, None]
        logp = np.full((n, len(lengths), keys), np.nan)  # absent keys hold junk
        # Heads differ in how much they put on the sink: a real spread of sink masses.
        bias = rng.uniform(-1.0, 3.0, size=n)
        for r, length in enumerate(lengths):
            z = rng.normal(size=(n, length))
            z[:, list(sink)] += bias[:, None]
            logp[:, r, :length] = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        docs.append(DocRows(logp=logp, key_mask=mask, sink=tuple(sink)))
    mass = np.mean([np.exp(d.logp[:, :, list(sink)]).sum(axis=2).mean(axis=1) for d in docs], 0)
    return HeadRows("synthetic", n_layers, n_heads, tuple(docs), mass)


def brute_squares(head_rows):
    n = head_rows.n_layers * head_rows.n_heads
    total, sink, count = np.zeros((n, n)), np.zeros((n, n)), 0
    for doc in head_rows.docs:
        k = len(doc.sink)
        for r in range(doc.key_mask.shape[0]):
            keys = np.flatnonzero(doc.key_mask[r])
            if len(keys) - k < 2:
                continue
            z = doc.logp[:, r, keys]
            split = aitchison_split(z[:, None, :], z[None, :, :], sink=list(doc.sink))
            total += split.total**2
            sink += split.sink**2
            count += 1
    return total / count, sink / count, count


@pytest.mark.parametrize("sink", [(0,), (0, 1)])
def test_mean_squared_split_equals_row_by_row_split(sink):
    head_rows = random_head_rows(sink=sink, seed=len(sink))
    squares = mean_squared_split(head_rows)
    total, sink_sq, count = brute_squares(head_rows)
    assert squares.n_rows == count
    np.testing.assert_allclose(squares.total, total, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(squares.sink, sink_sq, rtol=1e-10, atol=1e-12)
    assert (squares.sink <= squares.total + 1e-12).all()
    share = squares.sink[np.triu_indices(8, 1)].sum() / squares.total[np.triu_indices(8, 1)].sum()
    assert squares.sink_share == pytest.approx(share, rel=1e-12)


def test_identical_heads_have_zero_squared_distance():
    base = random_head_rows(n_layers=1, n_heads=3, seed=4)
    docs = tuple(
        DocRows(np.concatenate([d.logp, d.logp[:1]]), d.key_mask, d.sink) for d in base.docs
    )
    head_rows = HeadRows("dup", 1, 4, docs, np.append(base.sink_mass, base.sink_mass[0]))
    squares = mean_squared_split(head_rows)
    assert squares.total[0, 3] == 0.0 and squares.sink[0, 3] == 0.0


@pytest.fixture(scope="module")
def mapped():
    head_rows = random_head_rows(seed=7)
    result = flips(head_rows, n_boot=5)
    return head_rows, result, safety_map(head_rows, flips_result=result)


def test_safety_totals_equal_flips_and_grid_marginals_equal_table(mapped):
    head_rows, result, safety = mapped
    assert list(safety.table.columns) == list(SAFETY_COLUMNS)
    assert list(safety.grid.columns) == list(GRID_COLUMNS)
    counts = ["n_triplets", "n_ties", "flips"]
    flips_table = result.table.set_index("metric")[counts]
    for kind in ("sink_share", "sink_gap"):
        part = safety.table[safety.table["bin_kind"] == kind]
        totals = part.groupby("metric")[counts].sum()
        assert totals.loc[list(FLIP_METRICS)].to_numpy().tolist() == (
            flips_table.loc[list(FLIP_METRICS)].to_numpy().tolist()
        )
        by = "sink_share_bin" if kind == "sink_share" else "sink_gap_bin"
        marginal = safety.grid.groupby(["metric", by])[counts].sum().to_numpy()
        assert part.sort_values(["metric", "bin"])[counts].to_numpy().tolist() == (
            marginal.tolist()
        )


def test_quantile_bins_split_the_triplets_evenly(mapped):
    _, _, safety = mapped
    assert len(safety.share_edges) == len(safety.gap_edges) == 6
    part = safety.table[(safety.table["metric"] == "tv")]
    for kind in ("sink_share", "sink_gap"):
        n = part[part["bin_kind"] == kind]["n_triplets"].to_numpy()
        assert n.sum() == 8 * 21
        assert n.min() >= 0.15 * n.sum() and n.max() <= 0.25 * n.sum(), (kind, n)


def test_grid_counts_equal_triplet_by_triplet_loops(mapped):
    head_rows, result, safety = mapped
    squares = mean_squared_split(head_rows)
    mass = head_rows.sink_mass
    s_edges, g_edges = safety.share_edges, safety.gap_edges

    def bin_of(value, edges):
        for i in range(len(edges) - 2, -1, -1):
            if value >= edges[i]:
                return i
        return 0

    for metric in ("jsd", "entropy_gap"):
        keep, drop = result.distances[(metric, "keep")], result.distances[(metric, "drop")]
        tk, td = 1e-9 * np.abs(keep).max(), 1e-9 * np.abs(drop).max()
        expected = {}
        for a in range(8):
            for b, c in itertools.combinations([j for j in range(8) if j != a], 2):
                share = (squares.sink[a, b] + squares.sink[a, c]) / (
                    squares.total[a, b] + squares.total[a, c]
                )
                cell = (bin_of(share, s_edges), bin_of(abs(mass[b] - mass[c]), g_edges))
                dk, dd = keep[a, c] - keep[a, b], drop[a, c] - drop[a, b]
                tie = abs(dk) <= tk or abs(dd) <= td
                n, t, f = expected.get(cell, (0, 0, 0))
                expected[cell] = (n + 1, t + tie, f + (not tie and (dk > 0) != (dd > 0)))
        grid = safety.grid[safety.grid["metric"] == metric]
        got = {
            (r.sink_share_bin, r.sink_gap_bin): (r.n_triplets, r.n_ties, r.flips)
            for r in grid.itertuples()
            if r.n_triplets
        }
        assert got == expected


def test_recomputed_distances_match_the_reused_ones(mapped):
    head_rows, _, safety = mapped
    again = safety_map(head_rows, ("cosine", "tv"))
    reused = safety.grid[safety.grid["metric"].isin(["tv", "cosine"])].reset_index(drop=True)
    assert again.grid.equals(reused)


def test_fixed_edges_and_empty_cells(mapped):
    head_rows, result, _ = mapped
    safety = safety_map(
        head_rows, ("tv",), flips_result=result, share_edges=(0, 0.5, 1), gap_edges=(0, 1)
    )
    table = safety.table
    assert table["bin_kind"].tolist() == ["sink_share", "sink_share", "sink_gap"]
    assert table["bin_low"].tolist() == [0.0, 0.5, 0.0]
    assert table["bin_high"].tolist() == [0.5, 1.0, 1.0]
    assert table["n_triplets"].tolist()[2] == 8 * 21
    empty = safety.grid[safety.grid["n_triplets"] == 0]
    assert empty["flip_rate"].isna().all()
    assert (safety.grid["n_triplets"] > 0).any()


def test_all_identical_heads_are_all_ties():
    base = random_head_rows(n_layers=1, n_heads=1, seed=5)
    docs = tuple(DocRows(np.repeat(d.logp, 4, axis=0), d.key_mask, d.sink) for d in base.docs)
    head_rows = HeadRows("same", 1, 4, docs, np.repeat(base.sink_mass, 4))
    safety = safety_map(head_rows, ("tv",), n_bins=3)
    assert safety.share_edges.tolist() == [0.0, 0.0]  # share 0 where T = 0; one bin
    row = safety.table[safety.table["bin_kind"] == "sink_share"].iloc[0]
    assert (row["n_triplets"], row["n_ties"], row["flips"]) == (12, 12, 0)
    assert np.isnan(row["flip_rate"])


def test_safety_errors(mapped):
    head_rows, result, _ = mapped
    sq = safety_map(head_rows, ("tv",), flips_result=result).squares
    first = (sq.sink[0, 1] + sq.sink[0, 2]) / (sq.total[0, 1] + sq.total[0, 2])  # (A; B, C)
    msg = (
        f"sink_share value {first:.6g} lies outside the fixed bin edges [2, 3]; give edges "
        "that cover [0, 1]"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(head_rows, ("tv",), flips_result=result, share_edges=(2, 3))
    msg = "sink_gap_edges must be strictly increasing; got [0.0, 0.5, 0.5, 1.0]"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(head_rows, ("tv",), flips_result=result, gap_edges=(0, 0.5, 0.5, 1))
    msg = "sink_share_edges must be at least 2 finite numbers; got (0.0,)"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(head_rows, ("tv",), flips_result=result, share_edges=(0.0,))
    msg = "sink_gap_edges must be at least 2 finite numbers; got ('a', 'b')"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(head_rows, ("tv",), flips_result=result, gap_edges=("a", "b"))
    with pytest.raises(AttncodaError, match=re.escape("n_bins must be a positive int; got 0")):
        safety_map(head_rows, ("tv",), flips_result=result, n_bins=0)
    msg = "tol=1e-06 differs from the tol=1e-09 of flips_result; leave tol out to use it"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(head_rows, ("tv",), flips_result=result, tol=1e-6)
    other = HeadRows("other", 2, 4, head_rows.docs, head_rows.sink_mass)
    msg = "flips_result is for model 'synthetic', not 'other'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(other, ("tv",), flips_result=result)
    only_tv = flips(head_rows, ("tv",), n_boot=2)
    msg = "flips_result has no distances for metric 'jsd'; run flips with it"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_map(head_rows, ("tv", "jsd"), flips_result=only_tv)


def test_non_finite_log_probability_of_a_used_row():
    head_rows = random_head_rows(seed=3)
    logp = head_rows.docs[0].logp.copy()
    logp[2, 4, 1] = -np.inf
    docs = (DocRows(logp, head_rows.docs[0].key_mask, (0,)), *head_rows.docs[1:])
    bad = HeadRows("synthetic", 2, 4, docs, head_rows.sink_mass)
    msg = (
        "document 0 of 'synthetic' has a non-finite log-probability at (head, row, key) "
        "(2, 3, 1) of a used row: the Aitchison split needs every present key to have "
        "positive mass"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        mean_squared_split(bad)


# --- figure ---------------------------------------------------------------------------------


def test_safety_heatmap_names_the_conventions_and_is_a_png(mapped, tmp_path):
    _, _, safety = mapped
    fig = safety_figure(safety.grid, ["tv", "jsd"])
    assert "keep vs drop" in fig.get_suptitle()
    assert [ax.get_title() for ax in fig.axes[:2]] == ["tv", "jsd"]
    assert fig.axes[0].get_ylabel() == "sink share of d_A² (Aitchison)"
    assert "keep vs drop" in fig.axes[-1].get_ylabel()  # the colour bar
    path = plot_safety(safety.grid, tmp_path / "figs" / "safety.png")
    data = path.read_bytes()
    assert path == tmp_path / "figs" / "safety.png"
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
    assert [p.name for p in path.parent.iterdir()] == ["safety.png"]  # no temporary left


def test_safety_figure_errors(mapped):
    _, _, safety = mapped
    with pytest.raises(AttncodaError, match=re.escape("the safety grid has no metric 'kl'")):
        safety_figure(safety.grid, ["kl"])
    msg = "the safety grid lacks the column 'flip_rate'"
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        safety_figure(safety.grid.drop(columns="flip_rate"))


# --- where it is safe -----------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(0, 100), (3, 100), (50, 100), (100, 100), (7, 4000)])
def test_flip_rate_interval_is_clopper_pearson(k, n):
    from scipy.stats import binomtest

    from attncoda.experiments.safety import flip_rate_interval

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    low, high = flip_rate_interval(k, n)
    # Both are the same beta quantiles; scipy's two routes agree to ~1e-12.
    assert low == pytest.approx(ci.low, abs=1e-9) and high == pytest.approx(ci.high, abs=1e-9)
    assert flip_rate_interval(0, 0) == (0.0, 1.0)


def test_bins_are_marked_safe_by_their_upper_bound(mapped):
    from attncoda.experiments.safety import flip_rate_interval

    safety = mapped[2]
    t = safety.table
    for r in t.itertuples(index=False):
        low, high = flip_rate_interval(r.flips, r.n_triplets - r.n_ties)
        assert (r.flip_rate_low, r.flip_rate_high) == (low, high)
        # the interval names its method and its n
        assert r.ci_method == "Clopper-Pearson over triplets"
        assert r.n_decided == r.n_triplets - r.n_ties
        assert r.safe == (r.n_triplets > r.n_ties and high < 0.05)
        assert r.safe_threshold == 0.05
    assert t["safe"].dtype == bool and safety.grid["safe"].dtype == bool
    assert (safety.grid["n_decided"] == safety.grid["n_triplets"] - safety.grid["n_ties"]).all()
    assert (safety.grid["ci_method"] == "Clopper-Pearson over triplets").all()


def _table(rates_by_metric, n=1000, kind="sink_gap"):
    """A safety table by hand: bins 0.. with edges 0, 0.1, 0.2, ...; n decided each."""
    import pandas as pd

    from attncoda.experiments.safety import flip_rate_interval

    rows = []
    for metric, counts in rates_by_metric.items():
        for b, f in enumerate(counts):
            low, high = flip_rate_interval(f, n)
            rows.append(
                {
                    "model": "m",
                    "metric": metric,
                    "bin_kind": kind,
                    "bin": b,
                    "bin_low": 0.1 * b,
                    "bin_high": 0.1 * (b + 1),
                    "n_triplets": n,
                    "n_ties": 0,
                    "flips": f,
                    "flip_rate": f / n,
                    "flip_rate_low": low,
                    "flip_rate_high": high,
                    "safe_threshold": 0.05,
                    "safe": high < 0.05,
                }
            )
    return pd.DataFrame(rows)


def test_safe_region_is_the_run_of_safe_bins_from_the_lowest():
    from attncoda.experiments.safety import REGION_COLUMNS, safe_regions

    # 10/1000 flips: upper bound 1.8% (safe); 40/1000: 5.4% (not safe); 5/1000 safe again,
    # but after an unsafe bin: it does not extend the region.
    table = _table({"tv": [10, 20, 40, 5], "jsd": [10, 60, 5, 5]})
    regions = safe_regions(table).set_index("metric")
    assert list(safe_regions(table).columns) == list(REGION_COLUMNS)
    assert regions.loc["tv", "n_safe_bins"] == 2
    assert regions.loc["tv", "safe_below"] == pytest.approx(0.2)
    assert regions.loc["tv", "n_decided"] == 2000 and regions.loc["tv", "flips"] == 30
    assert (regions["ci_method"] == "Clopper-Pearson over triplets").all()
    assert regions.loc["jsd", "n_safe_bins"] == 1
    assert regions.loc["all", "n_safe_bins"] == 1
    assert regions.loc["all", "safe_below"] == pytest.approx(0.1)
    statement = regions.loc["all", "statement"]
    assert statement.startswith(
        "when the sink-mass gap |s_B - s_C| between the two heads is below 0.1, keep and drop "
        "agree on >= 95% of verdicts for every metric (flip rate 1.0%, upper 95% "
        "Clopper-Pearson bound 1.8% over 1,000 decided triplets)"
    )


def test_no_safe_region_is_said_so():
    from attncoda.experiments.safety import safe_regions

    regions = safe_regions(_table({"tv": [60, 5]}, kind="sink_share")).set_index("metric")
    assert regions.loc["all", "n_safe_bins"] == 0
    assert np.isnan(regions.loc["all", "safe_below"])
    assert regions.loc["all", "statement"] == (
        "no region of the sink share of d_A^2 of the triplet is safe for every metric: in its "
        "lowest bin the upper 95% Clopper-Pearson bound of the flip rate is 7.7%, not below 5%"
    )
    whole = safe_regions(_table({"tv": [1, 2]})).set_index("metric")
    assert whole.loc["all", "statement"].startswith("at every value of the sink-mass gap")


def test_threshold_is_an_option_and_checked(mapped):
    from attncoda.experiments.safety import safety_map

    head_rows, flips_result = mapped[0], mapped[1]
    loose = safety_map(head_rows, flips_result=flips_result, threshold=0.99)
    assert (loose.table["safe_threshold"] == 0.99).all()
    decided = loose.table["n_triplets"] > loose.table["n_ties"]
    assert (loose.table["safe"] == (decided & (loose.table["flip_rate_high"] < 0.99))).all()
    with pytest.raises(
        AttncodaError, match="threshold must be a flip rate strictly between 0 and 1; got 0"
    ):
        safety_map(head_rows, flips_result=flips_result, threshold=0)
