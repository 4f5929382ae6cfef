"""The top-level API: ``ac.profile``, ``ac.flips``, ... on captures and on model specs."""

from __future__ import annotations

import json

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

import attncoda as ac  # noqa: E402
from attncoda.experiments.contract import head_rows  # noqa: E402
from attncoda.experiments.flips import flips as flips_function  # noqa: E402
from tiny_models import tiny  # noqa: E402

KEYS = ["model", "revision", "family"]


@pytest.fixture(scope="module")
def windows() -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [[int(t) for t in rng.integers(3, 60, size=20)] for _ in range(4)]


@pytest.fixture(scope="module")
def cap(windows):
    return ac.capture_windows(tiny("llama"), windows)


def test_flips_on_a_capture_is_the_experiment_on_its_rows(cap):
    result = ac.flips(cap, n_boot=40, seed=3)
    reference = flips_function(head_rows(cap, "capture"), n_boot=40, seed=3, tol=1e-6).table
    table = result.tables["flips"]
    assert list(table.columns[:3]) == KEYS
    assert (table["family"] == "given attention").all() and (table["revision"] == "-").all()
    pd.testing.assert_frame_equal(
        table.drop(columns=["revision", "family"]), reference, check_exact=True
    )
    assert set(result.tables) == {"flips", "flips_by_layer"}


def test_names_label_the_tables_and_results_concatenate_in_order(cap, windows):
    other = ac.capture_windows(tiny("llama", seed=1), windows)
    result = ac.profile([cap, other], names=["a", "b"])
    heads = result.tables["profile_heads"]
    assert list(dict.fromkeys(heads["model"])) == ["a", "b"]
    assert len(heads) == 2 * cap.n_layers * cap.n_heads
    # Each model's rows are its own capture's head means (nats).
    mean_entropy = np.where(other.has_content, other.entropy, 0).sum(
        (0, 3)
    ) / other.has_content.sum((0, 3))
    got = heads[heads["model"] == "b"].sort_values(["layer", "head"])["entropy"].to_numpy()
    np.testing.assert_allclose(got, mean_entropy.reshape(-1), rtol=1e-12)


def test_safety_runs_flips_first_and_predict_reads_its_flip_rate(cap):
    safety = ac.safety(cap)
    assert {"safety", "safety_grid"} == set(safety.tables)
    predicted = ac.predict(cap).table
    flip = ac.flips(cap).table
    measured = float(predicted["measured"].iloc[0])
    # The shipped predictor's target is the mean over metrics of each metric's flip rate.
    assert measured == pytest.approx(_mean_of_rates(flip), rel=1e-12)


def _mean_of_rates(flip: pd.DataFrame) -> float:
    """The mean over metrics of ``flips / (n_triplets - n_ties)``, from the counts alone."""
    counts = zip(flip["flips"], flip["n_triplets"], flip["n_ties"], strict=True)
    rates = [f / (t - k) for f, t, k in counts]
    return sum(rates) / len(rates)


