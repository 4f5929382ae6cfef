"""The predictor's table compared by its declared rules (``attncoda compare``): every float
column held by the rounding its row states, every verdict equal unless its row states it is
on the edge; tampered tables fail."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from attncoda.experiments.contract import (
    DocRows,
    HeadRows,
    Inputs,
    Reading,
    Same,
    compare_frames,
    experiment,
    held_by,
)
from attncoda.experiments.flips import flips
from attncoda.experiments.predictor import fit_predictor, predictor_row, protocol_of
from attncoda.experiments.predictor._held import HELD
from attncoda.store import atomic_write_json

RULES = HELD["predictor"]
READ = Reading(corpus="embedded", corpus_sha256="c" * 64, windows=2, window_tokens=8)
#: Float columns read from the predictor file unchanged: held equal.
FROM_THE_FILE = ("alpha", "baseline_predicted")


def rows_of(seed: int) -> HeadRows:
    """Random causal log-probability rows of 6 heads (2 layers), apart in sink logit."""
    rng = np.random.default_rng(seed)
    bias = rng.uniform(-1, 3, size=6)
    mask = np.arange(8)[None, :] < np.arange(3, 9)[:, None]
    docs = []
    for _ in range(2):
        z = rng.normal(size=(6, mask.shape[0], 8))
        z[:, :, 0] += bias[:, None]
        z = np.where(mask[None], z, -np.inf)
        logp = z - np.log(np.exp(z).sum(axis=2, keepdims=True))
        docs.append(DocRows(np.where(mask[None], logp, 0.0), mask, (0,)))
    mass = np.exp(np.stack([d.logp[:, :, 0] for d in docs])).mean(axis=(0, 2))
    return HeadRows(f"model-{seed}", 2, 3, tuple(docs), mass)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """The predictor unit's table of two models by a predictor fitted on six others: one inside
    them, and one
    far outside them (it abstains), by a predictor fitted on rows read as the unit reads; no
    verdict of theirs is on its edge."""
    protocol = protocol_of(
        windows=2,
        window_tokens=8,
        corpus="embedded",
        corpus_sha256="c" * 64,
        sink="first",
        seed=0,
        metrics=("tv", "jsd"),
        tol=1e-6,
    )
    fitted = []
    for seed in range(6):
        hr = rows_of(seed)
        fitted.append(predictor_row(hr, flips(hr, ("tv", "jsd"), n_boot=1), protocol=protocol))
    path = atomic_write_json(
        tmp_path_factory.mktemp("predictor") / "p.json",
        fit_predictor(fitted, alpha=0.2).to_dict(),
    )
    e = experiment("predictor")
    frames = []
    for seed in (8, 11):
        hr = rows_of(seed)
        after = {"flips": flips(hr, ("tv", "jsd"), n_boot=1, tol=1e-6).to_tables()}
        inputs = Inputs(model=f"model-{seed}", rows=hr, after=after, read=READ)
        frames.append(e.run(inputs, e.settings(predictor=str(path))).frames["predictor"])
    return pd.concat(frames, ignore_index=True)


def test_every_float_column_is_held_by_what_it_is_computed_from(table):
    floats = [c for c in table.columns if pd.api.types.is_float_dtype(table[c])]
    assert "measured_rounding" in floats and "predicted_rounding" in floats
    for column in floats:
        if column in FROM_THE_FILE:  # equal: read from the file
            assert isinstance(held_by(RULES, column), Same), column
        else:
            assert column in RULES, column
    # every verdict and flag decided at a threshold says by which edge
    for column in ("abstained", "reason", "verdict", "baseline_verdict"):
        assert RULES[column].kind == "verdict"
    for column in ("abstain_edge", "verdict_edge", "baseline_edge"):
        assert table[column].dtype == bool
    assert table["n_triplets"].dtype == np.int64
    # the two rows are what they are meant to be
    assert not table.loc[0, "abstained"] and table.loc[1, "abstained"]
    assert (table["measured_rounding"] >= 0).all() and (table["predicted_rounding"] > 0).all()
    assert not table[["abstain_edge", "verdict_edge", "baseline_edge"]].to_numpy().any()


def test_the_table_is_the_same_evidence_as_itself(table):
    got = compare_frames("predictor", table, table, RULES)
    assert got.same and got.worst == 0.0


def _cell(got):
    return [(c.row, c.column) for c in got.cells]


def test_a_verdict_changed_off_its_edge_fails_and_on_its_edge_passes(table):
    assert not table.loc[0, "verdict_edge"]
    changed = table.copy()
    changed.loc[0, "verdict"] = "failed" if table.loc[0, "verdict"] == "confirmed" else "confirmed"
    assert _cell(compare_frames("predictor", changed, table, RULES)) == [(0, "verdict")]
    on_edge = table.assign(verdict_edge=[True, False])
    assert compare_frames("predictor", changed, on_edge, RULES).same
    # the run's own flag does not excuse it: the reference's row decides
    claimed = changed.assign(verdict_edge=[True, False])
    assert _cell(compare_frames("predictor", claimed, table, RULES)) == [
        (0, "verdict"),
        (0, "verdict_edge"),
    ]
    # the baseline's alike
    base = table.copy()
    base.loc[0, "baseline_verdict"] = (
        "failed" if table.loc[0, "baseline_verdict"] == "confirmed" else "confirmed"
    )
    assert _cell(compare_frames("predictor", base, table, RULES)) == [(0, "baseline_verdict")]
    assert compare_frames("predictor", base, table.assign(baseline_edge=[True, False]), RULES).same


def test_an_abstention_flipped_passes_only_on_its_edge(table):
    flipped = table.copy()
    flipped.loc[1, "abstained"] = False
    flipped.loc[1, "reason"] = ""
    flipped.loc[1, ["predicted", "predicted_low", "predicted_high"]] = [0.2, 0.1, 0.3]
    flipped.loc[1, "verdict"] = "confirmed"
    columns = {c for _, c in _cell(compare_frames("predictor", flipped, table, RULES))}
    assert columns == {"abstained", "reason", "predicted", "predicted_low", "predicted_high",
                       "verdict"}  # fmt: skip
    edge = table.assign(abstain_edge=[False, True], verdict_edge=[False, True])
    assert compare_frames("predictor", flipped, edge, RULES).same


def test_the_measured_rate_moved_past_its_rounding_fails(table):
    # these random heads have no fragile triplet: the reference states a rounding by hand
    bound = 2e-3
    reference = table.assign(measured_rounding=[bound, bound])
    within = reference.copy()
    within.loc[0, "measured"] += 0.99 * bound
    assert compare_frames("predictor", within, reference, RULES).same
    past = reference.copy()
    past.loc[0, "measured"] += 1.01 * bound
    assert _cell(compare_frames("predictor", past, reference, RULES)) == [(0, "measured")]
    # stated none, the rate is held to its float64 computation alone
    moved = table.copy()
    moved.loc[0, "measured"] += 1e-9
    assert float(table.loc[0, "measured_rounding"]) == 0.0
    assert _cell(compare_frames("predictor", moved, table, RULES)) == [(0, "measured")]


def test_a_feature_or_a_prediction_moved_past_its_rounding_fails(table):
    for column, bound, times in (
        ("feature_mean_sink_mass", "feature_mean_sink_mass_rounding", 2),
        ("feature_mean_sink_share", "feature_mean_sink_share_rounding", 2),
        ("predicted_high", "predicted_rounding", 2),
        ("width", "predicted_rounding", 4),
        ("baseline_predicted_high", "baseline_rounding", 1),
    ):
        allowed = times * float(table.loc[0, bound])
        assert allowed > 0, bound
        for by, same in ((0.99, True), (1.01, False)):
            moved = table.copy()
            moved.loc[0, column] += by * allowed
            got = compare_frames("predictor", moved, table, RULES)
            assert got.same is same, (column, by)
    # the interval score to its own stated rounding: (2 / alpha)(2 r + m)
    alpha = float(table.loc[0, "alpha"])
    r, m = float(table.loc[0, "predicted_rounding"]), float(table.loc[0, "measured_rounding"])
    stated = float(table.loc[0, "interval_score_rounding"])
    assert stated == pytest.approx(2 / alpha * (2 * r + m))
    moved = table.copy()
    moved.loc[0, "interval_score"] += 1.01 * stated
    assert _cell(compare_frames("predictor", moved, table, RULES)) == [(0, "interval_score")]


def test_an_inflated_rounding_fails_through_its_bound(table):
    # A rate bound made of counted triplets is held to 1% of itself plus 3 triplets; a bound
    # made of magnitudes (a feature's rounding, the prediction's) to 1% of itself alone.
    counted = {"measured_rounding": 3 / float(table.loc[0, "n_triplets"])}
    for column in ("measured_rounding", "predicted_rounding", "feature_std_sink_mass_rounding"):
        value = float(table.loc[0, column])
        allowed = 0.01 * value + counted.get(column, 0.0)
        inflated = table.copy()
        inflated.loc[0, column] = value + 1.01 * allowed
        assert _cell(compare_frames("predictor", inflated, table, RULES)) == [(0, column)]
        inflated.loc[0, column] = value + 0.99 * allowed
        assert compare_frames("predictor", inflated, table, RULES).same
    assert math.isfinite(float(table.loc[0, "baseline_rounding"]))


def test_the_report_the_summary_and_the_headline_count_edge_verdicts_apart(table):
    from attncoda.experiments.predictor._headline import HEADLINE
    from attncoda.experiments.predictor._section import predictor_section
    from attncoda.experiments.predictor._summary import summary
    from attncoda.experiments.view import Context

    # two held-out models read on protocol, both confirmed by the baseline: one of them on
    # its edge (as SmolLM2's measured rate at the baseline's end)
    rows = table.assign(
        model=["held-a", "held-b"],
        revision="-",
        family="test",
        relation="held out",
        counted=True,
        baseline_verdict="confirmed",
        baseline_edge=[True, False],
    )
    ctx = Context(frames={"predictor": rows}, sink="first")
    cell = HEADLINE.cell(ctx)
    assert "constant baseline 1 confirmed, 0 abstained, 0 failed, 1 on the edge" in cell
    below = HEADLINE.below(ctx) if HEADLINE.below else ""
    assert "| confirmed (on the edge) |" in below
    section = predictor_section(ctx)
    assert "1 confirmed, 0 failed, 1 on the edge over 2 held-out model(s)" in section
    assert "confirmed (on the edge)" in section
    printed = summary({"predictor": rows}, lambda *_: {}, "first").splitlines()
    assert "baseline confirmed (on the edge))" in printed[0]
    assert "baseline confirmed)" in printed[1]
    # with no edge, the counts read as before
    firm = rows.assign(baseline_edge=False)
    assert "constant baseline 2 confirmed, 0 abstained, 0 failed (below)" in HEADLINE.cell(
        Context(frames={"predictor": firm}, sink="first")
    )
    # a verdict that is no test (a training model's, as SmolLM2's baseline verdict at the
    # end its own rate makes) says its edge all the same
    trained = rows.assign(relation="training", counted=False, matched_training_model="held-a",
                          matched_by="weights")  # fmt: skip
    printed = summary({"predictor": trained}, lambda *_: {}, "first").splitlines()
    assert printed[0].endswith("(matched by weights): no test (baseline confirmed on the edge)")
    assert printed[1].endswith("(matched by weights): no test")
    # an abstention on its edge says so
    edge = rows.assign(abstain_edge=[False, True])
    assert "ABSTAIN (on the edge; " in summary({"predictor": edge}, lambda *_: {}, "first")


def test_a_run_without_a_held_out_model_says_so_below_the_headline(table):
    # a demo of SmolLM2 alone: its one row is a training model's, counted for nothing
    from attncoda.experiments.predictor._headline import HEADLINE
    from attncoda.experiments.view import Context

    trained = table.assign(relation="training", counted=False, model="smollm2", revision="-")
    ctx = Context(frames={"predictor": trained}, sink="first")
    assert HEADLINE.cell(ctx).startswith("0 held-out verdicts")
    assert HEADLINE.below is not None
    assert HEADLINE.below(ctx).startswith("No held-out model in this run")
