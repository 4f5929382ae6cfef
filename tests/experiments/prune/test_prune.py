"""prune(): head rankings, held-out perplexity, gradient importance, and their errors."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pd = pytest.importorskip("pandas")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.ablation import ablate, head_gates  # noqa: E402
from attncoda.experiments.prune import (  # noqa: E402
    BASELINE_NOTE,
    CHANNEL_COLUMNS,
    COLUMNS,
    HELD,
    gradient_importance,
    head_ranking,
    ratio_interval,
    split_windows,
    window_losses,
    window_nll,
    window_resamples,
)
from attncoda.run.direct import prune_model  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402


def tiny(family: str, seed: int = 0):
    return _tiny(family, seed=seed, positions=64, eager=True)


def windows(n: int = 6, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = ([12, 9, 14, 10, 11, 13, 8, 15] * 2)[:n]
    return [rng.integers(0, VOCAB, size=length).tolist() for length in lengths]


def hf_perplexity(model, wins) -> float:
    """exp of the mean over windows of transformers' own ``labels=`` loss, one window a call."""
    losses = []
    with torch.no_grad():
        for window in wins:
            ids = torch.as_tensor([window])
            losses.append(float(model(input_ids=ids, labels=ids).loss))
    return math.exp(sum(losses) / len(losses))


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gpt2"])
def test_unpruned_perplexity_equals_transformers_loss(family):
    model = tiny(family)
    profile, evaluation = split_windows(windows(), 3, 3)
    result = prune_model(
        model, None, profile, evaluation, channels=["random"], orders=["high"], ks=[1], batch_size=2
    )
    base = result.table[result.table["k"] == 0].iloc[0]
    reference = hf_perplexity(model, evaluation)
    assert math.isclose(base["perplexity"], reference, rel_tol=1e-4)
    assert math.isclose(result.summary["baseline_perplexity"], reference, rel_tol=1e-4)
    assert (base["channel"], base["order"], base["ablation"], base["ratio"], base["heads"]) == (
        "none",
        "none",
        "none",
        1.0,
        "",
    )


def test_window_losses_do_not_depend_on_the_batch_size():
    model = tiny("llama")
    wins = windows()
    one = window_losses(model, wins, batch_size=1)
    many = window_losses(model, wins, batch_size=6)
    np.testing.assert_allclose(one, many, rtol=1e-5)
    assert one.shape == (6,) and one.dtype == np.float64


def heads_table():
    return pd.DataFrame(
        {
            "layer": [0, 0, 1, 1],
            "head": [0, 1, 0, 1],
            "sink_mass": [0.1, 0.7, 0.7, 0.3],
            "sink_balance": [1.0, -2.0, 0.5, 0.0],
            "entropy": [2.0, 1.0, 3.0, 0.5],
            "content_entropy": pd.array([1.5, 2.5, None, 1.0], dtype="Float64"),
        }
    )


def test_head_ranking_orders_and_ties():
    table = heads_table()
    high = head_ranking(table, "sink_mass", "high")
    assert list(zip(high["layer"], high["head"], strict=True)) == [(0, 1), (1, 0), (1, 1), (0, 0)]
    assert high["rank"].tolist() == [0, 1, 2, 3]
    low = head_ranking(table, "sink_mass", "low")
    assert list(zip(low["layer"], low["head"], strict=True)) == [(0, 0), (1, 1), (0, 1), (1, 0)]
    full = head_ranking(table, "full_entropy", "high")
    assert full["value"].tolist() == [3.0, 2.0, 1.0, 0.5]
    balance = head_ranking(table, "sink_balance", "low")
    assert list(zip(balance["layer"], balance["head"], strict=True))[0] == (0, 1)


def test_random_ranking_is_seeded():
    table = heads_table()
    a = head_ranking(table, "random", "high", seed=3)
    b = head_ranking(table, "random", "high", seed=3)
    low = head_ranking(table, "random", "low", seed=3)
    assert a.equals(b)
    forward = list(zip(a["layer"], a["head"], strict=True))
    assert list(zip(low["layer"], low["head"], strict=True)) == forward[::-1]
    orders = {tuple(head_ranking(table, "random", "high", seed=s)["head"]) for s in range(20)}
    assert len(orders) > 1