def test_predict_measures_the_mean_of_per_metric_rates_when_some_triplets_are_ties():
    # Two kinds of ties, so that the metrics decide different numbers of triplets:
    # - head 2 of layer 0 is head 1 of layer 0: for every other head A, D(A, 1) = D(A, 2)
    #   exactly (the same rows through the same operations), 8 - 2 = 6 ties in every metric;
    # - head 3 of layer 1 is head 0 of layer 0 with each row's content keys reversed: the
    #   same entropies, other rows, so 6 more ties in entropy_gap alone. Its two distances
    #   differ by float32 rounding of the entropies only (5e-8 measured), a twelfth of the
    #   tie tolerance 1e-6 * max|D| (6e-7): a tie on any CPU.
    # Then the mean of per-metric rates and the rate pooled over metrics are two different
    # numbers, and only the first is the predictor's target.
    rng = np.random.default_rng(5)
    n_docs, n_layers, n_heads, n = 3, 2, 4, 14
    z = rng.normal(size=(n_docs, n_layers, n_heads, n, n)) * 2
    z[..., 0] += rng.uniform(0, 4, size=(n_docs, n_layers, n_heads, 1))  # a sink on key 0
    z[:, 0, 2] = z[:, 0, 1]
    for i in range(1, n):
        z[:, 1, 3, i, 1 : i + 1] = z[:, 0, 0, i, 1 : i + 1][..., ::-1]
    z[:, 1, 3, :, 0] = z[:, 0, 0, :, 0]
    z = np.where(np.tril(np.ones((n, n), dtype=bool)), z, -np.inf)
    given = ac.from_attentions(z, kind="logits")
    flip = ac.flips(given).table.set_index("metric")
    ties = n_layers * n_heads - 2
    assert flip["n_ties"].to_dict() == {
        "cosine": ties,
        "jsd": ties,
        "entropy_gap": 2 * ties,
        "hellinger": ties,
        "tv": ties,
    }
    measured = float(ac.predict(given).table["measured"].iloc[0])
    assert measured == pytest.approx(_mean_of_rates(flip), rel=1e-12)
    pooled = flip["flips"].sum() / (flip["n_triplets"] - flip["n_ties"]).sum()
    assert abs(measured - pooled) > 1e-4  # 0.33756 against 0.33706


def test_collapse_over_captures_splits_the_change_of_their_mean_entropy(windows):
    caps = [ac.capture_windows(tiny("llama", seed=k), windows) for k in range(3)]
    result = ac.collapse(caps, steps=[0, 100, 200], names="toy")
    table = result.tables["collapse"]
    row = table[(table["pair_kind"] == "first_last") & (table["level"] == "model")].iloc[0]
    assert (row["label_from"], row["label_to"]) == ("step0", "step200")

    def mean_h(c):
        return float(c.entropy[c.has_content].mean())

    assert row["entropy_from"] == pytest.approx(mean_h(caps[0]), rel=1e-12)
    assert row["entropy_to"] == pytest.approx(mean_h(caps[2]), rel=1e-12)
    assert set(table["model"]) == {"toy"}


def test_captures_run_through_the_runner_and_store_a_run_folder_with_out(cap, tmp_path):
    from attncoda.store.runs import read_run_tables

    result = ac.cluster(cap, names=["toy"], out=tmp_path / "run")
    stored = read_run_tables(tmp_path / "run")
    for name, table in result.tables.items():
        pd.testing.assert_frame_equal(table, stored[name], check_exact=True)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"]["models"] == ["toy"]
    assert manifest["model_info"]["toy@-"]["source"] == "capture"
    # Each model's summary is its unit's (cluster's artifact: the MDS stress of each view).
    assert set(result.summary) == {"toy"}
    assert {"keep", "drop"} <= set(result.summary["toy"]["mds_stress"])


def test_a_spec_at_a_revision_names_its_summary_by_both():
    result = ac.cluster("bigram-backcopy@step1000", docs=2)
    assert set(result.summary) == {"bigram-backcopy@step1000"}
    assert {"keep", "drop"} <= set(result.summary["bigram-backcopy@step1000"]["mds_stress"])


def test_collapse_over_captures_keeps_the_series_summary(windows):
    caps = [ac.capture_windows(tiny("llama", seed=k), windows) for k in range(2)]
    result = ac.collapse(caps, steps=[5, 9], names="toy")
    points = result.summary["series"]["points"]
    assert [(p["step"], p["label"], p["spec"]) for p in points] == [
        (5, "step5", "toy@step5"),
        (9, "step9", "toy@step9"),
    ]


def test_result_figure_and_notebook_views(cap):
    from matplotlib.figure import Figure

    result = ac.profile(cap)
    assert isinstance(result.figure(), Figure)
    page = result._repr_html_()
    assert "<table" in page and "data:image/png;base64," in page


