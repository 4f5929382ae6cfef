"""Gu et al.'s sink rate: against a hand computation, and against their own formula
(``sail-sg/Attention-Sink``, ``compute_attention_sink``) applied to transformers' eager
attentions of SmolLM2."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import attncoda as ac
from attncoda import AttncodaError
from attncoda.experiments.sink_rate import EXPERIMENT, score_rounding

# One layer, two heads; causal rows (zeros above the diagonal).
DOC_A = np.array(
    [
        [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]],
        [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.8, 0.1, 0.1]],
    ]
)[None]
DOC_B = np.array([[[1.0, 0.0], [0.2, 0.8]], [[1.0, 0.0], [0.7, 0.3]]])[None]


def test_the_rates_and_scores_are_those_computed_by_hand():
    cap = ac.from_attentions([DOC_A, DOC_B])
    result = ac.sink_rate(cap, positions=(0, 1, 2, 7))
    table = result.tables["sink_rate"].set_index("position")
    # Scores (the mean over the queries that see the key, T - k of them):
    #   A: head 0 (1 + .5 + .2)/3 = .567, (.5 + .3)/2 = .4, .5; head 1 .9, .1, .1
    #   B: head 0 (1 + .2)/2 = .6, .8; head 1 .85, .3 (not above 0.3)
    assert table.loc[0, "sink_rate"] == 100.0 and table.loc[0, "n_triples"] == 4
    assert table.loc[1, "sink_rate"] == 50.0
    assert table.loc[2, "sink_rate"] == 50.0 and table.loc[2, "n_windows"] == 1
    assert np.isnan(table.loc[7, "sink_rate"]) and table.loc[7, "n_triples"] == 0
    heads = result.tables["sink_rate_heads"].set_index(["head", "position"])
    assert heads.loc[(0, 0), "score"] == pytest.approx(((1.7 / 3) + 0.6) / 2, abs=1e-7)
    assert heads.loc[(1, 1), "score"] == pytest.approx((0.1 + 0.3) / 2, abs=1e-7)
    assert heads.loc[(1, 1), "above"] == 0.0 and heads.loc[(0, 1), "above"] == 100.0


def test_a_bidirectional_key_is_scored_over_every_query():
    rows = np.array([[[0.6, 0.4], [0.5, 0.5]]])[None]  # one layer, one head, every key seen
    result = ac.sink_rate(ac.from_attentions(rows), epsilon=0.5, positions=(0, 1))
    heads = result.tables["sink_rate_heads"].set_index("position")
    assert heads.loc[0, "score"] == pytest.approx(0.55, abs=1e-7)  # (.6 + .5) / 2, not / 2 - 0
    assert heads.loc[1, "score"] == pytest.approx(0.45, abs=1e-7)
    assert list(result.tables["sink_rate"]["sink_rate"]) == [100.0, 0.0]


U = 2.0**-24


def test_the_score_rounding_is_the_row_statistics_by_hand():
    # u (n + 2) (score + log n): windows of 64 keys at epsilon, and one key (no log)
    got = score_rounding(np.array([0.3, 1.0]), np.array([64, 1]))
    assert got.tolist() == [U * 66 * (0.3 + np.log(64)), U * 3 * 1.0]


def near_epsilon(offsets, n_keys=4, epsilon=0.3):
    """One window per list of offsets, one head per offset, every key seen by every query
    (bidirectional): every row gives key 0 the mass ``epsilon + offset``, so its score is
    that (the other keys share the rest, far from epsilon)."""
    docs = []
    for window in offsets:
        heads = []
        for offset in window:
            row = np.full(n_keys, (1.0 - epsilon - offset) / (n_keys - 1))
            row[0] = epsilon + offset
            heads.append(np.tile(row, (n_keys, 1)))
        docs.append(np.stack(heads)[None])  # (layer, head, query, key)
    return ac.from_attentions(docs)


def test_the_fragile_triples_are_those_within_rounding_of_epsilon():
    # e = u (4 + 2) (0.3 + log 4) = 6.0e-7 at epsilon; offsets in units of it, away from the
    # band's edges (1.2e-7 at least) by more than the float32 probabilities and their logs
    # move a score (u 0.3 (1 + |log 0.3|) = 4e-8)
    e = U * 6 * (0.3 + np.log(4))
    offsets = [
        [0.0, 0.5 * e, -0.5 * e, 3 * e, -3 * e, 0.1],
        [0.8 * e, -2 * e, 0.2, -0.2, 0.0, 5 * e],
    ]
    result = ac.sink_rate(near_epsilon(offsets), positions=(0,))
    table = result.tables["sink_rate"].iloc[0]
    # a plain loop over the triples, in float64 from the offsets themselves
    fragile = sum(abs(o) <= e for window in offsets for o in window)
    above = sum(o > 0 for window in offsets for o in window)
    assert (table["n_fragile"], table["n_triples"]) == (fragile, 12) == (5, 12)
    assert table["rate_rounding"] == 100 * 5 / 12
    # the rate is a float64 count within its stated rounding: the triples at exactly
    # epsilon go either way
    assert abs(table["sink_rate"] - 100 * above / 12) <= table["rate_rounding"]
    heads = result.tables["sink_rate_heads"]
    per_head = [sum(abs(w[h]) <= e for w in offsets) for h in range(6)]
    assert heads["n_fragile"].tolist() == per_head == [2, 1, 1, 0, 1, 0]
    assert heads["above_rounding"].tolist() == [100 * k / 2 for k in per_head]
    assert (heads["n_keys"] == 4).all() and (heads["n_windows"] == 2).all()


def test_a_position_no_window_reaches_states_no_rounding():
    result = ac.sink_rate(ac.from_attentions([DOC_A, DOC_B]), positions=(2, 7))
    table = result.tables["sink_rate"].set_index("position")
    assert table.loc[2, "n_windows"] == 1 and table.loc[2, "n_fragile"] == 0
    assert table.loc[7, "n_fragile"] == 0 and np.isnan(table.loc[7, "rate_rounding"])
    heads = result.tables["sink_rate_heads"].set_index("position").loc[7]
    assert (heads["n_windows"] == 0).all() and (heads["n_keys"] == 0).all()
    assert heads["above_rounding"].isna().all() and (heads["n_fragile"] == 0).all()
    # the causal windows of 3 and 2 tokens: the most keys a row of them sees
    reached = result.tables["sink_rate_heads"].set_index("position").loc[2]
    assert (reached["n_keys"] == 3).all()


# --- how two runs' tables are held ---------------------------------------------------------


def held(table):
    return EXPERIMENT.held[table]


def rates():
    """The sink rate table of the fragile case above, with the run's columns."""
    e = U * 6 * (0.3 + np.log(4))
    result = ac.sink_rate(near_epsilon([[0.5 * e, 0.1, -0.1, 0.2]] * 25), positions=(0,))
    return {n: t.assign(revision="-", family="f") for n, t in result.tables.items()}


