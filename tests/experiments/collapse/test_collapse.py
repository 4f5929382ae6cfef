"""collapse: the exact sink/content split of entropy changes across checkpoints, its Shapley
share and the range of the two one-sided orderings."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import scipy.stats

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pd = pytest.importorskip("pandas")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import capture_windows, forward_kwargs  # noqa: E402
from attncoda.coda import entropy_change_split  # noqa: E402
from attncoda.experiments.collapse import (  # noqa: E402
    CHECKPOINT_COLUMNS,
    COLUMNS,
    DEFAULT_SHARE_ATOL,
    SHARE_METHOD,
    CheckpointStats,
    check_same_layout,  # noqa: E402
    collapse_from_stats,
    series_tables,
)
from attncoda.models.series import SeriesPoint  # noqa: E402
from attncoda.run.direct import checkpoint_stats  # noqa: E402

VOCAB = 120
N_LAYERS, N_HEADS = 2, 4


def neox(seed: int, layers: int = N_LAYERS, vocab: int = VOCAB):
    torch.manual_seed(seed)
    config = transformers.GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=N_HEADS,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return transformers.GPTNeoXForCausalLM._from_config(config, attn_implementation="eager").eval()


def points(n: int) -> list[SeriesPoint]:
    steps = [0, 16, 512, 1000][:n]
    return [SeriesPoint(step, f"step{step}", f"ckpt{step}") for step in steps]


def collapse(pts, wins, models, *, batch_size=8, model="tiny", **options):
    """The series' tables: each checkpoint's statistics (``models[spec]``), assembled."""
    stats = [checkpoint_stats(models[p.spec], None, wins, p, batch_size=batch_size) for p in pts]
    return collapse_from_stats(stats, wins, points=pts, model=model, **options)


def windows(n: int = 4, seed: int = 3) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, size=length).tolist() for length in (9, 14, 6, 11)[:n]]


@pytest.fixture(scope="module")
def series():
    pts = points(3)
    models = {p.spec: neox(seed) for p, seed in zip(pts, (0, 1, 2), strict=True)}
    result = collapse(pts, windows(), models, batch_size=3)
    return pts, models, result


def test_tables_have_the_documented_columns_and_levels(series):
    pts, _, result = series
    assert tuple(result.table.columns) == COLUMNS
    assert tuple(result.checkpoints.columns) == CHECKPOINT_COLUMNS
    per_pair = 1 + N_LAYERS + N_LAYERS * N_HEADS
    kinds = result.table.groupby(["pair_kind", "pair_from", "pair_to"]).size()
    assert kinds.to_dict() == {
        ("consecutive", 0, 16): per_pair,
        ("consecutive", 16, 512): per_pair,
        ("first_last", 0, 512): per_pair,
    }
    assert len(result.checkpoints) == 3 * per_pair
    model_rows = result.table[result.table["level"] == "model"]
    assert model_rows["layer"].isna().all() and model_rows["head"].isna().all()
    assert str(result.table["layer"].dtype) == "Int64"
    for name in ("sink_share", "sink_share_low", "sink_share_high"):
        assert str(result.table[name].dtype) == "Float64"
    for name in ("share_edge", "note_edge"):
        assert str(result.table[name].dtype) == "bool"
    # the longest window, 14 tokens: the most keys a row sees, in every row of both tables
    assert (result.table["n_keys"] == 14).all() and (result.checkpoints["n_keys"] == 14).all()
    assert str(result.checkpoints["n_keys"].dtype) == "int64"
    assert (result.table["sink_share_method"] == SHARE_METHOD).all()
    assert (result.table["model"] == "tiny").all()
    assert [p["step"] for p in result.summary["points"]] == [0, 16, 512]


def test_pair_numbers_match_a_direct_computation_from_the_captures(series):
    pts, models, result = series
    # The batch size of the series fixture: the same batches give the same float32 rows
    # (an op sequence identical by construction). What remains is the float64 summation
    # order of the means (numpy's SIMD loops differ between CPUs), relative to terms far
    # larger than their mean (~3e-6 nats): hence rel_tol=1e-9, not bit-equality.
    caps = [
        capture_windows(models[p.spec], windows(), record_rows="none", batch_size=3) for p in pts
    ]
    a, b = caps[0], caps[2]
    both = a.has_content & b.has_content
    dh = b.entropy - a.entropy
    dc = ((1 - a.sink_mass) + (1 - b.sink_mass)) / 2 * (b.content_entropy - a.content_entropy)
    row = result.table[(result.table["pair_kind"] == "first_last")]
    model = row[row["level"] == "model"].iloc[0]
    assert model["n_rows"] == int(both.sum())
    assert math.isclose(model["delta_entropy"], dh[both].mean(), rel_tol=1e-9)
    assert math.isclose(model["delta_content"], dc[both].mean(), rel_tol=1e-9)
    # The model's mean change (~3e-6 nats) is within its float32 rounding: no share. A head
    # whose change is above it has the share of its rows.
    assert model["sink_share"] is pd.NA
    assert "within its float32 rounding" in model["sink_share_note"]
    heads = row[(row["level"] == "head") & row["sink_share"].notna()]
    assert len(heads)
    top = heads.loc[heads["delta_entropy"].abs().idxmax()]
    layer, head = int(top["layer"]), int(top["head"])
    sel = both[:, layer, head]
    dh_h, dc_h = dh[:, layer, head][sel], dc[:, layer, head][sel]
    assert math.isclose(top["sink_share"], (dh_h - dc_h).sum() / dh_h.sum(), rel_tol=1e-9)
    layer1 = row[(row["level"] == "layer") & (row["layer"] == 1)].iloc[0]
    assert math.isclose(layer1["delta_sink"], (dh - dc)[:, 1][both[:, 1]].mean(), rel_tol=1e-9)
    first = result.checkpoints[
        (result.checkpoints["step"] == 0) & (result.checkpoints["level"] == "model")
    ].iloc[0]
    assert math.isclose(first["entropy"], a.entropy[a.has_content].mean(), rel_tol=1e-9)
    assert math.isclose(first["mean_sink_mass"], a.sink_mass[a.has_content].mean(), rel_tol=1e-9)


def eager_log_rows(model, window):
    """float64 log-probabilities ``(layer, head, query, key)`` from eager output_attentions."""
    ids = torch.as_tensor([window])
    with torch.no_grad():
        out = model(**forward_kwargs(model, ids, torch.ones_like(ids), True))
    probs = torch.stack([a[0] for a in out.attentions]).double()
    return torch.log(probs).numpy()


def test_head_means_match_entropy_change_split_on_eager_rows(series):
    pts, models, result = series
    sums = {
        "total": np.zeros((N_LAYERS, N_HEADS)),
        "sink": np.zeros((N_LAYERS, N_HEADS)),
        "content": np.zeros((N_LAYERS, N_HEADS)),
    }
    count = 0
    for window in windows():
        lp0 = eager_log_rows(models[pts[0].spec], window)
        lp1 = eager_log_rows(models[pts[1].spec], window)
        for query in range(1, len(window)):  # query 0 has no content key
            split = entropy_change_split(
                lp0[:, :, query, : query + 1], lp1[:, :, query, : query + 1], sink=0
            )
            sums["total"] += split.total
            sums["sink"] += split.sink
            sums["content"] += split.content
            count += 1
    heads = result.table[
        (result.table["pair_kind"] == "consecutive")
        & (result.table["pair_from"] == 0)
        & (result.table["level"] == "head")
    ].sort_values(["layer", "head"])
    assert (heads["n_rows"] == count).all()
    for name, column in (
        ("total", "delta_entropy"),
        ("sink", "delta_sink"),
        ("content", "delta_content"),
    ):
        expected = (sums[name] / count).reshape(-1)
        np.testing.assert_allclose(heads[column].to_numpy(), expected, rtol=0, atol=2e-6)


# --- the Shapley share and the range of the one-sided orderings ----------------------------

SINK = [0, 1]  # two sink keys: the within-sink entropy moves too


def rows_of_state(rng, shape, n_keys, sink_alpha):
    """Probability rows ``shape + (key,)``: a Dirichlet draw, the sink keys weighted."""
    alpha = np.full(n_keys, 0.8)
    alpha[SINK] = sink_alpha
    return rng.dirichlet(alpha, size=shape)


def stats_of(p, step, has_content):
    """A checkpoint's statistics computed here from its rows with scipy: ``s``, ``H(p)``,
    ``H(q)`` (``q`` the content keys renormalised)."""
    content = [j for j in range(p.shape[-1]) if j not in SINK]
    s = p[..., SINK].sum(-1)
    q = p[..., content] / (1.0 - s)[..., None]
    positions = tuple(np.asarray(SINK) for _ in range(p.shape[0]))
    return CheckpointStats(
        step,
        f"step{step}",
        s,
        scipy.stats.entropy(p, axis=-1),
        scipy.stats.entropy(q, axis=-1),
        np.zeros(p.shape[:-1]),
        has_content,
        positions,
    )


def mixed(sink_of, content_of):
    """The row with ``sink_of``'s sink keys and ``content_of``'s content composition."""
    content = [j for j in range(sink_of.shape[-1]) if j not in SINK]
    out = np.empty_like(sink_of)
    out[..., SINK] = sink_of[..., SINK]
    q = content_of[..., content] / content_of[..., content].sum(-1, keepdims=True)
    out[..., content] = (1.0 - sink_of[..., SINK].sum(-1))[..., None] * q
    return out


@pytest.mark.parametrize("seed", range(3))
def test_the_orderings_are_the_entropies_of_the_mixed_states(seed):
    rng = np.random.default_rng(seed)
    shape = (2, 2, 3, 5)  # (doc, layer, head, query)
    p0 = rows_of_state(rng, shape, 7, 1.0)
    p1 = rows_of_state(rng, shape, 7, 4.0)  # a sink grows, on average
    has = rng.random(shape) > 0.15  # some rows left out
    table, *_ = series_tables(
        [stats_of(p0, 0, has), stats_of(p1, 8, has)], "synthetic", DEFAULT_SHARE_ATOL
    )
    h = lambda p: scipy.stats.entropy(p, axis=-1)  # noqa: E731
    h00, h11 = h(p0), h(p1)
    h10, h01 = h(mixed(p1, p0)), h(mixed(p0, p1))  # (sink of, content of)
    # Independent of the module: each ordering's sink part is an entropy difference of states.
    parts = {
        "delta_entropy": h11 - h00,
        "delta_sink_sink_first": h10 - h00,  # move the sink, then the content
        "delta_sink_content_first": h11 - h01,  # move the content, then the sink
        "delta_sink": ((h10 - h00) + (h11 - h01)) / 2,  # the Shapley value of the sink
    }
    pairs = table[table["pair_kind"] == "consecutive"]
    selections = [("model", None, None, np.ones((2, 3), bool))]
    selections += [
        ("layer", layer, None, np.eye(2, dtype=bool)[layer][:, None].repeat(3, 1))
        for layer in range(2)
    ]
    selections += [
        ("head", layer, head, np.outer(np.eye(2, dtype=bool)[layer], np.eye(3, dtype=bool)[head]))
        for layer in range(2)
        for head in range(3)
    ]
    for level, layer, head, heads in selections:
        row = pairs[
            (pairs["level"] == level)
            & (pairs["layer"].isna() if layer is None else pairs["layer"] == layer)
            & (pairs["head"].isna() if head is None else pairs["head"] == head)
        ].iloc[0]
        used = has & heads[None, :, :, None]
        assert row["n_rows"] == int(used.sum())
        sums = {name: float(value[used].sum()) for name, value in parts.items()}
        for name, total in sums.items():
            assert row[name] == pytest.approx(total / used.sum(), rel=1e-9, abs=1e-13), name
        shares = sorted(
            [
                sums["delta_sink_sink_first"] / sums["delta_entropy"],
                sums["delta_sink_content_first"] / sums["delta_entropy"],
            ]
        )
        assert float(row["sink_share_low"]) == pytest.approx(shares[0], rel=1e-9)
        assert float(row["sink_share_high"]) == pytest.approx(shares[1], rel=1e-9)
        shapley = sums["delta_sink"] / sums["delta_entropy"]
        assert float(row["sink_share"]) == pytest.approx(shapley, rel=1e-9)
        assert shares[0] - 1e-12 <= float(row["sink_share"]) <= shares[1] + 1e-12


def test_the_shapley_share_lies_in_its_range_on_a_model_series(series):
    _, _, result = series
    shares = result.table.dropna(subset=["sink_share"])
    assert len(shares)
    low, high = shares["sink_share_low"].astype(float), shares["sink_share_high"].astype(float)
    share = shares["sink_share"].astype(float)
    assert (low <= share + 1e-12).all() and (share <= high + 1e-12).all()
    assert (low < high).any()  # the orderings differ: the range says something


def test_an_unchanged_model_has_an_undefined_share():
    pts = points(2)
    model = neox(0)
    result = collapse(pts, windows(2), {p.spec: model for p in pts})
    model_row = result.table[result.table["level"] == "model"].iloc[0]
    assert model_row["delta_entropy"] == 0.0
    assert model_row["sink_share"] is pd.NA
    assert model_row["sink_share_low"] is pd.NA and model_row["sink_share_high"] is pd.NA
    # the rounding of the two mean entropies: u = 2**-24 (float32) times (n + 2) times
    # their sum plus log n, n = 14 the longest window (the most keys a row sees)
    bound = 2.0**-24 * 16 * (model_row["entropy_from"] + model_row["entropy_to"] + math.log(14))
    assert model_row["sink_share_note"] == (
        f"|delta_entropy| is within its float32 rounding {bound:.2g} nats "
        "(u (n + 2) (H before + H after + log n), n = 14 keys): share undefined"
    )
    # a change of 0 lies within its rounding of the null bound: another run may measure it
    assert result.table["share_edge"].all() and result.table["note_edge"].all()
    assert result.summary["first_last"]["sink_share"] is None
    assert result.table["sink_share"].isna().all()


def constant_stats(step, entropy, content_entropy, sink_mass, shape=(2, 1, 2, 3)):
    """A checkpoint whose every row has the given statistics."""
    full = lambda v: np.full(shape, float(v))  # noqa: E731
    return CheckpointStats(
        step,
        f"step{step}",
        full(sink_mass),
        full(entropy),
        full(content_entropy),
        np.zeros(shape),
        np.ones(shape, bool),
        tuple(np.asarray([0]) for _ in range(shape[0])),
    )


#: u (n + 2) (M + log n) by hand: n = 3 positions, M the magnitudes summed (nats).
def by_hand(*magnitudes: float, n: int = 3) -> float:
    return 2.0**-24 * (n + 2) * (sum(abs(m) for m in magnitudes) + math.log(n))


@pytest.mark.parametrize(
    ("times", "null", "edge"),
    [(0.5, True, True), (0.99, True, True), (1.5, False, True), (2.5, False, False),
     (1e4, False, False)],
)  # fmt: skip
def test_a_change_within_its_float32_rounding_has_no_share(times, null, edge):
    # H = 3 nats before, H + delta after, windows of 3 positions: the rounding of the mean
    # change is 2**-24 * (3 + 2) * (6 + delta + log 3) = 2.1e-6 nats; it lies on the edge
    # of that null bound where |delta| <= 2 bounds (every null share included)
    delta = -times * by_hand(3.0, 3.0)
    a = constant_stats(0, 3.0, 3.5, 0.2)
    b = constant_stats(8, 3.0 + delta, 3.5 + delta / 4, 0.2)  # content part: 0.8 * delta / 4
    table, _, pairs, first_last = series_tables([a, b], "synthetic", DEFAULT_SHARE_ATOL)
    bound = by_hand(3.0, 3.0 + delta)
    assert (abs(delta) <= bound) == null and (abs(delta) <= 2 * bound) == edge
    shares = table[["sink_share", "sink_share_low", "sink_share_high"]]
    assert (table["share_edge"] == edge).all()
    assert first_last["share_edge"] is edge
    if null:
        assert shares.isna().all().all()
        assert table["sink_share_note"].str.contains("within its float32 rounding").all()
        assert first_last["sink_share"] is None and pairs[0]["sink_share_low"] is None
        return
    # the sink part is delta - 0.8 * delta / 4 = 0.8 delta: a share of 80%, to rounding
    assert table["sink_share"].astype(float).to_numpy() == pytest.approx(0.8, rel=1e-6)
    assert first_last["sink_share"] == pytest.approx(0.8, rel=1e-6)
    # the parts' roundings: the content part's of the content entropies, the sink part's
    # of all four means (3.5 nats each); each part's sign is resolved beyond its rounding
    content, sink = 0.2 * abs(delta), 0.8 * abs(delta)
    e_content = by_hand(3.5, 3.5 + delta / 4)
    e_sink = by_hand(3.0, 3.0 + delta, 3.5, 3.5 + delta / 4)
    unresolved = [
        p for p, x, e in (("sink", sink, e_sink), ("content", content, e_content)) if x <= e
    ]
    # 1.5 bounds: both parts within their roundings; 2.5: the content part (0.5 of the
    # change's bound against 1.14 of it); 1e4: neither
    assert unresolved == {1.5: ["sink", "content"], 2.5: ["content"], 1e4: []}[times]
    several = len(unresolved) > 1
    expected = (
        f"the {' and '.join(unresolved)} part{'s lie' if several else ' lies'} within "
        f"{'their' if several else 'its'} float32 rounding of 0: whether the share lies in "
        "[0, 1] is not resolved"
        if unresolved
        else ""
    )
    assert (table["sink_share_note"] == expected).all()
    near = content <= 2 * e_content or sink <= 2 * e_sink
    assert (table["note_edge"] == (edge or near)).all()


def test_share_atol_still_nulls_a_change_of_zero_entropies():
    # rows of one key at both ends: no entropy and log 1 = 0, so no rounding; share_atol
    # decides, and a change of 0 lies far from it (not on its edge)
    shape = (2, 1, 2, 1)
    a, b = constant_stats(0, 0.0, 0.0, 1.0, shape), constant_stats(8, 0.0, 0.0, 1.0, shape)
    table, *_ = series_tables([a, b], "synthetic", DEFAULT_SHARE_ATOL)
    note = "|delta_entropy| <= share_atol 1e-09 nats: share undefined"
    assert (table["sink_share_note"] == note).all()
    assert not table["share_edge"].any() and not table["note_edge"].any()


OPPOSITE = "sink and content parts have opposite signs: share outside [0, 1]"


def test_opposite_parts_are_noted():
    pts = points(2)
    models = {pts[0].spec: neox(0), pts[1].spec: neox(1)}
    result = collapse(pts, windows(), models)
    seen = set()
    for _, row in result.table.iterrows():
        # each rounding by hand: u (n + 2) (M + log n), n = 14 keys
        rounding = lambda *cols: 2.0**-24 * 16 * (sum(row[c] for c in cols) + math.log(14))  # noqa: B023, E731
        e_sink = rounding(
            "entropy_from", "entropy_to", "content_entropy_from", "content_entropy_to"
        )
        e_content = rounding("content_entropy_from", "content_entropy_to")
        unresolved = [
            part
            for part, e in (("sink", e_sink), ("content", e_content))
            if abs(row[f"delta_{part}"]) <= e
        ]
        if abs(row["delta_entropy"]) <= rounding("entropy_from", "entropy_to"):
            kind = "null"  # a change of the last bits: no share at all
            assert (
                row["sink_share"] is pd.NA
                and "within its float32 rounding" in row["sink_share_note"]
            )
        elif unresolved:
            kind = "unresolved"
            assert row["sink_share_note"].startswith(f"the {' and '.join(unresolved)} part")
            assert row["note_edge"]
        elif row["delta_sink"] * row["delta_content"] < 0:
            kind = "opposite"
            assert row["sink_share_note"] == OPPOSITE
        else:
            kind = "same"
            assert row["sink_share_note"] == ""
        seen.add(kind)
    # this tiny model's opposite parts all have a sink part within its rounding: their sign
    # is the last bits', and the note says so instead of "opposite signs"
    assert {"null", "unresolved", "same"} <= seen
    # a sink part of -0.3 nats and a content part of +0.1 (0.8 * 0.125): a share of 1.5
    a, b = constant_stats(0, 3.0, 3.5, 0.2), constant_stats(8, 2.8, 3.625, 0.2)
    table, *_ = series_tables([a, b], "synthetic", DEFAULT_SHARE_ATOL)
    assert table["sink_share"].astype(float).to_numpy() == pytest.approx(1.5, rel=1e-9)
    assert (table["sink_share_note"] == OPPOSITE).all() and not table["note_edge"].any()


def test_summary_is_json_ready_and_the_table_drawn(series, tmp_path):
    from attncoda.experiments.collapse._figure import collapse_figure

    pts, _, result = series
    summary = json.loads(json.dumps(result.summary, allow_nan=False))
    assert len(summary["pairs"]) == 2
    assert summary["points"] == [{"step": p.step, "label": p.label, "spec": p.spec} for p in pts]
    assert summary["n_windows"] == 4 and summary["n_tokens"] == 9 + 14 + 6 + 11
    figure = collapse_figure(result.table, tmp_path / "collapse.png", model="tiny")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def raises(message: str):
    return pytest.raises(AttncodaError, match=f"^{re.escape(message)}$")


def test_errors():
    pts = points(2)
    same = {p.spec: neox(0) for p in pts}
    stats = [checkpoint_stats(same[p.spec], None, windows(), p) for p in pts]
    with raises("collapse needs at least 2 checkpoints' statistics, got 1"):
        collapse_from_stats(stats[:1], windows(), points=pts[:1], model="tiny")
    with raises("windows_ids is empty: give at least one window of token ids"):
        collapse_from_stats(stats, [], points=pts, model="tiny")
    with raises(
        "window 1 must be a sequence of at least 2 token ids (a row needs a key besides the "
        "sink to have content), got [5]"
    ):
        checkpoint_stats(same["ckpt0"], None, [[1, 2, 3], [5]], pts[0])
    with raises("share_atol must be a non-negative number, got -1.0"):
        collapse_from_stats(stats, windows(), points=pts, model="tiny", share_atol=-1.0)
    with raises(
        "checkpoint step0 has a vocabulary of 120 tokens, but the windows hold token id 125: "
        "make the windows with this series' tokenizer"
    ):
        checkpoint_stats(same["ckpt0"], None, [[1, 125]], pts[0])
    with raises(
        "checkpoint step16 has 3 layers x 4 heads, step0 has 2 x 4: a series must keep its "
        "architecture"
    ):
        collapse(pts, windows(), {"ckpt0": neox(0), "ckpt16": neox(0, 3)})


def test_checkpoint_stats_capture_by_the_method_asked():
    pt = points(1)[0]
    model = neox(0)
    fast = checkpoint_stats(model, None, windows(), pt, method="fast", kernel="sdpa", seed=1)
    exact = checkpoint_stats(model, None, windows(), pt)
    # the reference: a capture made apart by the fast method
    cap = capture_windows(
        model, windows(), record_rows="none", method="fast", kernel="sdpa", seed=1
    )
    for name in ("sink_mass", "entropy", "content_entropy"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(cap, name), err_msg=name)
        # the exact path's: float32 rounding apart (tiny model, 14 tokens at most)
        np.testing.assert_allclose(
            getattr(exact, name), getattr(fast, name), rtol=0, atol=1e-5, err_msg=name
        )
    assert not np.array_equal(exact.entropy, fast.entropy, equal_nan=True)


def test_moving_sink_keys_are_refused():
    shape = (1, 1, 1, 3)
    zeros = np.zeros(shape)

    def stats(label, sink):
        return CheckpointStats(0, label, zeros, zeros, zeros, zeros, zeros > 0, (np.asarray(sink),))

    with raises(
        "the sink keys of window 0 differ between step0 ([0]) and step8 ([0, 2]): the split "
        "needs the same sink keys at every checkpoint; use sink='first' or explicit positions"
    ):
        check_same_layout(stats("step0", [0]), stats("step8", [0, 2]))


def test_the_cli_summary_says_why_a_share_is_null_and_that_it_is_on_the_edge():
    from attncoda.experiments.collapse._summary import summary

    a = constant_stats(0, 3.0, 3.5, 0.2)
    b = constant_stats(8, 3.0 + 1e-8, 3.5, 0.2)  # 1e-8 nats: within 2.1e-6
    table, *_ = series_tables([a, b], "synthetic", DEFAULT_SHARE_ATOL)
    printed = summary({"collapse": table}, lambda *_: {}, "first")
    assert "sink share n/a (|delta_entropy| is within its float32 rounding" in printed
    assert "on the edge of its null bound: another run may measure it" in printed
    # 1.5 bounds: measured here, and on the edge
    b = constant_stats(8, 3.0 - 1.5 * by_hand(3.0, 3.0), 3.5, 0.2)
    table, *_ = series_tables([a, b], "synthetic", DEFAULT_SHARE_ATOL)
    printed = summary({"collapse": table}, lambda *_: {}, "first")
    assert "on the edge of its null bound: another run may leave it undefined" in printed
    # far from it, both parts too (-0.1 and -0.4 nats): no edge
    b = constant_stats(8, 2.5, 3.0, 0.2)
    table, *_ = series_tables([a, b], "synthetic", DEFAULT_SHARE_ATOL)
    assert "edge" not in summary({"collapse": table}, lambda *_: {}, "first")


# --- how two runs' tables are held: the rules, the null bound and its edge ----------------


def pair_table(*changes: float) -> pd.DataFrame:
    """The pair table of one checkpoint to another per change of H (nats), H = 3 and H(q) =
    3.5 before, windows of 3 positions (every level's row the same)."""
    a = constant_stats(0, 3.0, 3.5, 0.2)
    tables = [
        series_tables(
            [a, constant_stats(8, 3.0 + c, 3.5 + c / 4, 0.2)], "synthetic", DEFAULT_SHARE_ATOL
        )[0].head(1)
        for c in changes
    ]
    return pd.concat(tables, ignore_index=True)


def held(table: str = "collapse"):
    from attncoda.experiments.collapse import EXPERIMENT

    return EXPERIMENT.held[table]


def test_every_column_of_both_tables_declares_its_rule():
    from attncoda.experiments.contract import RowStatistic, Same, Share, Verdict

    for table, columns in (("collapse", COLUMNS), ("collapse_checkpoints", CHECKPOINT_COLUMNS)):
        rules = held(table)
        assert set(rules) == {"revision", *columns}, table
    rules = held()
    floats = [c for c in COLUMNS if c.startswith(("mean_", "entropy", "content_", "delta_"))]
    assert len(floats) == 11 and not any(isinstance(rules[c], Same) for c in floats)
    assert rules["delta_entropy"] == RowStatistic(magnitude=("entropy_from", "entropy_to"))
    assert rules["sink_share"] == Share(("delta_sink",), "delta_entropy", edge="share_edge")
    assert rules["sink_share_note"] == Verdict("note_edge")
    assert held("collapse_checkpoints")["sink_balance"] == RowStatistic()


def test_the_null_bound_is_the_allowance_of_delta_entropy():
    # One formula: a change moved by just under its null bound (the bound of the reference's
    # row) is the same evidence, by just over it is not.
    from attncoda.experiments.contract import compare_frames

    ref = pair_table(-1e-3)
    bound = by_hand(3.0, 3.0 - 1e-3)
    for times, same in ((0.99, True), (1.01, False)):
        moved = ref.assign(delta_entropy=ref["delta_entropy"] + times * bound)
        got = compare_frames("collapse", moved, ref, {"delta_entropy": held()["delta_entropy"]})
        assert got.same is same, times
        assert got.worst == pytest.approx(times, rel=1e-6)
    # each part by the means it is made of: the content part of the two content entropies
    e_content = by_hand(3.5, 3.5 - 1e-3 / 4)
    for times, same in ((0.99, True), (1.01, False)):
        moved = ref.assign(delta_content=ref["delta_content"] + times * e_content)
        got = compare_frames("collapse", moved, ref, {"delta_content": held()["delta_content"]})
        assert got.same is same, times


def test_a_share_null_on_one_side_is_the_same_evidence_only_on_its_edge():
    from attncoda.experiments.contract import compare_frames

    bound = by_hand(3.0, 3.0)
    # measured in the reference, 1.5 and 30 bounds away from 0 (its parts, 0.2 and 0.8 of
    # the change, far from 0 too); null in the run
    ref = pair_table(-1.5 * bound, -30 * bound)
    assert ref["share_edge"].tolist() == [True, False]
    assert ref["note_edge"].tolist() == [True, False]
    run = ref.copy()
    for column in ("sink_share", "sink_share_low", "sink_share_high"):
        run[column] = pd.array([None, None], dtype="Float64")
    run["sink_share_note"] = "|delta_entropy| is within its float32 rounding"
    got = compare_frames("collapse", run, ref, held())
    assert {(c.row, c.column) for c in got.cells} == {
        (1, "sink_share"),
        (1, "sink_share_low"),
        (1, "sink_share_high"),
        (1, "sink_share_note"),
    }
    # the other way round: null in the reference (on its edge, as every null is), measured
    # in the run
    assert compare_frames("collapse", ref.iloc[:1], run.iloc[:1], held()).same


def test_a_note_changed_off_its_edge_differs():
    from attncoda.experiments.contract import compare_frames

    ref = pair_table(-0.2)  # parts -0.16 and -0.04 nats: far from 0, no edge
    assert not ref["note_edge"].any() and ref["sink_share_note"].tolist() == [""]
    run = ref.assign(sink_share_note=[OPPOSITE])
    (cell,) = compare_frames("collapse", run, ref, held()).cells
    assert cell.column == "sink_share_note"
    # on its edge (the reference's row says so), either note is the same evidence
    edge = {"note_edge": [True]}
    assert compare_frames("collapse", run.assign(**edge), ref.assign(**edge), held()).same


def test_the_share_is_held_through_its_parts():
    from attncoda.experiments.contract import compare_frames

    ref = pair_table(-0.2)
    # the change moved by 1e-6 nats and its sink part not: the share moves by 0.8e-6 / 0.2
    moved = ref.assign(delta_entropy=ref["delta_entropy"] - 1e-6)
    moved["sink_share"] = pd.array(moved["delta_sink"] / moved["delta_entropy"], dtype="Float64")
    assert compare_frames("collapse", moved, ref, held()).same
    # a share moved without its parts is not
    moved = ref.assign(sink_share=pd.array(ref["sink_share"] + 1e-9, dtype="Float64"))
    (cell,) = compare_frames("collapse", moved, ref, held()).cells
    assert cell.column == "sink_share"


def test_the_section_says_which_shares_lie_on_their_edge():
    from attncoda.experiments.collapse._section import collapse_section
    from attncoda.experiments.view import Context

    bound = by_hand(3.0, 3.0)
    table = pair_table(-0.5 * bound, -1.5 * bound, -0.2).assign(revision="-")
    page = collapse_section(Context(frames={"collapse": table}, sink="first"))
    assert page.count("on the edge of its null bound: another run may measure this share") == 1
    assert page.count("another run may leave this share undefined") == 1