# A notebook kernel starts IPython, then the user imports attncoda: the capture's view is
# IPython's own formatter output, the figure drawn by the report (the capture layer does not
# import the report; the top-level package registers the view).
NOTEBOOK = """
import sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import numpy as np
import attncoda as ac
logits = np.random.default_rng(0).normal(size=(2, 3, 2, 6, 6))
cap = ac.from_attentions(logits, kind="logits", causal=False)
data, _ = shell.display_formatter.format(cap)
assert "attncoda.report.notebook" in sys.modules
print(cap.n_layers, "|", data["text/html"])
"""


def test_a_capture_shows_its_table_and_figure_in_a_notebook():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", NOTEBOOK], capture_output=True, text=True, check=True
    )
    n_layers, view = done.stdout.split(" | ", 1)
    assert "<table" in view and "data:image/png;base64," in view
    assert f"Capture: 2 documents, {n_layers} layers x 2 heads" in view


def test_outside_ipython_a_capture_has_no_notebook_view_and_attncoda_lists_its_names(cap):
    assert not hasattr(cap, "_repr_html_")
    assert dir(ac) == sorted(ac.__all__)
    assert {"flips", "cluster", "prune", "capture_windows"} <= set(dir(ac))
    assert not {"Any", "importlib", "types", "sys"} & set(dir(ac))


def test_a_figure_of_one_model_among_several_is_chosen_by_name(cap, windows):
    other = ac.capture_windows(tiny("llama", seed=1), windows)
    result = ac.cluster([cap, other], names=["a", "b"])
    with pytest.raises(ac.AttncodaError):
        result.figure()
    assert "no figure" in result._repr_html_()
    result.figure(model="b")
    with pytest.raises(ac.AttncodaError, match="no model 'c'"):
        result.figure(model="c")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: ac.flips(c, n_bootstrap=3), "unknown setting 'n_bootstrap' of flips"),
        (lambda c: ac.prune(c), "prune needs the model itself"),
        (lambda c: ac.flips([c, "minilm"]), "mix of model specs and captures"),
        (lambda c: ac.flips([]), "no source given"),
        (lambda c: ac.flips(3.5), "cannot run on float"),
        (lambda c: ac.flips([c, c], names=["x"]), "must be 2 distinct names"),
        (lambda c: ac.collapse([c, c], steps=[0]), "one training step per capture"),
        (lambda c: ac.flips(c, steps=[0]), "steps= is for an experiment over a checkpoint series"),
        (lambda c: ac.flips("minilm", names="m"), "steps= and names= are for captures"),
    ],
)
def test_bad_calls_are_refused_by_name(cap, call, message):
    with pytest.raises(ac.AttncodaError, match=message):
        call(cap)


@pytest.mark.slow
def test_flips_on_a_model_spec_is_the_cli_run(tmp_path):
    from attncoda.cli import main
    from attncoda.store.runs import read_run_tables

    result = ac.flips("minilm", n_boot=30, docs=4, max_tokens=64, out=tmp_path / "api")
    assert result.path == tmp_path / "api"
    assert (tmp_path / "api" / "manifest.json").is_file()
    command = ["flips", "minilm", "--n-boot", "30", "--docs", "4", "--max-tokens", "64"]
    assert main([*command, "--out", str(tmp_path / "cli")]) == 0
    stored = read_run_tables(tmp_path / "cli")
    for name in ("flips", "flips_by_layer"):
        pd.testing.assert_frame_equal(result.tables[name], stored[name], check_exact=True)
    assert result.tables["flips"]["family"].iloc[0] == "BERT"
    # Without out, the run goes to a temporary folder and only the tables come back.
    again = ac.flips("minilm", n_boot=30, docs=4, max_tokens=64)
    assert again.path is None
    pd.testing.assert_frame_equal(again.tables["flips"], stored["flips"], check_exact=True)
