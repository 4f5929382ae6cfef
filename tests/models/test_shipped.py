"""The shipped Bigram-Backcopy checkpoints: their files, their specs and their lineage
(attncoda.models.shipped; docs/design.md, "Shipped checkpoints")."""

from __future__ import annotations

import json

import pytest

from attncoda import AttncodaError
from attncoda.models.series import parse_series
from attncoda.models.shipped import (
    ASSETS,
    SERIES,
    SHIPPED,
    UNSEEN,
    checkpoint_folder,
    manifest,
    verify,
)
from attncoda.models.spec import parse_spec

MB = 1_000_000


def test_every_shipped_file_has_the_sha256_of_its_manifest():
    assert verify() == []
    listed = {
        ASSETS / e["name"] / f"step{e['step']}" / f
        for e in manifest()["checkpoints"]
        for f in e["files"]
    }
    on_disk = {p for p in ASSETS.rglob("*") if p.is_file() and p.parent.name.startswith("step")}
    assert on_disk == listed  # nothing ships that the manifest does not vouch for


def test_a_changed_file_is_named_by_verify(tmp_path, monkeypatch):
    import shutil

    import attncoda.models.shipped as shipped

    copy = tmp_path / "assets"
    shutil.copytree(ASSETS, copy)
    weights = copy / SERIES / "step512" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    (copy / "bigram-backcopy-seed2" / "step1000" / "config.json").unlink()
    monkeypatch.setattr(shipped, "ASSETS", copy)
    assert sorted(verify()) == [
        f"{copy / 'bigram-backcopy-seed2' / 'step1000' / 'config.json'}: missing",
        f"{weights}: sha256 is not the manifest's",
    ]


def test_the_checkpoints_ship_within_15_mb_and_no_file_over_5_mb():
    files = [p for p in ASSETS.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 15 * MB
    assert max(p.stat().st_size for p in files) <= 5 * MB


def test_the_manifest_gives_recipe_step_and_the_machine_that_trained_them():
    found = manifest()
    assert {"cpu", "torch", "transformers"} <= set(found["trained_on"])
    shipped = {(e["name"], e["step"]) for e in found["checkpoints"]}
    assert shipped == {(name, s) for name, run in SHIPPED.items() for s in run.steps}
    assert len([1 for name, _ in shipped if name == SERIES]) == 13
    for entry in found["checkpoints"]:
        assert entry["recipe"] == SHIPPED[entry["name"]].recipe
        assert "model.safetensors" in entry["files"] and "tokenizer.json" in entry["files"]
        # the checkpoint's own record is of the recipe and the step the manifest gives
        record = json.loads(
            (
                checkpoint_folder(entry["name"], f"step{entry['step']}") / "attncoda_train.json"
            ).read_text()
        )
        assert record["step"] == entry["step"] and record["seed"] == entry["recipe"]["seed"]


def test_no_unseen_run_shares_a_seed_with_a_training_run_of_the_predictor():
    from attncoda.experiments.predictor import Predictor, shipped_predictor

    predictor = Predictor.from_json(shipped_predictor())
    trained = {
        json.loads(identity.recipe)["config"]["seed"]
        for identity in predictor.identities
        if identity.recipe is not None
    }
    assert trained == {0, 1}
    seeds = [recipe["seed"] for recipe in UNSEEN.values()]
    assert not set(seeds) & trained and len(set(seeds)) == len(seeds)


def test_specs_name_shipped_checkpoints_as_hub_revisions():
    assert parse_spec("bigram-backcopy@step2000").revision == "step2000"
    assert checkpoint_folder(SERIES) == ASSETS / SERIES / "step2000"  # its last, like main
    assert (
        checkpoint_folder("bigram-backcopy-small") == ASSETS / "bigram-backcopy-small" / "step500"
    )
    points = parse_series(SERIES)
    assert [p.step for p in points] == list(SHIPPED[SERIES].steps)
    assert points[3].spec == "bigram-backcopy@step4"
    assert [p.spec for p in parse_series("bigram-backcopy@step2000,step0")] == [
        "bigram-backcopy@step0",
        "bigram-backcopy@step2000",
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "bigram-backcopy@step3",
            "shipped series 'bigram-backcopy' has no checkpoint step3: use one of step0, step1, "
            "step2, step4, step8, step16, step32, step64, step128, step256, step512, step1000, "
            "step2000",
        ),
        (
            "bigram-backcopy-seed2@main",
            "shipped checkpoint bigram-backcopy-seed2@main: 'main' is not a checkpoint name "
            "stepN; use one of step1000",
        ),
    ],
)
def test_a_checkpoint_that_is_not_shipped_is_refused_naming_those_that_are(spec, message):
    from attncoda.models.resolve import check_spec

    with pytest.raises(AttncodaError) as err:
        check_spec(spec)
    assert str(err.value) == message


def test_an_unseen_run_is_one_checkpoint_not_a_series():
    with pytest.raises(AttncodaError, match="names a single checkpoint"):
        parse_series("bigram-backcopy-seed2")


def test_models_lists_the_shipped_series_and_the_unseen_runs(capsys):
    from attncoda.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    listing = out[out.index("shipped checkpoints") :].splitlines()
    assert listing[2].split()[:3] == ["bigram-backcopy", "series", "13:"]
    for line, name in zip(listing[3:], UNSEEN, strict=True):
        assert line.split()[:2] == [name, "unseen"]
        assert f"seed {UNSEEN[name]['seed']}" in line


@pytest.mark.slow
def test_collapse_reads_the_shipped_series_by_name(tmp_path, capsys):
    import pandas as pd

    from attncoda.cli import main

    out = tmp_path / "collapse"
    assert main(["collapse", "bigram-backcopy", "--docs", "4", "--out", str(out)]) == 0
    checkpoints = pd.read_parquet(out / "tables" / "collapse_checkpoints.parquet")
    assert sorted(set(checkpoints["step"])) == list(SHIPPED[SERIES].steps)
    assert not (out / "series").exists()  # read from the package, nothing trained
    units = pd.read_parquet(out / "tables" / "units.parquet")
    assert set(units["experiment"]) == {"collapse"}
