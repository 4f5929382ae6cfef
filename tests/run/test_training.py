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


def _assert_exact_split(table: pd.DataFrame) -> None:
    """The sink and content parts add up to the entropy change at every level and pair."""
    residual = (table["delta_sink"] + table["delta_content"] - table["delta_entropy"]).abs()
    # Float64 means of float64 row splits: the rounding is ~1e-15 nats, far inside 1e-10.
    assert residual.max() <= 1e-10
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
    _assert_exact_split(table)
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
def default_series(tmp_path_factory: pytest.TempPathFactory):
    """The default Bigram-Backcopy series (about 80-150 s on one thread of a shared CPU)."""
    folder = tmp_path_factory.mktemp("default") / "series"
    return folder, train_tiny(folder, TrainConfig(task="bigram-backcopy"), progress=False)


@pytest.mark.slow
def test_a_sink_grows_on_the_default_series(default_series):
    _, result = default_series
    first = np.array(result.bos_attention_non_trigger[0])  # (layer, head)
    last = np.array(result.bos_attention_non_trigger[-1])
    assert first.max() < 0.5  # no head has a sink at initialisation
    assert last.max() > 0.5  # at least one has one at the end
    # and an active-dormant head: a sink at non-trigger queries, none at triggers
    trigger_last = np.array(result.bos_attention_trigger[-1])
    assert ((last > 0.5) & (trigger_last < 0.1)).any()


@pytest.mark.slow
def test_collapse_on_the_default_series_splits_exactly_and_the_sink_dominates(
    default_series, tmp_path
):
    folder, _ = default_series
    table, _ = run_collapse(str(folder), tmp_path / "collapse", docs=16, max_tokens=64)
    _assert_exact_split(table)
    model = table.query("pair_kind == 'first_last' and level == 'model'").iloc[0]
    # Measured 79% (README); a sink that grows must carry most of the drop.
    assert model["delta_entropy"] < 0 and model["sink_share"] > 0.5


@pytest.mark.slow
def test_predictor_apply_shipped_knows_the_default_series_as_a_training_model(
    default_series, tmp_path, capsys
):
    """``train-tiny --task bigram-backcopy --seed 0`` at step 2000 is the shipped predictor's
    training model ``bigram-backcopy-seed0@step2000``: it is reported as that training model,
    not as a test (by its weights where the shipped file holds the weights hash of the
    checkpoint it was fitted on, else by its recipe: task, full config, seed, step). Step
    1000 of the same run is interpolated (between step512 and step2000), never held out."""
    from attncoda.cli import main
    from attncoda.experiments.predictor import Predictor, shipped_predictor
    from attncoda.training.identity import checkpoint_recipe

    folder, _ = default_series
    out = tmp_path / "apply"
    args = ["predictor", "apply", "shipped", str(folder / "step2000"), "--docs", "2"]
    assert main([*args, "--out", str(out)]) == 0
    (row,) = pd.read_parquet(out / "tables" / "predictor.parquet").to_dict("records")
    assert row["in_training_set"] and row["relation"] == "training" and not row["counted"]
    assert row["matched_training_model"] == "bigram-backcopy-seed0@step2000"
    assert row["matched_by"] in ("weights", "recipe")
    said = f"training model bigram-backcopy-seed0@step2000 (matched by {row['matched_by']})"
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
def test_the_default_series_retrained_anywhere_is_matched_by_weights(default_series):
    """Training is bit-identical on every x86-64 CPU (tests/training/test_bit_identity.py):
    the step 2000 of ``train-tiny --task bigram-backcopy --seed 0`` retrained here has the
    weights hash the shipped predictor recorded of its training checkpoint."""
    from attncoda.experiments.predictor import Predictor, shipped_predictor
    from attncoda.models.load import load_model
    from attncoda.run.identity import identity_of

    folder, _ = default_series
    identity = identity_of(load_model(str(folder / "step2000")))
    predictor = Predictor.from_json(shipped_predictor())
    assert predictor.training_match(["x"], identity) == (
        "bigram-backcopy-seed0@step2000",
        "weights",
    )
