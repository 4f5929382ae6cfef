"""Collapse on a Bigram-Backcopy series: a run of the collapse experiment over its
checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pd = pytest.importorskip("pandas")

from attncoda.data.tasks import BigramBackcopy  # noqa: E402
from attncoda.run.reproduce import run_experiment  # noqa: E402
from attncoda.training.train import TrainConfig, train_tiny  # noqa: E402

LEVELS = {"model", "layer", "head"}


def run_collapse(series: str, out: Path, *, max_tokens: int, docs: int) -> tuple:
    """The collapse table of a run over ``series``, and one checkpoint unit's summary."""
    settings = {"collapse": {"docs": docs, "max_tokens": max_tokens}}
    run_experiment("collapse", [], out, series=series, settings=settings, progress=False)
    done = next((out / "units" / "collapse").glob("*/_done.json"))
    summary = json.loads(done.read_text())["facts"]["summary"]
    return pd.read_parquet(out / "tables" / "collapse.parquet"), summary


def _assert_every_level(table: pd.DataFrame) -> None:
    """The table splits every pair at every level (that the parts add up to the change is
    true by construction, so it is not what is checked here)."""
    assert set(table["level"]) == LEVELS
    assert set(table["pair_kind"]) == {"consecutive", "first_last"}


def _mean_entropy(folder: Path, ids: np.ndarray) -> float:
    """Mean H(p) over every (sequence, layer, head, query >= 1) from eager attention."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = model(input_ids=torch.from_numpy(ids), output_attentions=True).attentions
    rows = torch.stack(attentions).double()[:, :, :, 1:, :]  # query 0 has no content
    logs = torch.where(rows > 0, rows.log(), torch.zeros_like(rows))
    return float(-(rows * logs).sum(-1).mean())


def test_collapse_on_a_task_series_reads_task_sequences_and_splits_exactly(tmp_path: Path):
    series = tmp_path / "series"
    trained = train_tiny(
        series,
        TrainConfig(task="bigram-backcopy", steps=8, window=16, batch_size=4),
        progress=False,
    )
    out = tmp_path / "collapse"
    table, summary = run_collapse(str(series), out, max_tokens=16, docs=6)
    _assert_every_level(table)
    # The windows are the task's held-out sequences, the same at every checkpoint.
    ids = BigramBackcopy(seq_len=16).evaluation_sequences(6)
    assert summary["n_windows"] == 6 and summary["n_tokens"] == ids.size
    # Independent reference: the model-level first -> last entropy change from eager
    # attention weights (float32 softmax, so agreement to 1e-5 nats, not bit-identity).
    first_last = table.query("pair_kind == 'first_last' and level == 'model'")
    expected = _mean_entropy(trained.checkpoints[-1], ids) - _mean_entropy(
        trained.checkpoints[0], ids
    )
    assert float(first_last["delta_entropy"].iloc[0]) == pytest.approx(expected, abs=1e-5)


@pytest.fixture(scope="module")
def default_series() -> Path:
    """The shipped default Bigram-Backcopy series (attncoda.models.shipped)."""
    from attncoda.models.shipped import ASSETS, SERIES

    return ASSETS / SERIES


def _bos_attention(folder: Path, ids: np.ndarray, task: BigramBackcopy) -> tuple:
    """Mean attention on key 0 per (layer, head) at trigger and at other queries >= 1, from
    transformers' eager attention weights (an independent reading of the record)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        attentions = model(input_ids=torch.from_numpy(ids), output_attentions=True).attentions
    bos = torch.stack(attentions).double()[:, :, :, :, 0]  # (layer, seq, head, query)
    trigger = torch.from_numpy(task.trigger_queries(ids))  # (seq, query)
    rest = ~trigger
    rest[:, 0] = False  # query 0 sees key 0 alone

    def mean(mask: torch.Tensor) -> np.ndarray:
        return (bos * mask[None, :, None, :]).sum((1, 3)).numpy() / float(mask.sum())

    return mean(trigger), mean(rest)


def test_a_sink_grows_on_the_default_series(default_series):
    task = BigramBackcopy()
    ids = task.evaluation_sequences(16)
    first_t, first_n = _bos_attention(default_series / "step0", ids, task)
    last_t, last_n = _bos_attention(default_series / "step2000", ids, task)
    assert first_n.max() < 0.5  # no head has a sink at initialisation
    assert last_n.max() > 0.5  # at least one has one at the end
    # and an active-dormant head: a sink at non-trigger queries, none at triggers
    assert ((last_n > 0.5) & (last_t < 0.1)).any()


