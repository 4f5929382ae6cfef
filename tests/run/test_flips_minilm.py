"""Acceptance: flips on the real MiniLM equal an independent computation.

The independent side reads attention straight from transformers' eager
``output_attentions``, computes every row metric with plain numpy written here, and counts
flips with plain Python loops over triplets. Nothing of attncoda's capture or coda is used
there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

pytestmark = pytest.mark.slow

METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")


def _entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(-1)


def _metric(name, p, q):
    """Row metric between p (.., K) and q (.., K), both closed rows."""
    if name == "cosine":
        return 1 - (p * q).sum(-1) / (np.linalg.norm(p, axis=-1) * np.linalg.norm(q, axis=-1))
    if name == "jsd":
        return _entropy((p + q) / 2) - (_entropy(p) + _entropy(q)) / 2
    if name == "entropy_gap":
        return np.abs(_entropy(p) - _entropy(q))
    if name == "hellinger":
        return np.sqrt(((np.sqrt(p) - np.sqrt(q)) ** 2).sum(-1) / 2)
    return np.abs(p - q).sum(-1) / 2


def _distances(attentions, name, convention):
    """D[A, B]: mean over every (document, query) of the row metric; heads layer-major."""
    total, count = None, 0
    for probs in attentions:  # (heads, L, L) float64, one document
        rows = probs if convention == "keep" else probs[:, :, 1:]
        rows = rows / rows.sum(-1, keepdims=True)
        n = rows.shape[0]
        d = np.zeros((n, n))
        for a in range(n):
            d[a] = _metric(name, rows[a][None], rows).sum(-1)
        total = d if total is None else total + d
        count += rows.shape[1]
    return total / count


def _count(d_keep, d_drop, tol):
    """Plain loops over every triplet (A; B, C), B < C, A not in {B, C}."""
    n = d_keep.shape[0]
    t_keep, t_drop = tol * np.abs(d_keep).max(), tol * np.abs(d_drop).max()
    d_keep, d_drop = d_keep.tolist(), d_drop.tolist()  # Python floats: the same values, faster
    triplets = ties = flips = 0
    for a in range(n):
        for b, c in itertools.combinations(range(n), 2):
            if a in (b, c):
                continue
            triplets += 1
            gk = d_keep[a][c] - d_keep[a][b]
            gd = d_drop[a][c] - d_drop[a][b]
            if abs(gk) <= t_keep or abs(gd) <= t_drop:
                ties += 1
            elif (gk > 0) != (gd > 0):
                flips += 1
    return triplets, ties, flips


def test_minilm_flips_equal_an_independent_count(tmp_path):
    from attncoda.experiments.flips import CAPTURE_TOL
    from attncoda.models.load import load_model
    from attncoda.run.fit import model_rows
    from attncoda.run.reproduce import run_experiment
    from attncoda.run.windows import corpus_windows

    # 4 windows of 128 tokens: 512 rows per head, 178,920 triplets per metric.
    settings = {"flips": {"n_boot": 10}, "rows": {"docs": 4, "max_tokens": 128}}
    run_experiment("flips", ["minilm"], tmp_path, settings=settings, progress=False)
    table = pd.read_parquet(tmp_path / "tables" / "flips.parquet").set_index("metric")

    model, tokenizer, info = load_model("minilm")
    rows = model_rows("minilm", rows=settings["rows"], loaded=(model, tokenizer, info))

    windows, _ = corpus_windows(tokenizer, text=None, max_tokens=128, docs=4)
    attentions = []
    with torch.no_grad():
        for w in windows:
            ids = torch.tensor([w.input_ids])
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
            stacked = torch.cat(out.attentions, dim=1)[0]  # (layers*heads, L, L)
            attentions.append(stacked.double().numpy())
    assert sum(a.shape[1] for a in attentions) == sum(d.logp.shape[1] for d in rows.docs)
    for name in METRICS:
        d_keep = _distances(attentions, name, "keep")
        d_drop = _distances(attentions, name, "drop")
        triplets, ties, flips = _count(d_keep, d_drop, CAPTURE_TOL)
        got = table.loc[name]
        assert (got["n_triplets"], got["n_ties"], got["flips"]) == (triplets, ties, flips), name
        assert got["flip_rate"] == flips / (triplets - ties)