def test_every_column_declares_its_rule():
    from attncoda.experiments.contract import Bound, RowStatistic, Same, Stated

    for name, table in rates().items():
        assert set(held(name)) == set(table.columns), name
        floats = [c for c in table.columns if table[c].dtype == np.float64]
        same = [c for c in floats if isinstance(held(name)[c], Same)]
        assert same == {"sink_rate": ["epsilon"]}.get(name, [])
    assert held("sink_rate")["sink_rate"] == Stated("rate_rounding")
    assert held("sink_rate")["rate_rounding"] == Bound(per="n_triples", scale=100.0)
    assert held("sink_rate_heads")["above"] == Stated("above_rounding")
    assert held("sink_rate_heads")["score"] == RowStatistic()
    assert held("sink_rate_heads")["n_fragile"] == Bound()


def compared(name, **moved):
    from attncoda.experiments.contract import compare_frames

    ref = rates()[name]
    return compare_frames(name, ref.assign(**moved), ref, held(name))


def test_a_sink_rate_is_held_to_its_stated_rounding():
    ref = rates()["sink_rate"].iloc[0]
    assert ref["n_fragile"] == 25 and ref["rate_rounding"] == 25.0  # of 100 triples
    for times, same in ((0.99, True), (1.01, False)):
        got = compared("sink_rate", sink_rate=ref["sink_rate"] + times * ref["rate_rounding"])
        assert got.same is same and got.worst_column == "sink_rate", times
    heads = rates()["sink_rate_heads"]
    moved = heads["above"] + 1.01 * heads["above_rounding"]
    assert [c.row for c in compared("sink_rate_heads", above=moved).cells] == [0]


def test_an_inflated_fragile_count_or_rounding_differs():
    # 25 fragile triples: 1% of them and 3 more (3.25) may move, 4 may not
    assert compared("sink_rate", n_fragile=28).same
    (cell,) = compared("sink_rate", n_fragile=29).cells
    assert (cell.column, cell.difference, cell.allowed) == ("n_fragile", 4, 3.25)
    # the rounding in points, as many items of 1 point each (100 triples): 3.25 points
    assert compared("sink_rate", rate_rounding=28.0).same
    assert not compared("sink_rate", rate_rounding=29.0).same
    assert not compared(
        "sink_rate_heads", n_fragile=rates()["sink_rate_heads"]["n_fragile"] + 4
    ).same