@pytest.mark.slow
def test_collapse_on_the_default_series_splits_exactly_and_the_sink_dominates(
    default_series, tmp_path
):
    table, _ = run_collapse(str(default_series), tmp_path / "collapse", docs=16, max_tokens=64)
    _assert_every_level(table)
    model = table.query("pair_kind == 'first_last' and level == 'model'").iloc[0]
    # Measured 79% (README); a sink that grows must carry most of the drop.
    assert model["delta_entropy"] < 0 and model["sink_share"] > 0.5
    # the Shapley share lies between the shares of the two one-sided orderings
    assert model["sink_share_low"] <= model["sink_share"] <= model["sink_share_high"]


@pytest.mark.slow
def test_predictor_apply_shipped_knows_the_default_series_as_a_training_model(
    default_series, tmp_path, capsys
):
    """The shipped series' step 2000 (``train-tiny --task bigram-backcopy --seed 0``) is the
    shipped predictor's training model ``bigram-backcopy-seed0@step2000``: it is reported as
    that training model, by its weights, not as a test (and by its recipe where the weights
    differ: task, full config, seed, step). Step 1000 of the same run is interpolated
    (between step512 and step2000), never held out."""
    from attncoda.cli import main
    from attncoda.experiments.predictor import Predictor, shipped_predictor
    from attncoda.training.identity import checkpoint_recipe

    folder = default_series
    out = tmp_path / "apply"
    args = ["predictor", "apply", "shipped", "bigram-backcopy@step2000", "--docs", "2"]
    assert main([*args, "--out", str(out)]) == 0
    (row,) = pd.read_parquet(out / "tables" / "predictor.parquet").to_dict("records")
    assert row["in_training_set"] and row["relation"] == "training" and not row["counted"]
    assert row["matched_training_model"] == "bigram-backcopy-seed0@step2000"
    assert row["matched_by"] == "weights"
    said = "training model bigram-backcopy-seed0@step2000 (matched by weights)"
    assert said in capsys.readouterr().out
    predictor = Predictor.from_json(shipped_predictor())
    by_recipe = {"weights_sha256": None, "recipe": checkpoint_recipe(folder / "step2000")}
    assert predictor.training_match(["x"], by_recipe) == (
        "bigram-backcopy-seed0@step2000",
        "recipe",
    )
    # step1000 of the same run was kept out of the fit: no training model, but no held-out
    # model either: a checkpoint between two of its run's training checkpoints
    kept_out = {"weights_sha256": None, "recipe": checkpoint_recipe(folder / "step1000")}
    assert predictor.training_match(["x"], kept_out) is None
    relation = predictor.relation(["x"], kept_out)
    assert relation.relation == "interpolated" and not relation.held_out
    assert relation.models[-2:] == (
        "bigram-backcopy-seed0@step512",
        "bigram-backcopy-seed0@step2000",
    )


@pytest.mark.slow
def test_the_predictor_knows_every_shipped_training_checkpoint_by_weights(default_series):
    """Each checkpoint of the shipped series that the predictor was fitted on is matched by
    the weights hash its file records: the shipped bits are those it was fitted on."""
    from attncoda.experiments.predictor import Predictor, shipped_predictor
    from attncoda.models.load import load_model
    from attncoda.run.loaded import identity_of

    predictor = Predictor.from_json(shipped_predictor())
    fitted = [m for m in predictor.training_models if m.startswith("bigram-backcopy-seed0@")]
    assert len(fitted) == 4
    for name in fitted:
        step = name.partition("@")[2]
        identity = identity_of(load_model(f"bigram-backcopy@{step}"))
        assert predictor.training_match(["x"], identity) == (name, "weights")
    # a shipped checkpoint of that run that was not fitted on is known as one by its recipe
    # (the folder's record), so it is never taken for a held-out model
    sister = identity_of(load_model("bigram-backcopy@step1000"))
    assert sister["recipe"] is not None and sister["recipe"]["step"] == 1000
    relation = predictor.relation(["bigram-backcopy step1000", "bigram-backcopy"], sister)
    assert (relation.relation, relation.how) == ("interpolated", "recipe")
    before = identity_of(load_model("bigram-backcopy@step16"))
    assert predictor.relation(["bigram-backcopy step16"], before).relation == "same run"
