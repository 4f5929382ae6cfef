"""The shipped predictor knows its training models whatever dtype or source they come in:
SmolLM2 saved to a folder and applied from it in bfloat16 is a training model (a near copy),
never a test; the canonical float32 hashes of the shipped training models are unchanged."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import attncoda  # noqa: E402
from attncoda.experiments.predictor import Predictor, shipped_predictor  # noqa: E402
from attncoda.training.identity import (  # noqa: E402
    sketch_distance,
    weights_sha256,
    weights_sketch,
)


@pytest.fixture(scope="module")
def smollm2_folder(tmp_path_factory):
    """SmolLM2 as attncoda loads it (float32, dequantised from its GGUF), saved with
    ``save_pretrained`` to a folder of its own; and the loaded model."""
    from attncoda.models.load import load_model

    model, tokenizer, _ = load_model("smollm2")
    folder = tmp_path_factory.mktemp("smollm2") / "saved"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    yield model, folder
    shutil.rmtree(folder)  # 0.5 GB: freed with the module, not kept for pytest's last runs


def _identities():
    return {i.model: i for i in Predictor.from_json(shipped_predictor()).identities}


@pytest.mark.slow
def test_the_canonical_hash_of_a_float32_training_model_is_the_one_stored(smollm2_folder):
    model, _ = smollm2_folder
    stored = _identities()["smollm2"]
    assert weights_sha256(model) == stored.weights_sha256
    assert stored.weights_sketch is not None
    assert sketch_distance(weights_sketch(model), stored.weights_sketch) == 0.0


@pytest.mark.slow
def test_smollm2_from_a_folder_in_bfloat16_is_a_training_model_and_not_counted(smollm2_folder):
    """Loaded from the folder in bfloat16, its canonical float32 values are the bfloat16
    ones: not the stored hash (the weights match comes first, so "near copy" says it
    failed), but a sketch within NEAR_COPY of the stored one."""
    _, folder = smollm2_folder
    result = attncoda.predict(str(folder), dtype="bfloat16", docs=2, max_tokens=16, protocol="run")
    (row,) = result.tables["predictor"].to_dict("records")
    assert row["relation"] == "training" and bool(row["in_training_set"])
    assert (row["matched_training_model"], row["matched_by"]) == ("smollm2", "near copy")
    assert not row["counted"]
