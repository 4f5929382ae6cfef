"""The command line: each command runs end to end on real offline models into a run folder
(manifest.json, units/, tables/, report.html) and prints its summary from the tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attncoda.cli import main
from attncoda.experiments.cluster import VARIANTS

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


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def _unit_facts(out, experiment):
    done = next((out / "units" / experiment).glob("*/_done.json"))
    return json.loads(done.read_text())["facts"]


def test_profile_is_a_run_of_one_unit(tmp_path, capsys):
    assert main(["profile", "minilm", "--docs", "2", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "minilm: 2 windows of up to 128 tokens, sink = first" in printed
    assert "sink mass" in printed and f"report: {tmp_path / 'report.html'}" in printed
    heads = pd.read_parquet(tmp_path / "tables" / "profile_heads.parquet")
    assert len(heads) == 6 * 12
    assert list(heads.columns[:3]) == ["model", "revision", "family"]
    assert _manifest(tmp_path)["command"] == "profile"
    assert _manifest(tmp_path)["config"]["settings"] == {"profile": {"docs": 2, "max_tokens": 128}}
    # auto is the default device; the manifest and the report's run table say where it ran.
    import torch

    manifest = _manifest(tmp_path)
    used = "cuda" if torch.cuda.is_available() else "cpu"
    assert manifest["config"]["device"] == "auto" and manifest["device"] == used
    report = (tmp_path / "report.html").read_text()
    assert f"<td>device</td><td>{used}" in report and "(asked: auto)" in report


def test_cuda_without_a_gpu_is_one_line_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    assert main(["collapse", "bigram-backcopy", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "attncoda: error: device 'cuda' asked for, but torch sees no GPU: use cpu or auto\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_flips_writes_a_run_folder_that_report_renders(tmp_path, capsys):
    out = tmp_path / "f"
    assert main(["flips", "minilm", "--n-boot", "20", "--docs", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"manifest.json", "tables", "units", "report.html"}
    table = pd.read_parquet(out / "tables" / "flips.parquet")
    assert list(table["metric"]) == ["cosine", "jsd", "entropy_gap", "hellinger", "tv"]
    for row in table.itertuples(index=False):
        assert f"  minilm                   {row.metric:<12} {row.flip_rate:6.1%}" in printed
    config = _manifest(out)["config"]
    assert config["rows"] == {"docs": 2, "max_tokens": 128}
    assert config["settings"]["flips"]["n_boot"] == 20
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out == f"report: {out / 'report.html'}\n"
    html = (out / "report.html").read_text()
    assert 'id="flips"' in html and "Flip rate of head-similarity verdicts" in html
    # rerun on the finished folder: nothing computed, the same lines printed
    assert main(["flips", "minilm", "--n-boot", "20", "--docs", "2", "--out", str(out)]) == 0
    again = capsys.readouterr()
    assert again.out.splitlines()[:6] == printed.splitlines()[:6]
    assert "flips: 0 units run, 1 already finished" in again.err


def test_cluster_and_safety_are_runs_of_their_experiment(tmp_path, capsys):
    args = ["--docs", "2"]
    out = tmp_path / "c"
    assert main(["cluster", "minilm", "--n-clusters", "3", "--out", str(out), *args]) == 0
    printed = capsys.readouterr().out
    summary = pd.read_parquet(out / "tables" / "cluster_summary.parquet")
    keep = summary.set_index("variant").loc["keep", "spearman_axis1_vs_sink_mass"]
    assert f"  keep               {keep:+.3f}" in printed
    assert len(pd.read_parquet(out / "tables" / "cluster.parquet")) == 72
    # every pair of MiniLM's 72 heads under each variant, keyed by the run like every table
    distances = pd.read_parquet(out / "tables" / "cluster_distances.parquet")
    columns = ["model", "revision", "family", "variant", "head_a", "head_b", "n_rows"]
    assert list(distances.columns) == [*columns, "distance", "distance_rounding"]
    assert distances.groupby("variant").size().to_dict() == dict.fromkeys(VARIANTS, 72 * 71 // 2)
    assert (distances["head_a"] < distances["head_b"]).all()
    assert (distances["distance"] > 0).all() and distances["distance"].lt(float("inf")).all()
    assert _manifest(out)["config"]["settings"]["cluster"]["n_clusters"] == 3
    out = tmp_path / "s"
    assert main(["safety", "minilm", "--out", str(out), *args]) == 0
    # safety runs after flips: its folder holds both, flips first
    units = pd.read_parquet(out / "tables" / "units.parquet")
    assert list(units["experiment"]) == ["flips", "safety"]
    assert "flip rate" in capsys.readouterr().out


def test_predictor_fit_and_apply(tmp_path, capsys, tiny_llama):
    path = tmp_path / "predictor.json"
    # The CV+ interval needs at least 3 runs and, at alpha 0.2, 4 models: two checkpoints
    # of one task run join in (one run, 64-token task sequences read).
    series = tmp_path / "task"
    assert main(["train-tiny", str(series), "--task", "bigram-backcopy", "--steps", "4"]) == 0
    models = ["minilm", tiny_llama, str(series / "step0"), str(series / "step4")]
    fit = ["predictor", "fit", *models, "--docs", "2", "--alpha", "0.2", "--out", str(path)]
    assert main(fit) == 0
    fitted = json.loads(path.read_text())
    assert fitted["training_models"] and fitted["interval"]["alpha"] == 0.2
    assert fitted["interval"]["runs"] == ["minilm", tiny_llama, str(series), str(series)]
    assert [r["window_tokens"] for r in fitted["protocol"]["readings"]] == [128, 64]
    assert "CV+ over 3 runs" in capsys.readouterr().out
    out = tmp_path / "applied"
    assert main(["predictor", "apply", str(path), "minilm", "--docs", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    (row,) = pd.read_parquet(out / "tables" / "predictor.parquet").itertuples(index=False)
    # minilm is one of the models the predictor was just fitted on: known by its weights.
    assert row.in_training_set and (row.matched_training_model, row.matched_by) == (
        "minilm",
        "weights",
    )
    said = f"measured {row.measured:.1%}; training model minilm (matched by weights): no test"
    assert "minilm: " in printed and said in printed
    assert _manifest(out)["config"]["settings"]["predictor"] == {
        "predictor": str(path),
        "protocol": "fitted",
    }
    # fitted on 2 windows of 128 tokens, applied to the same: on protocol
    assert fitted["protocol"]["readings"][0]["windows"] == 2 and row.on_protocol


def test_errors_are_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "no-such-model"]) == 2
    err = capsys.readouterr().err
    # Refused before the run folder is made, not by the unit (tests/cli/test_cli_errors.py).
    head = "attncoda: error: unknown model spec 'no-such-"
    assert err.startswith(head) and len(err.splitlines()) == 1
    assert not (tmp_path / "attncoda-out").exists(), "a refused run left a folder"
    assert main(["predictor", "fit", "minilm"]) == 2
    assert "needs --out" in capsys.readouterr().err


def test_train_tiny_then_collapse(tmp_path, capsys, monkeypatch):
    series = tmp_path / "series"
    assert main(["train-tiny", str(series), "--steps", "4", "--size", "tiny"]) == 0
    assert sorted(p.name for p in series.glob("step*")) == ["step0", "step1", "step2", "step4"]
    monkeypatch.chdir(tmp_path)
    assert main(["collapse", str(series), "--docs", "4"]) == 0
    out = tmp_path / "attncoda-out" / "collapse" / "series"  # named after the series
    printed = capsys.readouterr().out
    assert "first_last" in printed and "sink share" in printed
    table = pd.read_parquet(out / "tables" / "collapse.parquet")
    assert set(table["level"]) == {"model", "layer", "head"}
    units = pd.read_parquet(out / "tables" / "units.parquet")
    assert list(units["revision"]) == ["step0", "step1", "step2", "step4"]
    assert 'id="collapse"' in (out / "report.html").read_text()


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
    printed = capsys.readouterr().out
    table = pd.read_parquet(out / "tables" / "prune.parquet")
    assert set(table["k"]) == {0, 1, 2}
    base = float(table[table["k"] == 0]["perplexity"].iloc[0])
    assert f"unpruned perplexity: {base:.3f}" in printed
    assert _manifest(out)["config"]["settings"]["prune"]["ks"] == [1, 2]


def test_prune_refuses_an_encoder_by_name(tmp_path, capsys):
    assert main(["prune", "minilm", "--ks", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "\nattncoda: error: prune measures perplexity, which needs a causal language model; "
        "minilm is BertModel\n"
    )
    units = pd.read_parquet(tmp_path / "tables" / "units.parquet")
    assert list(units["status"]) == ["skipped"]


def test_shipped_predictor_loads_and_abstains_outside_its_range():
    from attncoda.experiments.predictor import Predictor, shipped_predictor

    predictor = Predictor.from_json(shipped_predictor())
    assert "smollm2" in predictor.training_models and "minilm" in predictor.training_models
    inside = dict(zip(predictor.features, predictor.support.mean, strict=True))
    assert not predictor.apply(inside).abstained
    outside = {**inside, "mean_sink_mass": 0.99}
    result = predictor.apply(outside)
    assert result.abstained and "mean_sink_mass" in result.reason
    assert "outside the training set's joint support" in result.reason


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
    heads = pd.read_parquet(out / "tables" / "profile_heads.parquet")
    assert len(heads) == 2 * 4 and set(heads["family"]) == {"given attention"}
    manifest = _manifest(out)
    assert manifest["model_info"]["a.npz@-"]["capture_mode"] == "given"
    assert manifest["config"]["attentions"]["files"] == [str(tmp_path / "a.npz")]
    files = [str(tmp_path / f"a.{ext}") for ext in ("npz", "pt", "safetensors")]
    flips_out = tmp_path / "f"
    args = ["flips", "--attentions", *files, "--tokens", str(tmp_path / "ids.npy")]
    assert main([*args, "--n-boot", "20", "--out", str(flips_out)]) == 0
    assert _manifest(flips_out)["config"]["attentions"]["tokens"] == str(tmp_path / "ids.npy")
    table = pd.read_parquet(flips_out / "tables" / "flips.parquet")
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
        "note: the corpus gives 1 window of up to 128 tokens (docs=8 asked for): using all "
        "of them" in captured.err
    )
    assert "minilm: 1 window of up to 128 tokens" in captured.out
    # the default method, auto: MiniLM's routed attention takes the fused kernel
    from attncoda.capture.kernels.registry import resolve_kernel

    forward = f"fast:{resolve_kernel('auto', 'cpu')}"
    read = {"windows": 1, "max_tokens": 128, "forward": forward}
    assert _unit_facts(out, "profile")["read"] == read


def test_safety_of_two_models_draws_one_figure_each(tmp_path, capsys, tiny_llama):
    out = tmp_path / "s"
    args = ["safety", "minilm", tiny_llama, "--docs", "2", "--n-bins", "2", "--out", str(out)]
    assert main(args) == 0
    html = (out / "report.html").read_text()
    assert html.count("flip rate over sink share × sink-mass gap") == 2
    assert pd.read_parquet(out / "tables" / "safety_grid.parquet")["model"].nunique() == 2
