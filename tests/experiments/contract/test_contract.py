"""The experiment contract: every declaration, and each experiment's ``run`` against the
function it wraps (tables equal exactly, no ``family`` column)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

from pandas.testing import assert_frame_equal  # noqa: E402

from attncoda import AttncodaError, capture_windows, from_attentions  # noqa: E402
from attncoda.capture.kernels.registry import resolve_kernel  # noqa: E402
from attncoda.experiments.cluster import VARIANT_TITLES, VARIANTS, cluster  # noqa: E402
from attncoda.experiments.collapse import (  # noqa: E402
    collapse_from_stats,
    stats_frames,
)
from attncoda.experiments.contract import (  # noqa: E402
    EXPERIMENTS,
    NEEDS,
    RUN_COLUMNS,
    Experiment,
    Inputs,
    Reading,
    Tables,
    experiment,
    head_rows,  # noqa: E402
    settings_dict,
    settings_from,
)
from attncoda.experiments.flips import FlipsResult, flips  # noqa: E402
from attncoda.experiments.predictor import (  # noqa: E402
    Predictor,
    fit_predictor,
    predictor_row,
    protocol_of,
    shipped_predictor,
    verdict,
)
from attncoda.experiments.profile import head_summary  # noqa: E402
from attncoda.experiments.prune import split_windows  # noqa: E402
from attncoda.experiments.safety import safety_map  # noqa: E402
from attncoda.models.series import SeriesPoint  # noqa: E402
from attncoda.run.direct import checkpoint_stats, prune_model  # noqa: E402
from attncoda.store import atomic_write_json  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

#: The defaults of each experiment's settings, written out by hand (the demo scale's values).
DEFAULTS = {
    "profile": {"docs": 8, "max_tokens": 128},
    "flips": {
        "metrics": ["cosine", "jsd", "entropy_gap", "hellinger", "tv"],
        "n_boot": 200,
        "tol": 1e-6,
    },
    "cluster": {"n_clusters": 4, "n_init": 5},
    "safety": {"n_bins": 5, "threshold": 0.05},
    "predictor": {"predictor": "shipped", "protocol": "fitted"},
    "prune": {
        "channels": ["sink_mass", "sink_balance", "content_entropy", "full_entropy", "random"],
        "orders": ["high", "low"],
        "ablations": ["zero"],
        "ks": [4, 16, 64],
        "profile_docs": 8,
        "eval_docs": 16,
        "max_tokens": 128,
        "n_boot": 1000,
    },
    "collapse": {"docs": 16, "max_tokens": 128},
    "sink_rate": {"docs": 16, "max_tokens": 64, "epsilon": 0.3, "positions": [0, 1, 2]},
}


def raises(message: str):
    return pytest.raises(AttncodaError, match=f"^{re.escape(message)}$")


# --- the declarations -----------------------------------------------------------------------


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_declares_what_the_runner_needs(name):
    e = experiment(name)
    assert isinstance(e, Experiment) and e.name == name
    assert e.needs and set(e.needs) <= set(NEEDS)
    # after: earlier experiments of the per-model order only
    assert all(EXPERIMENTS.index(a) < EXPERIMENTS.index(name) for a in e.after)
    assert e.tables and len(set(e.tables)) == len(e.tables)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", t) for t in e.tables)
    assert callable(e.run)
    assert (e.combine is not None) == (name == "collapse")
    assert (e.skip is not None) == (name == "prune")
    assert dataclasses.is_dataclass(e.settings) and e.settings.__dataclass_params__.frozen
    for f in dataclasses.fields(e.settings):
        assert f.default is not dataclasses.MISSING, f.name
        assert isinstance(f.metadata.get("help"), str) and f.metadata["help"], f.name
    assert settings_dict(e.settings()) == DEFAULTS[name]
    # the windows the runner provides are named by docs and tokens
    if "windows" in e.needs:
        assert isinstance(e.settings().docs, int) and isinstance(e.settings().max_tokens, int)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_settings_round_trip_through_a_run_config(name):
    settings = experiment(name).settings
    stored = json.loads(json.dumps(settings_dict(settings())))
    assert settings_from(settings, stored) == settings()


def test_settings_from_refuses_an_unknown_key():
    settings = experiment("flips").settings
    with raises("unknown setting 'n_bootstrap' of flips: use one of metrics, n_boot, tol"):
        settings_from(settings, {"n_bootstrap": 10})
    assert settings_from(settings, {"n_boot": 10, "metrics": ["tv"]}) == settings(
        metrics=("tv",), n_boot=10
    )


def test_prune_windows_are_its_profile_and_eval_windows():
    settings = experiment("prune").settings(profile_docs=3, eval_docs=2)
    assert settings.docs == 5
    assert "docs" not in settings_dict(settings)


def test_an_unknown_experiment_and_a_missing_input_are_named():
    with raises(
        "unknown experiment 'flip': use one of profile, flips, cluster, safety, predictor, "
        "prune, collapse, sink_rate"
    ):
        experiment("flip")
    with raises("the runner gave no 'rows' input for 'm'"):
        experiment("flips").run(Inputs(model="m"), experiment("flips").settings())
    with raises("the runner gave no 'flips' tables for 'm': run flips first"):
        Inputs(model="m").tables_of("flips")
    # each name of NEEDS is an input: "model" is the loaded (model, tokenizer, info)
    with raises("the runner gave no 'model' input for 'm'"):
        Inputs(model="m").loaded  # noqa: B018 (the read is the check)
    loaded = (object(), None, None)
    assert Inputs(model="m", loaded=loaded).loaded is loaded
    for name in NEEDS:
        with raises(f"the runner gave no {name!r} input for 'm'"):
            getattr(Inputs(model="m"), {"model": "loaded"}.get(name, name))


# --- experiments on recorded rows ------------------------------------------------------------


@pytest.fixture(scope="module")
def captured():
    """A capture of random causal logits (3 documents, 2 layers x 4 heads, 10 tokens) whose
    heads differ in sink logit, and its recorded rows."""
    rng = np.random.default_rng(5)
    z = rng.normal(size=(3, 2, 4, 10, 10))
    z[..., 0] += rng.uniform(-1.0, 3.0, size=(1, 2, 4, 1))
    z[..., np.triu(np.ones((10, 10), dtype=bool), 1)] = -np.inf  # causal
    cap = from_attentions(z, kind="logits", causal=True)
    return cap, head_rows(cap, "tiny")


def no_run_columns(tables: Tables, experiment_name: str) -> None:
    assert tuple(tables.frames) == experiment(experiment_name).tables
    for name, frame in tables.frames.items():
        assert not set(RUN_COLUMNS) & set(frame.columns), name


def test_profile_run_is_the_head_summary_of_its_capture(captured):
    cap, _ = captured
    e = experiment("profile")
    tables = e.run(Inputs(model="tiny", capture=cap), e.settings())
    no_run_columns(tables, "profile")
    assert_frame_equal(
        tables.frames["profile_heads"], head_summary(cap.to_frame()), check_exact=True
    )
    assert len(tables.frames["profile_heads"]) == 8


def test_flips_run_equals_flips_and_its_tables_round_trip(captured):
    _, rows = captured
    e = experiment("flips")
    settings = e.settings(n_boot=20)
    tables = e.run(Inputs(model="tiny", rows=rows, seed=3), settings)
    no_run_columns(tables, "flips")
    want = flips(rows, n_boot=20, seed=3, tol=1e-6)
    assert_frame_equal(tables.frames["flips"], want.table, check_exact=True)
    assert_frame_equal(tables.frames["flips_by_layer"], want.by_layer, check_exact=True)
    arrays = tables.arrays
    assert list(arrays)[:3] == ["n_docs", "n_rows", "tol"]
    assert all(arrays[k].shape == () for k in ("n_docs", "n_rows", "tol"))
    assert (int(arrays["n_docs"]), int(arrays["n_rows"]), float(arrays["tol"])) == (
        want.n_docs,
        want.n_rows,
        1e-6,
    )
    assert sorted(arrays) == sorted(
        ["n_docs", "n_rows", "tol"]
        + [f"distance:{m}:{c}" for m in settings.metrics for c in ("keep", "drop")]
        + [f"rounding:{m}:{c}" for m in settings.metrics for c in ("keep", "drop")]
        + [f"bootstrap:{m}" for m in settings.metrics]
    )
    # as a run stores them: the run's key columns first; from_tables leaves them out
    stored = {}
    for name, frame in tables.frames.items():
        frame = frame.drop(columns="model")
        frame.insert(0, "family", "Toy")
        frame.insert(0, "revision", "-")
        frame.insert(0, "model", "tiny")
        stored[name] = frame
    back = FlipsResult.from_tables("tiny", Tables(frames=stored, arrays=dict(arrays)))
    assert_frame_equal(back.table, want.table, check_exact=True)
    assert_frame_equal(back.by_layer, want.by_layer, check_exact=True)
    assert back.distances.keys() == want.distances.keys()
    for key, d in want.distances.items():
        assert np.array_equal(back.distances[key], d)
    assert back.rounding.keys() == want.distances.keys()
    for key, e in want.rounding.items():
        assert np.array_equal(back.rounding[key], e)
    for metric, b in want.bootstrap.items():
        assert np.array_equal(back.bootstrap[metric], b, equal_nan=True)
    assert (back.model, back.n_docs, back.n_rows, back.tol) == (
        "tiny",
        want.n_docs,
        want.n_rows,
        1e-6,
    )


def test_from_tables_refuses_tables_without_the_counts():
    with raises("the flips tables of 'm' hold no 'n_docs' array: rerun flips"):
        FlipsResult.from_tables("m", Tables(frames={}))


def test_cluster_run_equals_cluster(captured):
    _, rows = captured
    e = experiment("cluster")
    tables = e.run(Inputs(model="tiny", rows=rows, seed=1), e.settings(n_clusters=3, n_init=2))
    no_run_columns(tables, "cluster")
    want = cluster(rows, seed=1, n_clusters=3, n_init=2)
    assert_frame_equal(tables.frames["cluster"], want.table, check_exact=True)
    art = want.artifact

    def values(of, key):
        return np.array([np.nan if of[key][v] is None else of[key][v] for v in VARIANTS])

    rounding = art["rounding"]
    summary = pd.DataFrame(
        {
            "variant": list(VARIANTS),
            "title": [VARIANT_TITLES[v] for v in VARIANTS],
            "n_heads": np.full(4, 8, dtype=np.int64),
            "n_head_pairs": np.full(4, 28, dtype=np.int64),
            "spearman_axis1_vs_sink_mass": values(art, "spearman_axis1_vs_sink_mass"),
            "spearman_axis1_rounding": values(rounding, "spearman_axis1"),
            "max_abs_spearman_any_direction": values(
                art, "max_abs_spearman_any_direction_vs_sink_mass"
            ),
            "max_abs_spearman_rounding": values(rounding, "max_abs_spearman"),
            "n_near_ties": np.array([rounding["n_near_ties"][v] for v in VARIANTS]),
            "degenerate": [v in art["degenerate_variants"] for v in VARIANTS],
            "degenerate_edge": [rounding["degenerate_edge"][v] for v in VARIANTS],
            "mean_sink_share_of_aitchison_sq": [art["mean_sink_share_of_aitchison_sq"]] * 4,
            "mean_sink_share_rounding": [rounding["mean_sink_share"]] * 4,
        }
    )
    assert_frame_equal(tables.frames["cluster_summary"], summary, check_exact=True)
    agreement = tables.frames["cluster_agreement"]
    assert len(agreement) == 6
    for row in agreement.itertuples(index=False):
        key = f"{row.variant_a}|{row.variant_b}"
        assert row.adjusted_rand == art["adjusted_rand"][key]
        assert row.adjusted_rand_rounding == rounding["adjusted_rand"][key]
        assert row.n_edge_heads == rounding["adjusted_rand_edge_heads"][key]
    assert tables.summary["adjusted_rand"] == art["adjusted_rand"]
    json.dumps(tables.summary, allow_nan=False)
    # each variant's summed matrix, one row per pair of the 8 heads (head_a < head_b)
    distances = tables.frames["cluster_distances"]
    assert len(distances) == 4 * 28 and set(distances["model"]) == {"tiny"}
    for v in VARIANTS:
        part = distances[distances["variant"] == v]
        a, b, value = part["head_a"].to_numpy(), part["head_b"].to_numpy(), part["distance"]
        d = np.zeros((8, 8))
        d[a, b] = d[b, a] = value.to_numpy()
        np.testing.assert_array_equal(d, want.distances[v])


@pytest.fixture(scope="module")
def flips_tables(captured):
    _, rows = captured
    e = experiment("flips")
    return e.run(Inputs(model="tiny", rows=rows), e.settings(n_boot=10))


def test_safety_run_equals_safety_map_on_the_flips_distances(captured, flips_tables):
    _, rows = captured
    e = experiment("safety")
    inputs = Inputs(model="tiny", rows=rows, after={"flips": flips_tables})
    tables = e.run(inputs, e.settings(n_bins=3, threshold=0.2))
    no_run_columns(tables, "safety")
    want = safety_map(rows, flips_result=flips(rows, n_boot=10, tol=1e-6), n_bins=3, threshold=0.2)
    assert_frame_equal(tables.frames["safety"], want.table, check_exact=True)
    assert_frame_equal(tables.frames["safety_grid"], want.grid, check_exact=True)
    with raises("the runner gave no 'flips' tables for 'tiny': run flips first"):
        e.run(Inputs(model="tiny", rows=rows), e.settings())


def test_safety_follows_the_metrics_flips_measured(captured):
    _, rows = captured
    tables = experiment("flips").run(
        Inputs(model="tiny", rows=rows), experiment("flips").settings(metrics=("tv",), n_boot=5)
    )
    e = experiment("safety")
    out = e.run(Inputs(model="tiny", rows=rows, after={"flips": tables}), e.settings())
    assert set(out.frames["safety"]["metric"]) == {"tv"}


def test_predictor_run_applies_the_frozen_predictor(captured, flips_tables, tmp_path):
    _, rows = captured
    result = flips(rows, n_boot=10, tol=1e-6)
    # The rows record what they read (a predictor is frozen only with its protocol): here,
    # as the runner below says they read it (``read``: 4 windows of 16 tokens of a corpus).
    read = Reading(corpus="embedded", corpus_sha256="c" * 64, windows=4, window_tokens=16)
    protocol = protocol_of(
        windows=4,
        window_tokens=16,
        corpus=None,
        corpus_sha256="c" * 64,
        sink="first",
        seed=0,
        metrics=result.table["metric"],
        tol=1e-6,
    )
    row = predictor_row(rows, result, protocol=protocol)
    # four more models around this one (scaled apart feature by feature, so that the five
    # span the features' joint support), so that it lies inside it
    others = []
    for i, scales in enumerate(
        ((0.9, 1.1, 1.0), (1.1, 0.9, 1.2), (1.2, 1.15, 0.85), (0.8, 1.0, 1.1))
    ):
        features = {k: v * c for (k, v), c in zip(row["features"].items(), scales, strict=True)}
        rates = {m: r * scales[0] for m, r in row["flip_rates"].items()}
        others.append(
            {"model": f"other {i}", "features": features, "flip_rates": rates, "protocol": protocol}
        )
    fitted = fit_predictor([*others, {**row, "model": "tiny step4"}], alpha=0.2)
    path = atomic_write_json(tmp_path / "predictor.json", fitted.to_dict())
    e = experiment("predictor")
    inputs = Inputs(
        model="tiny", revision="step4", rows=rows, after={"flips": flips_tables}, read=read
    )
    frame = e.run(inputs, e.settings(predictor=str(path))).frames["predictor"]
    no_run_columns(Tables(frames={"predictor": frame}), "predictor")
    prediction = Predictor.from_json(path).apply(row["features"])
    measured = float(np.mean(list(row["flip_rates"].values())))
    assert frame.columns.tolist() == [
        "feature_mean_sink_mass",
        "feature_std_sink_mass",
        "feature_mean_sink_share",
        "feature_mean_sink_mass_rounding",
        "feature_std_sink_mass_rounding",
        "feature_mean_sink_share_rounding",
        "abstained",
        "reason",
        "abstain_edge",
        "predicted",
        "predicted_low",
        "predicted_high",
        "width",
        "abs_error",
        "interval_score",
        "baseline_predicted",
        "baseline_predicted_low",
        "baseline_predicted_high",
        "baseline_width",
        "baseline_abs_error",
        "baseline_interval_score",
        "predicted_rounding",
        "interval_score_rounding",
        "baseline_rounding",
        "baseline_interval_score_rounding",
        "measured",
        "measured_rounding",
        "n_triplets",
        "verdict",
        "verdict_edge",
        "baseline_verdict",
        "baseline_edge",
        "interval_method",
        "alpha",
        "n_training_models",
        "n_training_runs",
        "in_training_set",
        "matched_training_model",
        "matched_by",
        "relation",
        "run_training_models",
        "read_corpus",
        "read_windows",
        "read_window_tokens",
        "on_protocol",
        "off_protocol",
        "counted",
    ]
    got = frame.iloc[0]
    assert bool(got["on_protocol"]) and got["off_protocol"] == ""
    assert (got["read_windows"], got["read_window_tokens"]) == (4, 16)
    assert [got[f"feature_{k}"] for k in row["features"]] == list(row["features"].values())
    assert not got["abstained"] and got["reason"] == ""
    assert (got["predicted"], got["predicted_low"], got["predicted_high"]) == (
        prediction.point,
        prediction.low,
        prediction.high,
    )
    assert got["measured"] == measured and got["verdict"] == verdict(prediction, measured)
    # what rounding leaves open, as the row states it
    rates = dict(zip(result.table["metric"], result.table["rate_rounding"], strict=True))
    assert got["measured_rounding"] == pytest.approx(np.mean(list(rates.values())))
    assert [got[f"feature_{k}_rounding"] for k in row["features"]] == list(
        row["rounding"]["features"].values()
    )
    assert got["n_triplets"] == int(result.table["n_triplets"].iloc[0])
    baseline = Predictor.from_json(path).apply_baseline()
    assert (got["baseline_predicted_low"], got["baseline_predicted_high"]) == (
        baseline.low,
        baseline.high,
    )
    assert got["baseline_verdict"] == verdict(baseline, measured)
    assert got["width"] == pytest.approx(prediction.high - prediction.low)
    assert (got["alpha"], got["n_training_models"], got["n_training_runs"]) == (0.2, 5, 5)
    assert bool(got["in_training_set"])  # fitted on "tiny step4"
    other = e.run(
        Inputs(model="tiny", revision="step8", rows=rows, after={"flips": flips_tables}, read=read),
        e.settings(predictor=str(path)),
    )
    assert not bool(other.frames["predictor"]["in_training_set"].iloc[0])


def test_predictor_run_with_the_shipped_predictor_abstains_outside_its_range(
    captured, flips_tables
):
    _, rows = captured
    e = experiment("predictor")
    # Rows read as the shipped predictor's protocol reads them (its own windows, not the
    # run's), so that the verdict is the range's, not "off protocol".
    shipped = Predictor.from_json(shipped_predictor()).protocol
    read = shipped.readings[0]
    frame = e.run(Inputs(model="tiny", rows=rows, read=read, shared_rows=False), e.settings())
    frame = frame.frames["predictor"]
    got = frame.iloc[0]
    assert bool(got["on_protocol"]) and bool(got["abstained"]) and got["verdict"] == "abstained"
    assert "outside the training" in got["reason"]
    # the baseline still predicts
    assert got["baseline_verdict"] in ("confirmed", "failed")
    assert math.isnan(got["predicted"]) and frame["predicted"].dtype == np.float64


# --- experiments on a model ------------------------------------------------------------------


def windows(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, size=8 + i % 4).tolist() for i in range(n)]


def test_prune_run_equals_prune_with_the_ks_the_model_has():
    loaded = _tiny("llama", seed=0, positions=64, eager=True)
    info = SimpleNamespace(causal=True, n_layers=2, n_heads=4, spec="tiny")
    e = experiment("prune")
    settings = e.settings(
        channels=("sink_mass", "random"),
        orders=("high",),
        ks=(1, 8, 9),
        profile_docs=2,
        eval_docs=2,
    )
    wins = windows(5)
    profile, evaluation = split_windows(wins, 2, 2)
    # the runner captures the windows prune's declaration picks: its profiling windows
    assert e.captures is not None and e.captures(wins, settings) == profile
    cap = capture_windows(loaded, profile, record_rows="none", seed=2)
    inputs = Inputs(model="tiny", seed=2, loaded=(loaded, None, info), windows=wins, capture=cap)
    tables = e.run(inputs, settings)
    no_run_columns(tables, "prune")
    want = prune_model(
        loaded,
        None,
        profile,
        evaluation,
        channels=("sink_mass", "random"),
        orders=("high",),
        ks=(1, 8),
        seed=2,
        model_name="tiny",
    )
    assert_frame_equal(tables.frames["prune"], want.table, check_exact=True)
    assert_frame_equal(tables.frames["prune_heads"], want.heads, check_exact=True)
    assert tables.frames["prune"]["k"].tolist() == [0, 1, 8, 1, 8]
    # k 9 does not fit the 8 heads: left out, and the unit's note says so
    note = "k 9 is more than the 8 heads of tiny: left out"
    assert tables.summary == {**want.summary, "note": note}
    kernel = resolve_kernel("auto", "cpu")  # the default method, auto: the fast path
    assert (tables.summary["method"], tables.summary["kernel"]) == ("fast", kernel)
    # a capture of other windows than the profiling ones is refused, not ranked by
    other = Inputs(
        model="tiny",
        seed=2,
        loaded=(loaded, None, info),
        windows=wins,
        capture=capture_windows(loaded, evaluation, record_rows="none"),
    )
    with raises(
        "the capture's window 0 is not profile_windows window 0: capture the profile_windows, "
        "in their order"
    ):
        e.run(other, settings)
    with raises("the runner gave no 'capture' input for 'tiny'"):
        e.run(Inputs(model="tiny", seed=2, loaded=(loaded, None, info), windows=wins), settings)


def test_prune_skips_a_model_that_is_not_causal():
    e = experiment("prune")
    info = SimpleNamespace(causal=False, spec="owner/enc@v1", architecture="BertModel")
    note = "prune measures perplexity, which needs a causal language model; owner/enc is BertModel"
    assert e.skip(info) == note
    assert e.skip(SimpleNamespace(causal=True)) is None
    with raises(note):
        e.run(Inputs(model="owner/enc", loaded=(None, None, info), windows=[]), e.settings())


def neox(seed: int):
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return transformers.GPTNeoXForCausalLM._from_config(config, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def series():
    points = [SeriesPoint(s, f"step{s}", f"ckpt{s}") for s in (0, 16, 512)]
    models = [neox(seed) for seed in (0, 1, 2)]
    wins = windows(4, seed=3)
    e = experiment("collapse")
    # the runner captures every series window at each checkpoint
    assert e.captures is not None and e.captures(wins, e.settings()) == wins
    units = [
        e.run(
            Inputs(
                model="tiny",
                revision=p.label,
                windows=wins,
                checkpoint=p,
                capture=capture_windows(m, wins, record_rows="none"),
            ),
            e.settings(),
        )
        for p, m in zip(points, models, strict=True)
    ]
    return points, models, wins, units


def test_collapse_run_is_the_checkpoint_statistics(series):
    points, models, wins, units = series
    no_run_columns(units[0], "collapse")
    rows, sinks = stats_frames(checkpoint_stats(models[1], None, wins, points[1]))
    assert_frame_equal(units[1].frames["collapse_rows"], rows, check_exact=True)
    assert_frame_equal(units[1].frames["collapse_sinks"], sinks, check_exact=True)
    keys = ("step", "label", "spec", "model", "method", "kernel")
    assert {k: units[1].summary[k] for k in keys} == {
        "step": 16,
        "label": "step16",
        "spec": "ckpt16",
        "model": "tiny",
        "method": "fast",  # the default method, auto, takes the fast path where it routes
        "kernel": resolve_kernel("auto", "cpu"),
    }
    # a capture of other windows than the series' is refused
    e = experiment("collapse")
    other = Inputs(
        model="tiny",
        windows=wins,
        checkpoint=points[1],
        capture=capture_windows(models[1], wins[::-1], record_rows="none"),
    )
    with raises(
        "the capture's window 0 is not series windows window 0: capture the series windows, "
        "in their order"
    ):
        e.run(other, e.settings())


def test_collapse_combine_equals_collapse_from_stats(series):
    points, models, wins, units = series
    e = experiment("collapse")
    # stored partitions carry the run's key columns, and units may come in any order
    stored = []
    for unit in reversed(units):
        frames = {}
        for name, frame in unit.frames.items():
            frame = frame.copy()
            frame.insert(0, "revision", unit.summary["label"])
            frame.insert(0, "model", "tiny")
            frames[name] = frame
        stored.append(Tables(frames=frames, summary=dict(unit.summary)))
    combined = e.combine(stored, e.settings())
    stats = [checkpoint_stats(m, None, wins, p) for p, m in zip(points, models, strict=True)]
    want = collapse_from_stats(stats, wins, points=points, model="tiny")
    assert tuple(combined.frames) == ("collapse", "collapse_checkpoints")
    for name, frame in (("collapse", want.table), ("collapse_checkpoints", want.checkpoints)):
        frame = frame.copy()
        frame.insert(1, "revision", "-")
        assert_frame_equal(combined.frames[name], frame, check_exact=True)
    assert combined.summary == want.summary


def test_collapse_combine_refuses_checkpoints_of_other_windows(series):
    _, _, _, units = series
    e = experiment("collapse")
    other = Tables(frames=units[1].frames, summary={**units[1].summary, "windows_sha256": "x"})
    first = units[0].summary["windows_sha256"]
    with raises(
        f"checkpoint step16 has windows_sha256 'x', checkpoint step0 {first!r}: every "
        "checkpoint of a series reads the same windows with the same sink"
    ):
        e.combine([units[0], other], e.settings())
    with raises("collapse needs at least 2 checkpoints' statistics, got 1"):
        e.combine(units[:1], e.settings())
    with raises("a collapse unit's summary lacks 'step': rerun its checkpoint"):
        e.combine([Tables(frames=units[0].frames)], e.settings())


def test_every_experiment_shows_itself_from_tables_it_or_its_after_experiments_write():
    """The report lays out the registry's views and names no experiment: each experiment
    declares its section and figure over tables that a run of it stores."""
    from attncoda.experiments.contract import EXPERIMENTS, experiment

    for name in EXPERIMENTS:
        declared = experiment(name)
        view = declared.view
        assert view is not None, name
        stored = set(declared.tables)
        stored |= set(declared.combined)
        for other in declared.after:
            stored |= set(experiment(other).tables)
        assert view.needs and set(view.needs) <= stored, name
        assert set(view.figure_tables) <= stored, name
        assert view.title.lower().startswith(name.split("_")[0][:4]), (name, view.title)