def raises(message: str):
    return pytest.raises(AttncodaError, match=f"^{re.escape(message)}$")


def test_head_ranking_errors():
    table = heads_table()
    with raises(
        "unknown channel 'entropy': use one of sink_mass, sink_balance, content_entropy, "
        "full_entropy, random, gradient"
    ):
        head_ranking(table, "entropy", "high")
    with raises("unknown order 'up': use 'high' (prune the highest values first) or 'low'"):
        head_ranking(table, "sink_mass", "up")
    with raises(
        "the heads table has no column 'gradient_importance' for channel 'gradient' (compute it "
        "with gradient_importance)"
    ):
        head_ranking(table, "gradient", "high")
    with raises("the heads table has no column 'sink_mass' for channel 'sink_mass'"):
        head_ranking(table.drop(columns="sink_mass"), "sink_mass", "high")
    with raises("the heads table has no column 'layer'"):
        head_ranking(table.drop(columns="layer"), "random", "high")
    with raises("channel 'content_entropy' has no finite value for heads 1.0"):
        head_ranking(table, "content_entropy", "high")


@pytest.fixture(scope="module")
def grid():
    model = tiny("llama")
    profile, evaluation = split_windows(windows(8), 4, 4)
    result = prune_model(
        model,
        None,
        profile,
        evaluation,
        channels=["sink_mass", "content_entropy", "full_entropy", "random", "gradient"],
        orders=["high", "low"],
        ablations=["zero", "sink"],
        ks=[4, 1, 2, 2],
        seed=1,
        model_name="tiny-llama",
    )
    return model, profile, evaluation, result


def test_prune_table(grid):
    model, profile, evaluation, result = grid
    table = result.table
    assert tuple(table.columns) == COLUMNS
    assert len(table) == 1 + 2 * 5 * 2 * 3
    assert (table["model"] == "tiny-llama").all()
    base = table.iloc[0]
    assert np.allclose(table["ratio"], table["perplexity"] / base["perplexity"], rtol=1e-12)
    assert np.allclose(np.exp(table["mean_nll"]), table["perplexity"], rtol=1e-12)
    assert sorted(table["k"].unique().tolist()) == [0, 1, 2, 4]
    # 4 evaluation windows: too few for a ratio's interval, and every row says why
    assert table["ratio_ci_low"].isna().all() and table["ratio_ci_high"].isna().all()
    assert (table["n_windows"] == 4).all() and (table["n_boot"] == 0).all()
    assert (table["ci_method"] == "").all()
    assert table["ci_note"].tolist() == [BASELINE_NOTE] + [
        "no interval: 4 windows, fewer than 10"
    ] * (len(table) - 1)
    assert result.summary["n_windows"] == 4 and result.summary["n_boot"] == 0
    assert "gradient_importance" in result.heads.columns
    assert (result.heads["gradient_rounding"] > 0).all()
    assert result.summary["eval_windows"] == ["#0", "#1", "#2", "#3"]
    assert result.summary["ks"] == [1, 2, 4]
    # what rounding can move: the baseline's ratio is 1 by definition, a pruned row's
    # log-ratio moves by its NLL's rounding plus the baseline's
    assert table.dtypes["n_fragile_heads"] == np.int64
    assert pd.api.types.is_bool_dtype(table["heads_edge"])
    assert pd.api.types.is_bool_dtype(table["order_edge"])
    assert (table["nll_rounding"] > 0).all() and (table["nll_rounding"] < 1e-3).all()
    assert base["ratio_rounding"] == 0.0 and base["nll_rounding"] == result.summary[
        "baseline_nll_rounding"
    ]
    pruned = table.iloc[1:]
    np.testing.assert_array_equal(
        pruned["ratio_rounding"], pruned["nll_rounding"] + base["nll_rounding"]
    )
    assert (base["n_fragile_heads"], base["heads_edge"], base["order_edge"]) == (0, False, False)
    random = table[table["channel"] == "random"]
    assert (random["n_fragile_heads"] == 0).all() and not random["order_edge"].any()


