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
