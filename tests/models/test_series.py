"""Checkpoint series: Pythia revision names, hub series specs, local step folders."""

from __future__ import annotations

import re

import pytest

from attncoda._errors import AttncodaError
from attncoda.models.series import SeriesPoint, parse_series, pythia_revisions

FORMS = (
    "write 'owner/name@step0,step512,...' (hub revisions named stepN, at least two), name a "
    "shipped series ('bigram-backcopy', or 'bigram-backcopy@step0,step2000') or give a local "
    "folder of step<N> checkpoint folders"
)


def single(spec: str) -> str:
    return (
        f"series spec {spec!r} names a single checkpoint: a series needs at least 2 "
        f"checkpoints; {FORMS}"
    )


def test_pythia_revisions_are_the_154_names_in_order():
    names = pythia_revisions()
    assert len(names) == 154
    assert len(set(names)) == 154
    assert names[0] == "step0" and names[-1] == "step143000"
    assert names[:12] == [
        "step0",
        "step1",
        "step2",
        "step4",
        "step8",
        "step16",
        "step32",
        "step64",
        "step128",
        "step256",
        "step512",
        "step1000",
    ]
    steps = [int(name.removeprefix("step")) for name in names]
    assert steps == sorted(steps)
    assert steps[11:] == list(range(1000, 143001, 1000))
    assert "step1024" not in names


def test_hub_series_gives_one_point_per_revision():
    points = parse_series("EleutherAI/pythia-70m@step0,step512,step143000")
    assert points == [
        SeriesPoint(0, "step0", "EleutherAI/pythia-70m@step0"),
        SeriesPoint(512, "step512", "EleutherAI/pythia-70m@step512"),
        SeriesPoint(143000, "step143000", "EleutherAI/pythia-70m@step143000"),
    ]


def test_hub_series_is_sorted_by_step_and_accepts_any_step_number():
    points = parse_series("owner/model@ step3000 ,step7")
    assert [p.step for p in points] == [7, 3000]
    assert [p.spec for p in points] == ["owner/model@step7", "owner/model@step3000"]


def test_every_pythia_revision_parses():
    spec = "EleutherAI/pythia-160m@" + ",".join(pythia_revisions())
    points = parse_series(spec)
    assert [p.label for p in points] == pythia_revisions()


@pytest.mark.parametrize(
    ("spec", "revision"),
    [
        ("EleutherAI/pythia-70m@step0,main", "main"),
        ("EleutherAI/pythia-70m@step0,", ""),
        ("EleutherAI/pythia-70m@step0,step-1", "step-1"),
        ("EleutherAI/pythia-70m@step0,Step512", "Step512"),
    ],
)
def test_unknown_revision_forms_are_refused(spec, revision):
    message = (
        f"series spec {spec!r}: revision {revision!r} is not a checkpoint name stepN "
        f"(Pythia's are step0, step1, step2, step4, ..., step512, step1000, ..., step143000)"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_series(spec)


def test_repeated_step_is_refused():
    spec = "EleutherAI/pythia-70m@step8,step16,step8"
    message = f"series spec {spec!r}: step 8 is named twice"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_series(spec)


@pytest.mark.parametrize(
    "spec", ["EleutherAI/pythia-70m@step512", "EleutherAI/pythia-70m", "smollm2", "minilm"]
)
def test_a_single_model_is_not_a_series(spec):
    with pytest.raises(AttncodaError, match=f"^{re.escape(single(spec))}$"):
        parse_series(spec)


def test_bad_repository_before_the_at_sign():
    spec = "not a repo@step1,step2"
    message = (
        f"series spec {spec!r}: 'not a repo' before '@' is not a hub id 'owner/name' nor a "
        f"shipped series; {FORMS}"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_series(spec)


def test_unreadable_spec():
    spec = "nothing here"
    message = f"cannot read series spec {spec!r}: {FORMS}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_series(spec)


@pytest.mark.parametrize("spec", ["", "  ", None])
def test_empty_spec(spec):
    message = f"series spec must be a non-empty string, got {spec!r}; {FORMS}"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_series(spec)


def test_local_folder_of_checkpoints_is_ordered_by_step(tmp_path):
    for step in (10, 2, 0):
        (tmp_path / f"step{step}").mkdir()
    (tmp_path / "attncoda_series.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    points = parse_series(tmp_path)
    assert [(p.step, p.label) for p in points] == [(0, "step0"), (2, "step2"), (10, "step10")]
    assert [p.spec for p in points] == [str(tmp_path / f"step{s}") for s in (0, 2, 10)]


def test_local_folder_with_one_checkpoint_or_a_model_is_not_a_series(tmp_path):
    (tmp_path / "step0").mkdir()
    with pytest.raises(AttncodaError, match=f"^{re.escape(single(str(tmp_path)))}$"):
        parse_series(str(tmp_path))
    model = tmp_path / "step0"
    (model / "config.json").write_text("{}")
    with pytest.raises(AttncodaError, match=f"^{re.escape(single(str(model)))}$"):
        parse_series(str(model))


def test_local_folder_without_checkpoints(tmp_path):
    message = f"checkpoint folder '{tmp_path}' holds no step<N> folder (e.g. 'step0', 'step1000')"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_series(str(tmp_path))