def test_a_mean_score_is_held_to_its_rounding():
    heads = rates()["sink_rate_heads"]
    bound = score_rounding(heads["score"], heads["n_keys"])
    assert compared("sink_rate_heads", score=heads["score"] + 0.99 * bound).same
    assert not compared("sink_rate_heads", score=heads["score"] + 1.01 * bound).same


def test_the_section_and_the_summary_state_the_fragile_triples():
    from attncoda.experiments.sink_rate._section import sink_rate_section
    from attncoda.experiments.sink_rate._summary import summary
    from attncoda.experiments.view import Context

    tables = rates()
    page = sink_rate_section(Context(frames=tables, sink="first"))
    assert "±25.00% (25 within rounding of ε)" in page  # 25 of the 100 triples
    assert "±100.00% (25 within rounding of ε)" in page  # the 25 windows of head 0
    printed = summary(tables, lambda *_: {}, "first")
    assert "25 within rounding of epsilon (±25 points)" in printed


def test_sampled_rows_and_bad_settings_are_refused_by_name():
    rng = np.random.default_rng(0)
    logits = np.tril(rng.normal(size=(1, 1, 1, 130, 130))) + np.triu(
        np.full((130, 130), -np.inf), 1
    )
    long = ac.from_attentions(logits, kind="logits")  # 'auto' keeps 128 of the 130 rows
    with pytest.raises(AttncodaError, match="needs the row of every query of a window; got 128"):
        ac.sink_rate(long)
    cap = ac.from_attentions([DOC_A])
    with pytest.raises(AttncodaError, match="epsilon"):
        ac.sink_rate(cap, epsilon=0.0)
    with pytest.raises(AttncodaError, match="positions"):
        ac.sink_rate(cap, positions=(-1,))


@pytest.mark.slow
def test_the_rates_equal_gu_et_al_s_formula_on_eager_attentions(embedded_model, tmp_path):
    torch = pytest.importorskip("torch")
    from attncoda.cli import main
    from attncoda.run.captured import corpus_windows

    out = tmp_path / "run"
    assert main(["sink-rate", "smollm2", "--docs", "3", "--out", str(out)]) == 0
    table = pd.read_parquet(out / "tables" / "sink_rate.parquet").set_index("position")
    heads = pd.read_parquet(out / "tables" / "sink_rate_heads.parquet")
    settings = json.loads((out / "manifest.json").read_text())["config"]["settings"]
    assert settings["sink_rate"] == {
        "docs": 3,
        "max_tokens": 64,
        "epsilon": 0.3,
        "positions": [0, 1, 2],
    }
    assert 'id="sink_rate"' in (out / "report.html").read_text(encoding="utf-8")

    # Their formula (compute_attention_sink) on transformers' eager attentions of the same
    # windows: importance = (A / arange(T, 0, -1) over keys).sum(queries); > 0.3, mean, x100.
    model, tokenizer, _ = embedded_model("smollm2")
    found, _ = corpus_windows(tokenizer, text=None, max_tokens=64, docs=3)
    importance = []
    for window in found:
        ids = torch.as_tensor([list(window.input_ids)])
        with torch.no_grad():
            attentions = model(input_ids=ids, output_attentions=True).attentions
        scores = torch.cat(attentions, dim=0).double()  # (layer, head, query, key)
        n = scores.shape[-1]
        ratios = torch.arange(n, 0, -1)[None, None, None, :].expand_as(scores).to(scores)
        importance.append((scores / ratios).sum(dim=-2))  # (layer, head, key)
    theirs = torch.stack(importance)  # (window, layer, head, key)
    for k in (0, 1, 2):
        column = theirs[..., k]
        # float32 softmaxes of the same scores: no score sits within 1e-5 of epsilon
        assert not ((column - 0.3).abs() < 1e-5).any()
        assert table.loc[k, "sink_rate"] == pytest.approx(
            float((column > 0.3).double().mean() * 100), abs=1e-9
        )
        mean = column.mean(dim=0).numpy().ravel()  # layer-major, as the heads table
        ours = heads[heads["position"] == k].sort_values(["layer", "head"])["score"]
        np.testing.assert_allclose(ours.to_numpy(), mean, atol=1e-5)
    assert table.loc[0, "sink_rate"] > 50.0  # SmolLM2's first token is a sink in most heads
