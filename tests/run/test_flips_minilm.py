"""Acceptance: flips on the real MiniLM equal an independent computation.

The independent side reads attention straight from transformers' eager
``output_attentions``, computes every row metric with plain numpy written here, and counts
flips with plain Python loops over triplets. Nothing of attncoda's capture or coda is used
there.

Both sides start from float32 attention, so their head distances agree to rounding, not bit
for bit, and a triplet whose gap sits within rounding of the tie tolerance may be a tie on one
side and decided on the other (on an AMD EPYC one ``tv`` triplet does). Such edge triplets are
told apart and allowed one by one; any other difference fails.
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


def _own(rows):
    """Each row's own quantities, computed once: ``(norm, entropy, sqrt)``, shapes (.., L)."""
    return np.linalg.norm(rows, axis=-1), _entropy(rows), np.sqrt(rows)


def _metric(name, p, q, own_p, own_q):
    """Row metric between p (.., K) and q (.., K), both closed rows (``own_*``: :func:`_own`)."""
    (norm_p, h_p, sqrt_p), (norm_q, h_q, sqrt_q) = own_p, own_q
    if name == "cosine":
        return 1 - (p * q).sum(-1) / (norm_p * norm_q)
    if name == "jsd":
        return _entropy((p + q) / 2) - (h_p + h_q) / 2
    if name == "entropy_gap":
        return np.abs(h_p - h_q)
    if name == "hellinger":
        return np.sqrt(((sqrt_p - sqrt_q) ** 2).sum(-1) / 2)
    return np.abs(p - q).sum(-1) / 2


def _distances(attentions, name, convention):
    """D[A, B]: mean over every (document, query) of the row metric; heads layer-major."""
    total, count = None, 0
    for probs in attentions:  # (heads, L, L) float64, one document
        rows = probs if convention == "keep" else probs[:, :, 1:]
        rows = rows / rows.sum(-1, keepdims=True)
        n = rows.shape[0]
        norms, entropies, roots = _own(rows)
        d = np.zeros((n, n))
        # Each metric is symmetric operand by operand (p * q, p + q, |p - q|, and sums of the
        # two rows' own quantities do not depend on the order): each pair is computed once.
        for a in range(n - 1):
            b = slice(a + 1, n)
            own_a = (norms[a][None], entropies[a][None], roots[a][None])
            d[a, b] = _metric(
                name, rows[a][None], rows[b], own_a, (norms[b], entropies[b], roots[b])
            ).sum(-1)
        d = d + d.T
        total = d if total is None else total + d
        count += rows.shape[1]
    return total / count


#: How far attncoda's head distances may sit from the float64 reference here, relative to
#: ``max|D|``: both sides start from float32 attention (transformers' eager softmax, attncoda's
#: own kernel) and the row metrics of float32 rows are good to a few float32 ulps (2**-23 is
#: 1.2e-7). Measured at most 2.6e-7 (cosine, hellinger) on an AMD EPYC; 1e-6 leaves a margin.
ROUNDING = 1e-6

TIE, FLIP, SAME = "tie", "flip", "same"


def _verdicts(d_keep, d_drop, tol):
    """Plain loops over every triplet (A; B, C), B < C, A not in {B, C}, in a fixed order.

    Returns one ``(verdict, keep gap, drop gap, keep tolerance, drop tolerance)`` per triplet,
    the verdict ``TIE`` (a gap within the tolerance under keep or drop), ``FLIP`` (decided, the
    signs differ) or ``SAME``.
    """
    n = d_keep.shape[0]
    t_keep, t_drop = tol * np.abs(d_keep).max(), tol * np.abs(d_drop).max()
    d_keep, d_drop = d_keep.tolist(), d_drop.tolist()  # Python floats: the same values, faster
    out = []
    for a in range(n):
        for b, c in itertools.combinations(range(n), 2):
            if a in (b, c):
                continue
            gk = d_keep[a][c] - d_keep[a][b]
            gd = d_drop[a][c] - d_drop[a][b]
            if abs(gk) <= t_keep or abs(gd) <= t_drop:
                verdict = TIE
            elif (gk > 0) != (gd > 0):
                verdict = FLIP
            else:
                verdict = SAME
            out.append((verdict, gk, gd, t_keep, t_drop))
    return out


def _counts(verdicts):
    """``(triplets, ties, flips)`` of a list of verdicts."""
    kinds = [v[0] for v in verdicts]
    return len(kinds), kinds.count(TIE), kinds.count(FLIP)


def _at_edge(triplet, scale):
    """Whether a triplet's keep or drop gap is within rounding of its tie tolerance.

    The gap is a difference of two distances, each within ``ROUNDING * max|D|`` of the other
    side's: rounding moves it by at most twice that.
    """
    _, gk, gd, t_keep, t_drop = triplet
    return (
        abs(abs(gk) - t_keep) <= 2 * ROUNDING * scale["keep"]
        or abs(abs(gd) - t_drop) <= 2 * ROUNDING * scale["drop"]
    )


def test_minilm_flips_equal_an_independent_count(tmp_path):
    from attncoda.experiments.flips import CAPTURE_TOL
    from attncoda.models.load import load_model
    from attncoda.run.captured import corpus_windows
    from attncoda.run.fit import model_rows
    from attncoda.run.reproduce import run_experiment

    # 4 windows of 128 tokens: 512 rows per head, 178,920 triplets per metric.
    settings = {"flips": {"n_boot": 10}, "rows": {"docs": 4, "max_tokens": 128}}
    run_experiment("flips", ["minilm"], tmp_path, settings=settings, progress=False)
    table = pd.read_parquet(tmp_path / "tables" / "flips.parquet").set_index("metric")
    # the head distances the counts were made from, kept beside the unit's tables
    (arrays,) = (tmp_path / "units" / "flips").glob("*/arrays.npz")
    stored = dict(np.load(arrays))

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
        ref = {c: _distances(attentions, name, c) for c in ("keep", "drop")}
        got = {c: stored[f"distance:{name}:{c}"] for c in ("keep", "drop")}
        scale = {c: np.abs(ref[c]).max() for c in ref}
        for c in ref:  # the same distances, to float32 rounding
            err = np.abs(got[c] - ref[c]).max()
            assert err <= ROUNDING * scale[c], f"{name} {c}: {err / scale[c]:.2e} of max|D|"
        counted = tuple(int(x) for x in table.loc[name, ["n_triplets", "n_ties", "flips"]])
        # The table counts exactly what plain loops count on its own distances ...
        own = _verdicts(got["keep"], got["drop"], CAPTURE_TOL)
        assert counted == _counts(own), name
        # ... and what they count on the independent distances, but for edge triplets: a
        # verdict that rounding moves must have a gap within rounding of the tolerance.
        independent = _verdicts(ref["keep"], ref["drop"], CAPTURE_TOL)
        moved = [i for i, (x, y) in enumerate(zip(own, independent, strict=True)) if x[0] != y[0]]
        off_edge = [i for i in moved if not _at_edge(independent[i], scale)]
        assert not off_edge, f"{name}: triplets {off_edge} differ away from the tie tolerance"
        if not moved:
            assert counted == _counts(independent), name
        assert table.loc[name, "flip_rate"] == counted[2] / (counted[0] - counted[1])
