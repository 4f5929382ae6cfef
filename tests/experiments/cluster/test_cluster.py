"""Tests of the Clark et al. head-clustering pipeline under four variants."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from attncoda import AttncodaError, aitchison_split
from attncoda.experiments.cluster import (
    VARIANTS,
    ClusterResult,
    cluster,
    distance_table,
    result_tables,
)
from attncoda.experiments.contract import DocRows, HeadRows

N_INIT = 2  # fewer MDS starts than the default keeps the tests fast


def _log_rows(z: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Log-softmax of logits over the present keys; NaN (to be ignored) elsewhere."""
    z = np.where(mask, z, -np.inf)
    lp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.where(mask, lp, np.nan)


def _causal_doc(
    rng: np.random.Generator, heads: int, positions: list[int], keys: int, sink: tuple[int, ...]
) -> DocRows:
    """Causal rows at the given query positions, random logits with a varying sink logit."""
    mask = np.arange(keys)[None, :] <= np.asarray(positions)[:, None]
    z = rng.normal(size=(heads, len(positions), keys)) * 1.5
    z[:, :, list(sink)] += np.linspace(-1.0, 4.0, heads)[:, None, None]
    return DocRows(logp=_log_rows(z, mask), key_mask=mask, sink=sink)


def _sink_mass(docs: tuple[DocRows, ...]) -> np.ndarray:
    rows = [np.exp(d.logp[:, :, list(d.sink)]).sum(axis=-1) for d in docs]
    return np.concatenate(rows, axis=1).mean(axis=1)


@pytest.fixture(scope="module")
def random_rows() -> HeadRows:
    rng = np.random.default_rng(7)
    heads = 3 * 3
    docs = (
        # position 0 (no content) and 1 (m = 1) are recorded but must be left out
        _causal_doc(rng, heads, [0, 1, 2, 5, 7, 9], 10, (0,)),
        _causal_doc(rng, heads, [3, 4, 6, 8], 9, (0, 1)),  # two sink keys
        _causal_doc(rng, heads, [2, 3, 5], 6, (0,)),
    )
    return HeadRows("toy/random", 3, 3, docs, _sink_mass(docs))


@pytest.fixture(scope="module")
def random_result(random_rows: HeadRows) -> ClusterResult:
    return cluster(random_rows, seed=3, n_clusters=3, n_init=N_INIT)


def _clark_loop(head_rows: HeadRows, convention: str) -> np.ndarray:
    """Clark et al.'s head_distances.py, one row pair at a time: smooth, JS (nats), sum."""
    heads = head_rows.n_layers * head_rows.n_heads
    out = np.zeros((heads, heads))
    for doc in head_rows.docs:
        for r in range(doc.logp.shape[1]):
            present = np.flatnonzero(doc.key_mask[r])
            content = [j for j in present if j not in doc.sink]
            if not set(doc.sink) <= set(present) or len(content) < 2:
                continue
            for a in range(heads):
                for b in range(heads):
                    rows = []
                    for h in (a, b):
                        if convention == "keep":
                            p = np.exp(doc.logp[h, r, present])
                        else:
                            p = np.exp(doc.logp[h, r, content])
                            p = p / p.sum()
                        rows.append(0.999 * p + 0.001 / len(p))
                    p, q = rows
                    m = (p + q) / 2
                    js = (-p * np.log(m / p)).sum() + (-q * np.log(m / q)).sum()
                    out[a, b] += js / 2
    return out


@pytest.mark.parametrize("convention", ["keep", "drop"])
def test_js_distances_equal_clark_loop(
    random_rows: HeadRows, random_result: ClusterResult, convention: str
) -> None:
    expected = _clark_loop(random_rows, convention)
    np.testing.assert_allclose(
        random_result.distances[convention], expected, rtol=1e-10, atol=1e-10
    )
    assert random_result.artifact["n_rows_used"] == 4 + 4 + 3