def loop_fragility(values, rounding, k):
    """Heads ``a`` chosen and ``b`` left out that may change places, ``|v_a - v_b| <= e_a +
    e_b``, by a loop over pairs; and whether any two chosen heads may."""
    fragile = set()
    for a in range(k):
        for b in range(k, len(values)):
            if abs(values[a] - values[b]) <= rounding[a] + rounding[b]:
                fragile.update((a, b))
    order = any(
        abs(values[a] - values[b]) <= rounding[a] + rounding[b]
        for a in range(k)
        for b in range(a + 1, k)
    )
    return len(fragile), bool(fragile), bool(fragile) or order


def test_each_row_states_the_heads_within_rounding_of_its_cut(grid):
    _, _, _, result = grid
    heads = result.heads.set_index(["layer", "head"])
    u = 2.0**-24
    for _, row in result.table.iloc[1:].iterrows():
        ranking = head_ranking(result.heads, row["channel"], row["order"], seed=1)
        at = list(zip(ranking["layer"], ranking["head"], strict=True))
        if row["channel"] == "random":
            rounding = [0.0] * len(at)
        elif row["channel"] == "gradient":
            rounding = [heads.loc[h, "gradient_rounding"] for h in at]
        else:
            column = CHANNEL_COLUMNS[row["channel"]]
            # a head mean of float32 row statistics over at most n keys: u (n + 2) (|v| + log n)
            n, v = heads["n_keys"], heads[column].abs()
            rounding = [u * (n[h] + 2) * (v[h] + math.log(n[h])) for h in at]
        want = loop_fragility(ranking["value"].tolist(), rounding, int(row["k"]))
        assert (row["n_fragile_heads"], row["heads_edge"], row["order_edge"]) == want, row


def test_every_float_column_of_prunes_tables_has_a_rule(grid):
    _, _, _, result = grid
    for name, frame in (("prune", result.table), ("prune_heads", result.heads)):
        floats = [c for c, t in frame.dtypes.items() if pd.api.types.is_float_dtype(t)]
        assert floats and [c for c in floats if c not in HELD[name]] == [], name


def test_prune_rows_are_the_ranked_heads_under_ablate(grid):
    model, profile, evaluation, result = grid
    ranking = head_ranking(result.heads, "sink_mass", "high")
    row = result.table[
        (result.table["channel"] == "sink_mass")
        & (result.table["order"] == "high")
        & (result.table["ablation"] == "sink")
        & (result.table["k"] == 2)
    ].iloc[0]
    chosen = list(zip(ranking["layer"][:2], ranking["head"][:2], strict=True))
    assert row["heads"] == ",".join(f"{a}.{b}" for a, b in chosen)
    plan: dict[int, list[int]] = {}
    for layer, head in chosen:
        plan.setdefault(int(layer), []).append(int(head))
    with ablate(model, plan, "sink"):
        got = window_nll(model, evaluation)
    assert row["mean_nll"] == float(np.mean(got.losses))
    # the largest window bound: it bounds the mean and every resample's weighted mean
    assert row["nll_rounding"] == float(np.max(got.rounding))
    assert (got.rounding > 0).all() and np.ptp(got.rounding) > 0


def test_gradient_importance_is_the_summed_absolute_gate_gradient():
    model = tiny("gpt_neox")
    wins = windows(3)
    expected = torch.zeros(2, 4, dtype=torch.float64)
    for window in wins:
        ids = torch.as_tensor([window])
        gates = torch.ones(2, 4, requires_grad=True)
        with head_gates(model, gates):
            loss = model(input_ids=ids, labels=ids).loss
        (grad,) = torch.autograd.grad(loss, gates)
        expected += grad.abs().double()
    got = gradient_importance(model, wins, batch_size=2)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-7)
    assert all(p.requires_grad for p in model.parameters())
    assert all(p.grad is None for p in model.parameters())


