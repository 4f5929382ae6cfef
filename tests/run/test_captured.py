"""What a capture read (:class:`attncoda.run.captured.Captured`: its ``reading``), and what a
unit's facts record of it at the store boundary (``Captured.to_json``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attncoda.experiments.contract import Reading
from attncoda.run.captured import capture_corpus, capture_file, corpus_windows, handed_in
from attncoda.store.runs import DONE, Unit

#: The sha256 of the embedded corpus and of the default Bigram-Backcopy task, as the shipped
#: predictor's rows recorded them (experiments/data/flip_predictor_rows.json).
EMBEDDED = "c8eb083b42baa069630d9170cd85b057a97a56b40ff30f99fffce207cdb2ac30"
TASK = "a35b783d93779910ab7a081e4b12ce24abe4d7b7149782522f55bcaa77068a40"


@pytest.mark.slow
def test_a_checkpoint_reads_its_task_sequences_by_name_and_sha256(embedded_model):
    loaded = embedded_model("bigram-backcopy@step0")
    # 64 tokens as read: the default task's sequences, whatever longer length was asked
    _, reading = corpus_windows(loaded[1], text=None, max_tokens=128, docs=16)
    assert reading == Reading("bigram-backcopy", TASK, windows=16, window_tokens=64)
    captured = capture_corpus(
        "bigram-backcopy@step0", max_tokens=128, docs=2, record_rows="none", loaded=loaded
    )
    assert captured.reading == Reading("bigram-backcopy", TASK, windows=2, window_tokens=64)
    forward = {"forward": captured.capture.forward}
    assert forward["forward"] and captured.capture.read_dtype is None
    assert captured.to_json() == {"windows": 2, "max_tokens": 64, **forward}
    assert captured.to_json(named=True) == {
        "windows": 2,
        "max_tokens": 64,
        **forward,
        "corpus": "bigram-backcopy",
        "corpus_sha256": TASK,
    }


def test_attention_handed_in_records_its_documents(tmp_path):
    probs = np.random.default_rng(0).dirichlet(np.ones(5), size=(3, 2, 2, 5)).astype(np.float32)
    probs = np.where(np.tril(np.ones((5, 5), dtype=bool)), probs, 0.0)
    probs /= probs.sum(-1, keepdims=True)
    np.savez(tmp_path / "a.npz", attentions=probs)
    captured = capture_file(str(tmp_path / "a.npz"), record_rows="none")
    # 3 documents, read as the float32 they were saved in
    facts = {"documents": 3, "read_dtype": "float32"}
    assert captured.reading is None
    assert captured.to_json() == captured.to_json(named=True) == facts
    lent = handed_in(captured.capture, "mine")
    assert lent.reading is None and lent.to_json() == facts


@pytest.mark.slow
def test_a_unit_records_the_rows_it_read_by_corpus_name_and_sha256(uninterrupted, models):
    """The store boundary: the flips unit read the run's rows (TINY_SETTINGS: 3 windows of
    32 tokens of the embedded corpus), profile its own capture (2 windows), unnamed."""

    def read(experiment: str) -> dict:
        folder = uninterrupted / "units" / Unit(experiment, models[0], "-").folder
        return json.loads((folder / DONE).read_text())["facts"]["read"]

    flips, profile = read("flips"), read("profile")
    assert flips.pop("forward") == profile.pop("forward")
    assert flips == {
        "windows": 3,
        "max_tokens": 32,
        "corpus": "embedded",
        "corpus_sha256": EMBEDDED,
    }
    assert profile == {"windows": 2, "max_tokens": 32}