def test_aitchison_terms_and_sink_share_equal_row_by_row_split(
    random_rows: HeadRows, random_result: ClusterResult
) -> None:
    heads = 9
    d_sink, d_content = np.zeros((heads, heads)), np.zeros((heads, heads))
    sink_sq, total_sq = np.zeros((heads, heads)), np.zeros((heads, heads))
    for doc in random_rows.docs:
        for r in range(doc.logp.shape[1]):
            present = list(np.flatnonzero(doc.key_mask[r]))
            if len(present) - len(doc.sink) < 2:
                continue
            sink = [present.index(j) for j in doc.sink]
            for a, b in combinations(range(heads), 2):
                split = aitchison_split(doc.logp[a, r, present], doc.logp[b, r, present], sink=sink)
                for mat, value in (
                    (d_sink, float(split.sink)),
                    (d_content, float(split.content)),
                    (sink_sq, float(split.sink) ** 2),
                    (total_sq, float(split.total) ** 2),
                ):
                    mat[a, b] += value
                    mat[b, a] += value
    np.testing.assert_allclose(random_result.distances["aitchison_sink"], d_sink, atol=1e-10)
    np.testing.assert_allclose(random_result.distances["aitchison_content"], d_content, atol=1e-10)
    upper = np.triu_indices(heads, k=1)
    share = float(np.mean(sink_sq[upper] / total_sq[upper]))
    assert random_result.artifact["mean_sink_share_of_aitchison_sq"] == pytest.approx(
        share, abs=1e-10
    )
    assert random_result.artifact["n_head_pairs_in_sink_share"] == heads * (heads - 1) // 2


def test_distances_are_symmetric_with_zero_diagonal(random_result: ClusterResult) -> None:
    for variant in VARIANTS:
        d = random_result.distances[variant]
        assert d.shape == (9, 9)
        np.testing.assert_array_equal(d, d.T)
        np.testing.assert_array_equal(np.diag(d), 0.0)
        assert (d[np.triu_indices(9, k=1)] > 0).all()