def test_result_is_json_ready_and_drawn(grid, tmp_path):
    from attncoda.experiments.prune._figure import prune_figure

    _, _, _, result = grid
    assert len(result.heads) == 8
    assert json.loads(json.dumps(result.summary, allow_nan=False))["n_heads"] == 4
    figure = prune_figure(result.table, tmp_path / "prune.png", model="tiny")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_prune_errors():
    model = tiny("llama")
    profile, evaluation = split_windows(windows(), 3, 3)

    def call(**kwargs):
        args = dict(channels=["random"], orders=["high"], ablations=["zero"], ks=[1])
        args.update(kwargs)
        return prune_model(model, None, profile, evaluation, **args)

    with raises(
        "unknown channel 'entropy': use one of sink_mass, sink_balance, content_entropy, "
        "full_entropy, random, gradient"
    ):
        call(channels=["random", "entropy"])
    with raises("unknown order 'top': use one of high, low"):
        call(orders=["top"])
    with raises("unknown ablation 'mean': use one of zero, uniform, sink"):
        call(ablations=["mean"])
    with raises("channels is empty: give at least one"):
        call(channels=[])
    with raises("ks is empty: give at least one"):
        call(ks=[])
    with raises("k=9 is more than the 8 heads of tiny"):
        call(ks=[1, 9], model_name="tiny")
    with raises("k must be a positive integer, got 0"):
        call(ks=[0])
    with raises("k must be a positive integer, got 1.5"):
        call(ks=[1.5])
    with raises("batch_size must be a positive integer, got 0"):
        call(batch_size=0)
    with raises(
        "eval window 0 equals profile window 3: evaluate on held-out windows, disjoint "
        "from the profiling ones"
    ):
        prune_model(model, None, windows()[:4], evaluation, channels=["random"], ks=[1])
    with raises("profile_windows is empty: give at least one window of token ids"):
        prune_model(model, None, [], evaluation, channels=["random"], ks=[1])
    with raises(
        "eval_windows window 1 has 1 tokens: a window needs at least 2 (one predicted token)"
    ):
        prune_model(model, None, profile, [[1, 2], [3]], channels=["random"], ks=[1])


def test_prune_ranks_by_the_capture_it_is_given_or_captures_by_its_method():
    from attncoda.capture import capture_frame, capture_windows
    from attncoda.experiments.profile import head_summary

    model = tiny("llama")
    profile, evaluation = split_windows(windows(), 3, 3)
    args = dict(channels=["content_entropy"], orders=["high"], ks=[1], n_boot=1)
    fast_cap = capture_windows(model, profile, record_rows="none", method="fast", kernel="sdpa")
    # the reference: the head table of a capture made apart, by the fast method
    want = head_summary(capture_frame(fast_cap))
    by_method = prune_model(model, None, profile, evaluation, method="fast", kernel="sdpa", **args)
    given = prune_model(model, None, profile, evaluation, capture=fast_cap, **args)
    exact = prune_model(model, None, profile, evaluation, method="exact", **args)
    for result in (by_method, given):
        pd.testing.assert_frame_equal(result.heads, want, check_exact=True)
        assert (result.summary["method"], result.summary["kernel"]) == ("fast", "sdpa")
    assert (exact.summary["method"], exact.summary["kernel"]) == ("exact", None)
    # the exact path's statistics: float32 rounding apart (tiny model, 14 tokens)
    columns = ["sink_mass", "entropy", "content_entropy"]
    np.testing.assert_allclose(exact.heads[columns], want[columns], rtol=0, atol=1e-5)
    assert not exact.heads[columns].equals(want[columns])
    with raises(
        "method='fast' and kernel='auto' say how prune captures, but a capture is given (made "
        "by its own method, 'fast'): drop method= and kernel="
    ):
        prune_model(model, None, profile, evaluation, capture=fast_cap, method="fast", **args)
    with raises(
        "the capture's window 0 is not profile_windows window 0: capture the "
        "profile_windows, in their order"
    ):
        prune_model(model, None, evaluation, profile, capture=fast_cap, **args)
    with raises(
        "the capture read 3 windows, but there are 2 profile_windows: capture the "
        "profile_windows"
    ):
        prune_model(model, None, profile[:2], evaluation, capture=fast_cap, **args)


def test_split_windows():
    wins = windows(8)
    profile, evaluation = split_windows(wins, 3, 2)
    assert profile == wins[:3] and evaluation == wins[6:]
    with raises(
        "n_profile + n_eval = 9 windows, but only 8 are given: profiling and evaluation "
        "windows must be disjoint"
    ):
        split_windows(wins, 5, 4)
    with raises("n_eval must be a positive integer, got 0"):
        split_windows(wins, 5, 0)


# --- the paired bootstrap interval of a ratio -------------------------------------------------


