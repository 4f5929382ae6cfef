"""The shipped predictor and the command that regenerates it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from attncoda.experiments.predictor import Predictor, apply_predictor, shipped_predictor
from attncoda.run.predictor_data import KEPT_OUT, TRAINING, main, regenerate

METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
PROVENANCE = Path(shipped_predictor()).with_name("PROVENANCE.md")


def _fake_rows(root: Path) -> None:
    """Cached rows for every model, so regenerate() measures nothing."""
    rng = np.random.default_rng(0)
    for name in (*TRAINING, *KEPT_OUT):
        mass, std, share = rng.uniform(0.05, 0.5), rng.uniform(0.01, 0.4), rng.uniform(0, 0.3)
        rate = 0.05 + 0.2 * mass + 0.1 * std + rng.normal(0, 0.01)
        row = {
            "model": name,
            "features": {"mean_sink_mass": mass, "std_sink_mass": std, "mean_sink_share": share},
            "flip_rates": dict.fromkeys(METRICS, rate),
            # what model_rows records of a loaded model (a checkpoint has a recipe too)
            "identity": {"weights_sha256": f"sha256:{name}", "recipe": None},
            "protocol": {
                "windows": 16,
                "window_tokens": 128,
                "corpus": "embedded",
                "sink": "first",
                "seed": 0,
                "metrics": list(METRICS),
                "tol": 1e-6,
            },
        }
        (root / "rows").mkdir(parents=True, exist_ok=True)
        (root / "rows" / f"{name}.json").write_text(json.dumps(row))


def test_regenerate_fits_on_the_training_models_and_checks_the_kept_out_ones(tmp_path, capsys):
    _fake_rows(tmp_path)
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    predictor = Predictor.from_json(tmp_path / "flip_predictor.json")
    assert predictor.training_models == TRAINING
    assert {i.model: i.weights_sha256 for i in predictor.identities} == {
        m: f"sha256:{m}" for m in TRAINING
    }
    assert predictor.protocol is not None and predictor.protocol.windows == 16
    data = json.loads((tmp_path / "flip_predictor_rows.json").read_text())
    assert [r["model"] for r in data["kept_out"]] == list(KEPT_OUT)
    for r in data["kept_out"]:
        assert r["verdict"] in ("confirmed", "abstained", "failed")
        # every model kept out is a checkpoint of a training run: none is held out
        assert r["relation"] in ("interpolated", "same run") and not r["counted"]
        assert f"{r['model']} ({r['relation']}: " in printed and r["verdict"] in printed
    assert [o["verdict"] for o in regenerate(tmp_path)] == [r["verdict"] for r in data["kept_out"]]


def test_the_shipped_predictor_is_fitted_on_12_models_with_a_leave_one_out_interval():
    predictor = Predictor.from_json(shipped_predictor())
    n = len(predictor.training_models)
    # The shipped file holds the fit on every model of TRAINING: SmolLM2, MiniLM and ten
    # train-tiny checkpoints.
    assert predictor.training_models == TRAINING and n == 12
    # The provenance counts these.
    counts = re.findall(r"\*\*Training models \((\d+)\):\*\*", PROVENANCE.read_text())
    assert counts == [str(n)]
    assert not set(predictor.training_models) & set(KEPT_OUT) and len(KEPT_OUT) >= 3
    assert len(predictor.loo_residuals) == n
    k = math.ceil((n + 1) * predictor.coverage)
    assert predictor.half_width == np.sort(np.abs(predictor.loo_residuals))[k - 1]


def test_the_shipped_kept_out_verdicts_are_those_of_the_provenance_and_none_is_held_out():
    data = json.loads(Path(shipped_predictor()).with_name("flip_predictor_rows.json").read_text())
    outcomes = apply_predictor("shipped", data["kept_out"])
    provenance = PROVENANCE.read_text(encoding="utf-8")
    expected = {
        "bigram-backcopy-seed0@step1000": "interpolated",  # between step512 and step2000
        "bigram-backcopy-seed1@step512": "interpolated",  # between step128 and step2000
        "text-small-seed0@step256": "interpolated",  # between step128 and step512
        "bigram-backcopy-seed0@step0": "same run",  # before step64
    }
    assert {r["model"]: r["relation"] for r in data["kept_out"]} == expected
    for stored, outcome in zip(data["kept_out"], outcomes, strict=True):
        assert outcome["verdict"] == stored["verdict"]
        assert outcome["relation"].relation == stored["relation"] and not outcome["counted"]
        assert f"`{stored['model']}`" in provenance
    said = ", ".join(r["verdict"] for r in data["kept_out"])
    assert f"The kept-out checkpoints' verdicts: {said}; none held" in " ".join(provenance.split())
    # the shipped predictor names its protocol: the one every stored row was read with
    predictor = Predictor.from_json(shipped_predictor())
    assert predictor.protocol is not None
    assert (predictor.protocol.windows, predictor.protocol.window_tokens) == (16, 128)
    for stored in (*data["training"], *data["kept_out"]):
        assert predictor.off_protocol(stored["protocol"]) == []


def test_the_shipped_predictor_knows_its_training_models_by_content():
    from attncoda.run.predictor_data import SERIES

    predictor = Predictor.from_json(shipped_predictor())
    identities = {i.model: i for i in predictor.identities}
    assert set(identities) == set(TRAINING)
    # the pretrained models by their weights; every train-tiny checkpoint by its recipe,
    # the config of its series (PROVENANCE.md) at its step
    assert all(identities[m].weights_sha256 for m in ("smollm2", "minilm"))
    for model in TRAINING:
        series, at, step = model.partition("@")
        if not at:
            assert identities[model].recipe is None
            continue
        recipe = json.loads(identities[model].recipe)
        assert recipe["step"] == int(step.removeprefix("step"))
        for key, value in SERIES[series].items():
            assert recipe["config"].get(key, "text") == value, (model, key)