def test_table_is_tidy_and_typed(random_result: ClusterResult) -> None:
    table = random_result.table
    assert list(table.columns[:7]) == [
        "model", "head_index", "layer", "head", "n_keys", "n_rows", "sink_mass",
    ]  # fmt: skip
    # the longest document has 10 keys; 4 + 4 + 3 rows are used
    assert table["n_keys"].dtype == np.int64 and (table["n_keys"] == 10).all()
    assert table["n_rows"].dtype == np.int64 and (table["n_rows"] == 11).all()
    for variant in VARIANTS:
        for prefix in ("x_", "y_", "cluster_", "distance_rounding_", "edge_"):
            assert f"{prefix}{variant}" in table.columns
        assert table[f"x_{variant}"].dtype == np.float64
        assert table[f"cluster_{variant}"].dtype == np.int64
        assert table[f"distance_rounding_{variant}"].dtype == np.float64
        assert (table[f"distance_rounding_{variant}"] > 0).all()
        assert table[f"edge_{variant}"].dtype == bool
        # clusters numbered in order of first appearance: head 0 is in cluster 0
        assert table[f"cluster_{variant}"].iloc[0] == 0
        # axis 1 is signed so that its most extreme head is positive
        x = table[f"x_{variant}"].to_numpy()
        assert x[np.argmax(np.abs(x))] > 0
        # principal axes: axis 1 carries at least the spread of axis 2
        assert x.var() >= table[f"y_{variant}"].to_numpy().var()
    assert len(table) == 9
    assert table["layer"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert table["head"].tolist() == [0, 1, 2] * 3
    assert (table["model"] == "toy/random").all()


def test_artifact_keys(random_result: ClusterResult) -> None:
    art = random_result.artifact
    assert art["variants"] == list(VARIANTS)
    assert set(art["adjusted_rand"]) == {f"{a}|{b}" for a, b in combinations(VARIANTS, 2)}
    for v in VARIANTS:
        rho = art["spearman_axis1_vs_sink_mass"][v]
        assert -1 <= rho <= 1
        assert art["abs_spearman_axis1_vs_sink_mass"][v] == abs(rho)
        # axis 1 is one of the scanned directions
        assert abs(rho) - 1e-12 <= art["max_abs_spearman_any_direction_vs_sink_mass"][v] <= 1
    assert "Clark" in art["convention_note"] and "nats" in art["convention_note"]


def test_seeded_runs_are_identical(random_rows: HeadRows, random_result: ClusterResult) -> None:
    again = cluster(random_rows, seed=3, n_clusters=3, n_init=N_INIT)
    pd.testing.assert_frame_equal(again.table, random_result.table)
    assert again.artifact == random_result.artifact
    for v in VARIANTS:
        np.testing.assert_array_equal(again.distances[v], random_result.distances[v])


def _shared_content_rows(sink_logits: np.ndarray, seed: int) -> tuple[DocRows, ...]:
    """Every head has the same content logits; heads differ only in their sink logit."""
    rng = np.random.default_rng(seed)
    heads = len(sink_logits)
    docs = []
    for keys in (12, 10):
        positions = list(range(3, keys))
        mask = np.arange(keys)[None, :] <= np.asarray(positions)[:, None]
        z = np.broadcast_to(rng.normal(size=(len(positions), keys)) * 2, (heads, *mask.shape))
        z = z.copy()
        z[:, :, 0] = sink_logits[:, None]
        docs.append(DocRows(logp=_log_rows(z, mask), key_mask=mask, sink=(0,)))
    return tuple(docs)


def test_sink_mass_drives_keep_axis_but_not_content() -> None:
    # Two groups of heads by sink mass (about 0.05-0.3 and 0.8-0.97), identical content.
    sink_logits = np.concatenate([np.linspace(-1.0, 1.0, 6), np.linspace(4.0, 6.5, 6)])
    docs = _shared_content_rows(sink_logits, seed=11)
    rows = HeadRows("toy/sink-only", 3, 4, docs, _sink_mass(docs))
    result = cluster(rows, seed=0, n_clusters=2, n_init=N_INIT)
    art = result.artifact
    assert art["abs_spearman_axis1_vs_sink_mass"]["keep"] > 0.9
    assert art["abs_spearman_axis1_vs_sink_mass"]["aitchison_sink"] > 0.9
    # content is identical: the content term (and drop) see no difference at all
    assert result.distances["aitchison_content"].max() < 1e-9
    assert result.distances["drop"].max() < 1e-9
    assert set(art["degenerate_variants"]) == {"drop", "aitchison_content"}
    # Their distances are float64 noise (1e-14), far inside the logs' float32 rounding: the
    # verdict "not embedded" is on its edge (a run whose logs differ by a rounding embeds
    # them), so their points may be anywhere and their labels either way.
    threshold = 1e-10 * art["n_rows_used"]
    assert result.rounding["drop"].max() > threshold > result.distances["drop"].max()
    assert art["rounding"]["degenerate_edge"] == {
        "keep": False, "drop": True, "aitchison_sink": False, "aitchison_content": True,
    }  # fmt: skip
    assert np.isinf(result.table["distance_rounding_drop"]).all()
    assert result.table["edge_aitchison_content"].all() and not result.table["edge_keep"].any()
    assert art["spearman_axis1_vs_sink_mass"]["aitchison_content"] is None
    assert (result.table["cluster_aitchison_content"] == 0).all()
    # keep splits the two sink-mass groups; the content view cannot
    keep = result.table["cluster_keep"].to_numpy()
    assert len(set(keep[:6])) == 1 and len(set(keep[6:])) == 1 and keep[0] != keep[6]
    assert art["adjusted_rand"]["keep|aitchison_sink"] == pytest.approx(1.0)
    assert art["adjusted_rand"]["keep|aitchison_content"] == pytest.approx(0.0)
    assert art["mean_sink_share_of_aitchison_sq"] == pytest.approx(1.0, abs=1e-9)


def test_identical_sink_two_content_groups_give_zero_sink_distances() -> None:
    # Group B's content logits are group A's reversed: the same sink logit, sink mass and
    # sink balance in every row, different content.
    rng = np.random.default_rng(5)
    heads, docs = 8, []
    for keys in (11, 9):
        positions = list(range(4, keys))
        mask = np.arange(keys)[None, :] <= np.asarray(positions)[:, None]
        z = np.full((heads, len(positions), keys), -np.inf)
        for r, pos in enumerate(positions):
            v = rng.normal(size=pos) * 2
            z[:4, r, 1 : pos + 1] = v
            z[4:, r, 1 : pos + 1] = v[::-1]
            z[:, r, 0] = 3.0
        docs.append(DocRows(logp=_log_rows(z, mask), key_mask=mask, sink=(0,)))
    rows = HeadRows("toy/content-only", 2, 4, tuple(docs), np.full(heads, 0.6))
    result = cluster(rows, seed=0, n_clusters=2, n_init=N_INIT)
    art = result.artifact
    assert result.distances["aitchison_sink"].max() < 1e-9
    assert result.distances["aitchison_content"][0, 4] > 1.0
    assert art["degenerate_variants"] == ["aitchison_sink"]
    assert art["mean_sink_share_of_aitchison_sq"] == pytest.approx(0.0, abs=1e-9)
    # sink mass is the same for every head: rho is undefined, reported as None
    assert all(r is None for r in art["spearman_axis1_vs_sink_mass"].values())
    assert art["adjusted_rand"]["drop|aitchison_content"] == pytest.approx(1.0)
    content = result.table["cluster_aitchison_content"].tolist()
    assert content == [0] * 4 + [1] * 4


def test_summary_is_the_artifact_made_json_safe(random_result: ClusterResult) -> None:
    summary = result_tables(random_result).summary
    assert json.loads(json.dumps(summary, allow_nan=False)) == random_result.artifact
    # JSON has no NaN: a non-finite float (here a stress) is stored as null
    artifact = dict(random_result.artifact)
    artifact["mds_stress"] = {**artifact["mds_stress"], "keep": float("nan")}
    artifact["degenerate_variants"] = [*artifact["degenerate_variants"], float("inf")]
    nan = ClusterResult(table=random_result.table, artifact=artifact, distances={})
    summary = result_tables(nan).summary
    json.dumps(summary, allow_nan=False)
    assert summary["mds_stress"]["keep"] is None
    assert summary["degenerate_variants"][-1] is None
    assert summary["mds_stress"]["drop"] == random_result.artifact["mds_stress"]["drop"]


def test_refuses_bad_arguments(random_rows: HeadRows) -> None:
    with pytest.raises(AttncodaError, match="n_clusters must be at least 1; got 0"):
        cluster(random_rows, n_clusters=0)
    with pytest.raises(AttncodaError, match="n_init must be an int; got 2.0"):
        cluster(random_rows, n_init=2.0)
    short = DocRows(
        logp=np.log(np.full((9, 2, 3), 1 / 3)), key_mask=np.ones((2, 3), bool), sink=(0, 1)
    )
    rows = HeadRows("toy/short", 3, 3, (short,), np.zeros(9))
    with pytest.raises(AttncodaError, match="no recorded row of 'toy/short' has every sink"):
        cluster(rows)
    bad = random_rows.docs[0].logp.copy()
    bad[2, 3, 1] = np.nan
    nan_doc = DocRows(logp=bad, key_mask=random_rows.docs[0].key_mask, sink=(0,))
    rows = HeadRows("toy/nan", 3, 3, (nan_doc,), np.zeros(9))
    with pytest.raises(AttncodaError, match=r"document 0 of 'toy/nan': logp contains NaN"):
        cluster(rows)


def _matrix(frame: pd.DataFrame, variant: str, heads: int) -> np.ndarray:
    """A variant's (head, head) matrix from the rows of the cluster_distances table."""
    d = np.zeros((heads, heads))
    for row in frame[frame["variant"] == variant].itertuples(index=False):
        d[row.head_a, row.head_b] = d[row.head_b, row.head_a] = row.distance
    return d


def test_the_distance_table_holds_the_matrices_mds_embedded(
    random_rows: HeadRows, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attncoda.experiments.cluster._fit as pipeline

    embedded, embed = [], pipeline.embed

    def recording(d: np.ndarray, seed: int, n_init: int) -> tuple[np.ndarray, float, int]:
        embedded.append(d.copy())
        return embed(d, seed, n_init)

    monkeypatch.setattr(pipeline, "embed", recording)
    result = cluster(random_rows, seed=3, n_clusters=3, n_init=N_INIT)
    frame = result_tables(result).frames["cluster_distances"]
    assert list(frame.columns) == [
        "model", "variant", "head_a", "head_b", "n_rows", "distance", "distance_rounding",
    ]  # fmt: skip
    assert frame["head_a"].dtype == np.int64 and frame["head_b"].dtype == np.int64
    assert frame["distance"].dtype == np.float64
    assert frame["distance_rounding"].dtype == np.float64
    assert (frame["n_rows"] == 11).all()
    # one row per unordered pair of the 9 heads, per variant, in the variants' order
    assert len(frame) == 4 * 36
    assert list(dict.fromkeys(frame["variant"])) == list(VARIANTS)
    assert (frame["head_a"] < frame["head_b"]).all()
    assert (frame["model"] == "toy/random").all()
    pairs = frame[frame["variant"] == "keep"][["head_a", "head_b"]]
    assert list(pairs.itertuples(index=False, name=None)) == list(combinations(range(9), 2))
    assert len(embedded) == len(VARIANTS)  # no variant is degenerate here
    for variant, d in zip(VARIANTS, embedded, strict=True):
        np.testing.assert_array_equal(_matrix(frame, variant, 9), d)
        rounding = frame[frame["variant"] == variant]["distance_rounding"].to_numpy()
        assert (rounding > 0).all()
        # the rounding the table states is the one the result holds for that pair
        upper = np.triu_indices(9, k=1)
        np.testing.assert_array_equal(rounding, result.rounding[variant][upper])


def test_the_distance_table_of_a_handmade_document_is_scipys_js_and_the_hand_terms() -> None:
    from scipy.spatial.distance import jensenshannon

    # 3 heads, causal rows at query positions 1, 2, 3 over keys 0..3, sink key 0. Position 1
    # has one content key (m = 1) and is left out; positions 2 and 3 are summed.
    p = [
        [[0.5, 0.5], [0.6, 0.3, 0.1], [0.5, 0.2, 0.2, 0.1]],
        [[0.9, 0.1], [0.2, 0.5, 0.3], [0.1, 0.4, 0.3, 0.2]],
        [[0.3, 0.7], [0.8, 0.1, 0.1], [0.7, 0.1, 0.1, 0.1]],
    ]
    logp = np.full((3, 3, 4), np.nan)
    for h, rows in enumerate(p):
        for r, row in enumerate(rows):
            logp[h, r, : len(row)] = np.log(row)
    doc = DocRows(logp=logp, key_mask=~np.isnan(logp[0]), sink=(0,))
    rows = HeadRows("toy/hand", 1, 3, (doc,), np.array([0.6, 0.4, 0.6]))
    frame = result_tables(cluster(rows, n_clusters=2, n_init=1)).frames["cluster_distances"]
    assert len(frame) == 4 * 3

    def smooth(x: np.ndarray) -> np.ndarray:
        return 0.999 * x + 0.001 / len(x)

    def clr(x: np.ndarray) -> np.ndarray:
        return np.log(x) - np.log(x).mean()

    def balance(x: np.ndarray) -> float:  # k = 1 sink key, m content keys
        m = len(x) - 1
        return float(np.sqrt(m / (1 + m)) * (np.log(x[0]) - np.log(x[1:]).mean()))

    for a, b in combinations(range(3), 2):
        want = dict.fromkeys(VARIANTS, 0.0)
        for r in (1, 2):
            pa, pb = np.array(p[a][r]), np.array(p[b][r])
            qa, qb = pa[1:] / pa[1:].sum(), pb[1:] / pb[1:].sum()
            # scipy returns the square root of the divergence, in nats by default
            want["keep"] += jensenshannon(smooth(pa), smooth(pb)) ** 2
            want["drop"] += jensenshannon(smooth(qa), smooth(qb)) ** 2
            want["aitchison_sink"] += abs(balance(pa) - balance(pb))
            want["aitchison_content"] += float(np.linalg.norm(clr(pa[1:]) - clr(pb[1:])))
        got = frame[(frame["head_a"] == a) & (frame["head_b"] == b)].set_index("variant")
        for variant in VARIANTS:
            where = (a, b, variant)
            assert got.loc[variant, "distance"] == pytest.approx(want[variant], rel=1e-12), where


def test_the_distance_table_refuses_a_matrix_its_pairs_cannot_hold() -> None:
    square = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]])
    table = distance_table("m", {"keep": square})
    assert table[["head_a", "head_b", "distance"]].values.tolist() == [
        [0, 1, 1.0],
        [0, 2, 2.0],
        [1, 2, 3.0],
    ]
    lopsided = square.copy()
    lopsided[2, 0] = 2.5
    with pytest.raises(
        AttncodaError,
        match=r"the drop distances of 'm' must be symmetric with a zero diagonal: the pairs",
    ):
        distance_table("m", {"keep": square, "drop": lopsided})
    with pytest.raises(AttncodaError, match="must be symmetric with a zero diagonal"):
        distance_table("m", {"keep": square + np.eye(3)})
    with pytest.raises(
        AttncodaError, match=r"the keep distances of 'm' must be a \(head, head\) matrix; got"
    ):
        distance_table("m", {"keep": square[:2]})


def test_the_distances_report_their_documents_inside_a_shown_block(
    random_rows: HeadRows, monkeypatch, capsys
) -> None:
    # cluster runs for a minute or more on SmolLM2: inside a run that shows progress it says
    # how many documents' distances are done; outside one it says nothing.
    from attncoda import _progress
    from attncoda._progress import shown

    monkeypatch.setattr(_progress, "EVERY", 0.0)
    cluster(random_rows, seed=0)
    assert "head distances" not in capsys.readouterr().err
    with shown():
        cluster(random_rows, seed=0)
    n = len(random_rows.docs)
    assert f"cluster {random_rows.model}: head distances: {n}/{n} doc, done" in (
        capsys.readouterr().err
    )