def bootstrap_reference(pruned, unpruned, n_boot, seed):
    """The interval by a plain loop: draw window indices, recompute both mean losses, take
    the ratio of perplexities and its 2.5 and 97.5 percentiles."""
    n = len(pruned)
    draws = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    ratios = []
    for d in draws:
        perplexity_pruned = math.exp(sum(pruned[i] for i in d) / n)
        perplexity_unpruned = math.exp(sum(unpruned[i] for i in d) / n)
        ratios.append(perplexity_pruned / perplexity_unpruned)
    return np.percentile(ratios, [2.5, 97.5])


@pytest.mark.parametrize("n_windows", [10, 16, 40])
def test_ratio_interval_equals_a_plain_bootstrap_loop(n_windows):
    rng = np.random.default_rng(n_windows)
    unpruned = rng.gamma(4.0, 0.8, size=n_windows)  # window losses of 1-6 nats
    pruned = unpruned + rng.normal(0.3, 0.2, size=n_windows)
    weights = window_resamples(n_windows, 500, seed=7)
    low, high, method, n, n_boot, note = ratio_interval(pruned, unpruned, weights)
    want = bootstrap_reference(pruned.tolist(), unpruned.tolist(), 500, 7)
    # Summation order differs (a matrix product against a Python loop): rounding only.
    np.testing.assert_allclose([low, high], want, rtol=1e-12)
    assert low < math.exp(pruned.mean() - unpruned.mean()) < high
    assert (method, n, n_boot, note) == (
        "paired percentile bootstrap over windows",
        n_windows,
        500,
        "",
    )


def test_ratio_interval_is_paired():
    # Every window loses c = 0.25 nats more when pruned: every resample's ratio is exp(c),
    # however different the windows are. An unpaired bootstrap would be wide here.
    unpruned = np.random.default_rng(0).uniform(1.0, 8.0, size=16)
    pruned = unpruned + 0.25
    low, high, *_ = ratio_interval(pruned, unpruned, window_resamples(16, 300, seed=1))
    assert low == pytest.approx(math.exp(0.25), rel=1e-12)
    assert high == pytest.approx(math.exp(0.25), rel=1e-12)
    assert high - low < 1e-12


def test_too_few_windows_give_no_interval_and_say_why():
    weights = window_resamples(9, 300, seed=1)
    assert weights.shape == (0, 9)
    low, high, method, n, n_boot, note = ratio_interval(np.ones(9), np.zeros(9), weights)
    assert math.isnan(low) and math.isnan(high)
    assert (method, n, n_boot, note) == ("", 9, 0, "no interval: 9 windows, fewer than 10")
    with raises(
        "the window losses of the pruned and the unpruned model must be two vectors over the "
        "same windows; got shapes (10,), (9,) and resamples of (10,): evaluate both on the "
        "same windows"
    ):
        ratio_interval(np.ones(10), np.zeros(9), window_resamples(10, 5, seed=0))


def test_prune_gives_each_ratio_the_paired_interval_of_its_window_losses():
    model = tiny("llama")
    profile, evaluation = split_windows(windows(12), 2, 10)
    result = prune_model(
        model,
        None,
        profile,
        evaluation,
        channels=["random"],
        orders=["high"],
        ks=[2],
        seed=5,
        n_boot=200,
    )
    base, row = result.table.iloc[0], result.table.iloc[1]
    assert math.isnan(base["ratio_ci_low"]) and base["ci_note"] == BASELINE_NOTE
    plan: dict[int, list[int]] = {}
    for label in row["heads"].split(","):
        layer, head = map(int, label.split("."))
        plan.setdefault(layer, []).append(head)
    unpruned = window_losses(model, evaluation)
    with ablate(model, plan, "zero"):
        pruned = window_losses(model, evaluation)
    want = bootstrap_reference(pruned.tolist(), unpruned.tolist(), 200, 5)
    np.testing.assert_allclose([row["ratio_ci_low"], row["ratio_ci_high"]], want, rtol=1e-12)
    assert row["ratio_ci_low"] <= row["ratio"] <= row["ratio_ci_high"]
    assert (row["ci_method"], row["n_windows"], row["n_boot"], row["ci_note"]) == (
        "paired percentile bootstrap over windows",
        10,
        200,
        "",
    )
    with raises("n_boot must be a positive int (bootstrap resamples over windows); got 0"):
        prune_model(model, None, profile, evaluation, channels=["random"], ks=[1], n_boot=0)


