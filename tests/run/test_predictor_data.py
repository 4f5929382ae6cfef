"""The shipped predictor and the commands that regenerate and refit it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from attncoda.experiments.predictor import (
    INTERVAL_METHOD,
    Predictor,
    apply_predictor,
    fit_predictor,
    shipped_predictor,
)

# The release tool that regenerates and refits the shipped predictor is a script of the
# repository, not a module of the package: imported from scripts/ as `python
# scripts/predictor_data.py` runs it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from predictor_data import (  # noqa: E402
    KEPT_OUT,
    ROWS_FORMAT,
    SERIES,
    SKETCHED,
    TRAINING,
    as_read,
    main,
    refit,
    regenerate,
)

METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
PROVENANCE = Path(shipped_predictor()).with_name("PROVENANCE.md")
ROWS = Path(shipped_predictor()).with_name("flip_predictor_rows.json")
EMBEDDED = "c8eb083b42baa069630d9170cd85b057a97a56b40ff30f99fffce207cdb2ac30"


def _same_fit(a, b, rtol: float = 1e-9) -> bool:
    """Whether two fitted objects agree: every float to ``rtol`` (a least-squares fit in
    float64 repeated on another CPU, whose BLAS kernels round differently, agrees to about
    1e-15 relative; the shipped fit was made on an AMD EPYC family 25 model 1), every other
    value exactly."""
    import dataclasses

    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a) is type(b) and _same_fit(dataclasses.asdict(a), dataclasses.asdict(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_fit(a[k], b[k], rtol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_fit(x, y, rtol) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return bool(np.isclose(a, b, rtol=rtol, atol=1e-12, equal_nan=True))
    return a == b


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
            "identity": {
                "weights_sha256": f"sha256:{name}",
                "weights_sketch": None,
                "recipe": None,
            },
            "protocol": {
                "windows": 16,
                "window_tokens": 128,
                "corpus": "embedded",
                "corpus_sha256": EMBEDDED,
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
    assert predictor.protocol is not None and predictor.protocol.rows_at()["docs"] == 16
    data = json.loads((tmp_path / "flip_predictor_rows.json").read_text())
    assert data["format"] == ROWS_FORMAT
    assert [r["model"] for r in data["kept_out"]] == list(KEPT_OUT)
    for r in data["kept_out"]:
        assert r["verdict"] in ("confirmed", "abstained", "failed")
        assert r["baseline_verdict"] in ("confirmed", "failed")  # the baseline never abstains
        # every model kept out is a checkpoint of a training run: none is held out
        assert r["relation"] in ("interpolated", "same run") and not r["counted"]
        assert f"{r['model']} ({r['relation']}: " in printed and r["verdict"] in printed
    assert [o["verdict"] for o in regenerate(tmp_path)] == [r["verdict"] for r in data["kept_out"]]


def test_the_shipped_predictor_is_fitted_on_12_models_of_6_runs_with_a_cv_plus_interval():
    predictor = Predictor.from_json(shipped_predictor())
    n = len(predictor.training_models)
    # SmolLM2, MiniLM and ten train-tiny checkpoints of four runs: six runs, each left out
    assert predictor.training_models == TRAINING and n == 12
    runs = {m.partition("@")[0] for m in TRAINING}
    assert set(predictor.training_runs) == runs and predictor.interval.n_runs == 6
    assert predictor.alpha == 0.1
    # the provenance counts these
    counts = re.findall(r"\*\*Training models \((\d+) of (\d+) runs\):\*\*", PROVENANCE.read_text())
    assert counts == [(str(n), "6")]
    assert not set(predictor.training_models) & set(KEPT_OUT) and len(KEPT_OUT) >= 3
    data = json.loads(Path(shipped_predictor()).read_text())
    assert data["interval"]["method"] == INTERVAL_METHOD
    # each residual is against the fit without the row's whole run, refitted here
    stored = json.loads(ROWS.read_text())
    again = fit_predictor(stored["training"])
    np.testing.assert_allclose(predictor.interval.residuals, again.interval.residuals, atol=1e-12)
    assert _same_fit(predictor.coefficients, again.coefficients)


def test_the_provenance_states_the_leave_one_run_out_errors_and_the_kept_out_verdicts():
    predictor = Predictor.from_json(shipped_predictor())
    data = json.loads(ROWS.read_text())
    text = " ".join(PROVENANCE.read_text(encoding="utf-8").split())
    rmse = f"Leave-one-run-out RMSE {predictor.interval.rmse:.4f} (predictor) and "
    assert rmse + f"{predictor.baseline.interval.rmse:.4f} (baseline)" in text
    said = ", ".join(r["verdict"] for r in data["kept_out"])
    base = ", ".join(r["baseline_verdict"] for r in data["kept_out"])
    assert f"The kept-out checkpoints' verdicts: {said}; none held out." in text
    assert f"The baseline's: {base}." in text
    for name, value in zip(predictor.features, predictor.coefficients, strict=True):
        assert f"`{name}` {value:+.3f}".replace("-", "−") in text


def test_the_shipped_kept_out_verdicts_are_those_of_the_provenance_and_none_is_held_out():
    data = json.loads(ROWS.read_text())
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
        for key in ("verdict", "baseline_verdict", "interval_score", "baseline_interval_score"):
            assert outcome[key] == stored[key], key
        assert outcome["relation"].relation == stored["relation"] and not outcome["counted"]
        assert f"`{stored['model']}`" in provenance
    # the shipped predictor's protocol is what every stored row read: text models the
    # embedded corpus's 128-token windows, Bigram-Backcopy checkpoints 64-token task sequences
    predictor = Predictor.from_json(shipped_predictor())
    assert predictor.protocol is not None
    assert [(r.corpus, r.windows, r.window_tokens) for r in predictor.protocol.readings] == [
        ("embedded", 16, 128),
        ("bigram-backcopy", 16, 64),
    ]
    for stored in (*data["training"], *data["kept_out"]):
        assert predictor.off_protocol(stored["protocol"]) == []
        task = SERIES.get(stored["model"].partition("@")[0], {}).get("task")
        read = stored["protocol"]
        assert (read["corpus"], read["window_tokens"]) == (
            ("bigram-backcopy", 64) if task == "bigram-backcopy" else ("embedded", 128)
        )


def test_the_shipped_predictor_knows_its_training_models_by_content():
    predictor = Predictor.from_json(shipped_predictor())
    identities = {i.model: i for i in predictor.identities}
    assert set(identities) == set(TRAINING)
    # every training model by its weights hash; those attncoda ships by their sketch too;
    # every train-tiny checkpoint by its recipe, the config of its series at its step
    assert all(identities[m].weights_sha256 for m in TRAINING)
    assert {m for m in TRAINING if identities[m].weights_sketch is not None} == set(SKETCHED)
    for model in TRAINING:
        series, at, step = model.partition("@")
        if not at:
            assert identities[model].recipe is None
            continue
        recipe = json.loads(identities[model].recipe)
        assert recipe["step"] == int(step.removeprefix("step"))
        for key, value in SERIES[series].items():
            assert recipe["config"].get(key, "text") == value, (model, key)


def test_refit_from_the_stored_rows_gives_the_shipped_fit(tmp_path):
    """The refit reads the stored rows, re-records what they read, and fits: the same
    predictor as the shipped one (its sketches taken from the shipped file here)."""
    shipped = Predictor.from_json(shipped_predictor())
    data = json.loads(ROWS.read_text())
    # rows as stored before their protocol recorded what was read (format 1)
    for r in data["training"]:
        r["protocol"] = {**r["protocol"], "corpus": "embedded", "window_tokens": 128}
        del r["protocol"]["corpus_sha256"]
    old = tmp_path / "rows.json"
    old.write_text(json.dumps(data))
    outcomes = refit(tmp_path / "out", rows_file=old, sketched={})
    again = Predictor.from_json(tmp_path / "out" / "flip_predictor.json")
    assert again.protocol == shipped.protocol
    assert _same_fit(again.interval, shipped.interval)
    assert _same_fit(again.baseline, shipped.baseline)
    assert again.identities == shipped.identities and _same_fit(again.support, shipped.support)
    assert [o["verdict"] for o in outcomes] == [r["verdict"] for r in data["kept_out"]]


def test_as_read_records_the_task_sequences_of_a_bigram_backcopy_checkpoint():
    from attncoda.data.tasks import BigramBackcopy
    from attncoda.run.captured import task_sha256

    stored = json.loads(ROWS.read_text())["training"]
    checkpoint = next(r for r in stored if r["model"] == "bigram-backcopy-seed0@step64")
    old = {**checkpoint, "protocol": {**checkpoint["protocol"], "corpus": "embedded"}}
    old["protocol"]["window_tokens"] = 128
    del old["protocol"]["corpus_sha256"]
    read = as_read(old)["protocol"]
    assert (read["corpus"], read["window_tokens"]) == ("bigram-backcopy", 64)
    assert read["corpus_sha256"] == task_sha256(BigramBackcopy())
    text = next(r for r in stored if r["model"] == "smollm2")
    old = {**text, "protocol": {k: v for k, v in text["protocol"].items() if k != "corpus_sha256"}}
    assert as_read(old)["protocol"]["corpus_sha256"] == EMBEDDED
    with pytest.raises(Exception, match="whose content is not recorded: measure it again"):
        as_read({**old, "protocol": {**old["protocol"], "corpus": "my.txt"}})
