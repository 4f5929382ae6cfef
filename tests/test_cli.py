"""The command line: each command runs end to end on real offline models and writes its files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attncoda.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A tiny random Llama saved as a local folder, with MiniLM's tokenizer (offline)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from attncoda.models.load import load_model

    _, tokenizer, _ = load_model("minilm")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_demo_example_only(capsys):
    assert main(["demo", "--example-only"]) == 0
    assert "aitchison content" in capsys.readouterr().out


def test_profile_writes_its_files(tmp_path, capsys):
    assert main(["profile", "minilm", "--docs", "2", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "sink mass" in printed and "wrote" in printed
    heads = pd.read_parquet(tmp_path / "heads.parquet")
    assert len(heads) == 6 * 12
    assert json.loads((tmp_path / "manifest.json").read_text())["command"] == "profile"


def test_flips_cluster_safety(tmp_path, capsys):
    args = ["--docs", "2"]
    assert main(["flips", "minilm", "--n-boot", "20", "--out", str(tmp_path / "f"), *args]) == 0
    table = pd.read_parquet(tmp_path / "f" / "flips.parquet")
    assert list(table["metric"]) == ["cosine", "jsd", "entropy_gap", "hellinger", "tv"]
    assert main(["cluster", "minilm", "--out", str(tmp_path / "c"), *args]) == 0
    assert json.loads((tmp_path / "c" / "artifact.json").read_text())["n_heads"] == 72
    assert main(["safety", "minilm", "--out", str(tmp_path / "s"), *args]) == 0
    assert (tmp_path / "s" / "safety.png").read_bytes()[:4] == b"\x89PNG"
    assert "flip rate" in capsys.readouterr().out


def test_predictor_fit_and_apply(tmp_path, capsys, tiny_llama):
    path = tmp_path / "predictor.json"
    # The leave-one-out interval needs at least 4 models: two task checkpoints join in.
    series = tmp_path / "task"
    assert main(["train-tiny", str(series), "--task", "bigram-backcopy", "--steps", "4"]) == 0
    models = ["minilm", tiny_llama, str(series / "step0"), str(series / "step4")]
    assert main(["predictor", "fit", *models, "--docs", "2", "--out", str(path)]) == 0
    assert json.loads(path.read_text())["training_models"]
    assert main(["predictor", "apply", str(path), "minilm", "--docs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "measured" in printed
    assert any(v in printed for v in ("confirmed", "abstained", "failed"))


def test_errors_are_one_line(capsys):
    assert main(["profile", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attncoda: error: ") and "no-such-model" in err
    assert main(["predictor", "fit", "minilm"]) == 2
    assert "needs --out" in capsys.readouterr().err


def test_train_tiny_then_collapse(tmp_path, capsys):
    series = tmp_path / "series"
    assert main(["train-tiny", str(series), "--steps", "4", "--size", "tiny"]) == 0
    assert sorted(p.name for p in series.glob("step*")) == ["step0", "step1", "step2", "step4"]
    out = tmp_path / "collapse"
    assert main(["collapse", str(series), "--docs", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "first_last" in printed and "sink share" in printed
    table = pd.read_parquet(out / "collapse.parquet")
    model = table[table["level"] == "model"]
    assert (
        (model["delta_sink"] + model["delta_content"] - model["delta_entropy"]).abs() <= 1e-10
    ).all()
    assert (out / "collapse.png").read_bytes()[:4] == b"\x89PNG"


def test_prune(tmp_path, capsys, tiny_llama):
    out = tmp_path / "prune"
    args = [
        "prune",
        tiny_llama,
        "--channels",
        "sink_mass,random",
        "--k",
        "1,2",
        "--profile-docs",
        "2",
        "--eval-docs",
        "2",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    assert "unpruned perplexity" in capsys.readouterr().out
    table = pd.read_parquet(out / "prune.parquet")
    assert set(table["k"]) == {0, 1, 2}
    assert (out / "prune.png").read_bytes()[:4] == b"\x89PNG"


def test_shipped_predictor_loads_and_abstains_outside_its_range():
    from attncoda.experiments.predictor import Predictor
    from attncoda.run.conventions import shipped_predictor

    predictor = Predictor.from_json(shipped_predictor())
    assert "smollm2" in predictor.training_models and "minilm" in predictor.training_models
    inside = dict(zip(predictor.features, (lo for lo, _ in predictor.training_range), strict=True))
    assert not predictor.apply(inside).abstained
    outside = {**inside, "mean_sink_mass": 0.99}
    result = predictor.apply(outside)
    assert result.abstained and "mean_sink_mass" in result.reason


def test_profile_and_flips_read_saved_attention(tmp_path, capsys):
    """Attention saved by a past run (.npz, .pt, .safetensors) runs without any model."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    from tiny_models import VOCAB, tiny

    model = tiny("llama", eager=True)
    rng = np.random.default_rng(0)
    ids = torch.as_tensor(rng.integers(3, VOCAB, size=(3, 12)))
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions
    stacked = torch.stack(attentions, 1)
    np.savez(tmp_path / "a.npz", attentions=stacked.numpy(), input_ids=ids.numpy())
    torch.save(tuple(attentions), tmp_path / "a.pt")
    save_file({"scores": torch.log(stacked)}, str(tmp_path / "a.safetensors"))
    np.save(tmp_path / "ids.npy", ids.numpy())

    out = tmp_path / "p"
    assert main(["profile", "--attentions", str(tmp_path / "a.npz"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "a.npz: 3 documents of given attention, sink = first" in printed
    heads = pd.read_parquet(out / "heads.parquet")
    assert len(heads) == 2 * 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model_info"]["capture_mode"] == "given"
    files = [str(tmp_path / f"a.{ext}") for ext in ("npz", "pt", "safetensors")]
    flips_out = tmp_path / "f"
    args = ["flips", "--attentions", *files, "--tokens", str(tmp_path / "ids.npy")]
    assert main([*args, "--n-boot", "20", "--out", str(flips_out)]) == 0
    table = pd.read_parquet(flips_out / "flips.parquet")
    assert sorted(set(table["model"])) == ["a.npz", "a.pt", "a.safetensors"]
    rates = table.pivot(index="metric", columns="model", values="flip_rate")
    # The same attention three ways (probabilities twice, log-probabilities as logits):
    # one float32 rounding apart, so at most one boundary verdict per metric differs.
    spread = (rates.max(axis=1) - rates.min(axis=1)) * table["n_triplets"].max()
    assert float(spread.max()) <= 1.0 + 1e-9


def test_a_short_text_is_profiled_whole(tmp_path, capsys):
    """--docs is an upper bound: one paragraph gives one window, and the run says so."""
    text = tmp_path / "one-paragraph.txt"
    text.write_text("The river rose all night, and by dawn the fields were a lake.\n")
    out = tmp_path / "p"
    assert main(["profile", "minilm", "--text", str(text), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert (
        "note: the corpus gives 1 window of up to 128 tokens (docs=32 asked for): using all "
        "of them" in captured.err
    )
    assert "minilm: 1 window of up to 128 tokens" in captured.out
    rows = pd.read_parquet(out / "rows.parquet")
    assert set(rows["doc"]) == {0}
    assert json.loads((out / "manifest.json").read_text())["config"]["corpus"]["windows"] == 1


def test_safety_of_two_models_draws_one_figure_each(tmp_path, capsys, tiny_llama):
    out = tmp_path / "s"
    args = ["safety", "minilm", tiny_llama, "--docs", "2", "--bins", "2", "--out", str(out)]
    assert main(args) == 0
    pngs = sorted(p.name for p in out.glob("safety*.png"))
    assert len(pngs) == 2 and all(p.startswith("safety_") for p in pngs)
    assert pd.read_parquet(out / "safety_grid.parquet")["model"].nunique() == 2