def test_fitting_ks_keeps_those_that_fit_and_else_prunes_half_the_heads():
    from attncoda.experiments.prune import fitting_ks

    assert fitting_ks((64, 16, 16), 270, "smollm2") == ((16, 64), "")
    assert fitting_ks((1, 2, 4, 8, 16), 8, "tiny") == (
        (1, 2, 4, 8),
        "k 16 is more than the 8 heads of tiny: left out",
    )
    assert fitting_ks((16, 64), 8, "tiny") == (
        (4,),
        "ks 16, 64 are more than the 8 heads of tiny: k 4 (half its heads) pruned instead",
    )
    assert fitting_ks((2,), 1, "one") == (
        (1,),
        "k 2 is more than the 1 heads of one: k 1 (half its heads) pruned instead",
    )


@pytest.mark.parametrize("scale", ["demo", "full"])
def test_every_shipped_checkpoint_is_pruned_at_some_k_at_both_scales(scale):
    # The heads of each shipped checkpoint from its config.json (no model loaded): 8 for the
    # tiny size (2 layers x 4 heads), 16 for the small one (4 x 4).
    from attncoda.experiments.prune import fitting_ks
    from attncoda.models.shipped import SHIPPED, checkpoint_folder
    from attncoda.run.config import SCALES

    ks = SCALES[scale]["prune"]["ks"]
    heads = set()
    for name, run in SHIPPED.items():
        for step in run.steps:
            folder = checkpoint_folder(name, f"step{step}")
            config = json.loads((folder / "config.json").read_text())
            total = config["num_hidden_layers"] * config["num_attention_heads"]
            heads.add(total)
            kept, _ = fitting_ks(ks, total, name)
            assert kept and all(1 <= k <= total for k in kept)
            assert set(kept) == ({k for k in ks if k <= total} or {total // 2})
    assert heads == {8, 16}


def test_the_summary_and_the_report_say_which_heads_are_on_the_edge():
    from attncoda.experiments.prune import ratio_text
    from attncoda.experiments.prune._section import _ratio
    from attncoda.experiments.prune._summary import summary

    table = pd.DataFrame(
        {
            "model": ["m"] * 3,
            "revision": ["-"] * 3,
            "channel": ["none", "sink_mass", "content_entropy"],
            "order": ["none", "high", "high"],
            "ablation": ["none", "zero", "zero"],
            "k": [0, 4, 4],
            "perplexity": [20.0, 40.0, 30.0],
            "ratio": [1.0, 2.0, 1.5],
            "ratio_ci_low": [np.nan, 1.8, 1.4],
            "ratio_ci_high": [np.nan, 2.2, 1.6],
            "n_windows": [16] * 3,
            "n_boot": [0, 1000, 1000],
            "ci_note": [BASELINE_NOTE, "", ""],
            "nll_rounding": [0.0061, 0.0062, 0.0063],
            "n_fragile_heads": [0, 3, 0],
            "heads_edge": [False, True, False],
        }
    )
    text = summary({"prune": table}, lambda *_: {}, "first")
    assert "unpruned perplexity: 20.000 on 16 windows (its mean NLL good to 0.0061 nats)" in text
    (edge,) = [line for line in text.splitlines() if "sink_mass" in line]
    assert edge.endswith("heads on the edge: 3 within rounding of the cut")
    (decided,) = [line for line in text.splitlines() if "content_entropy" in line]
    assert "edge" not in decided
    assert text.splitlines()[-1] == (
        "  1 of 2 rows choose heads within rounding of their cut: another machine may prune "
        "other heads there"
    )
    assert _ratio(table.iloc[1]).endswith(
        "; heads on the edge: 3 within rounding of the cut, another machine may prune others"
    )
    assert "edge" not in _ratio(table.iloc[2])
    assert ratio_text(table.iloc[1]).endswith(", heads on the edge")
    assert "edge" not in ratio_text(table.iloc[2])
    # a table written before the columns existed reads as before
    old = table.drop(columns=["nll_rounding", "n_fragile_heads", "heads_edge"])
    assert "edge" not in summary({"prune": old}, lambda *_: {}, "first")
    assert "good to" not in summary({"prune": old}, lambda *_: {}, "first")
