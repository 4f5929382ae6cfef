"""Model specs resolved to their weights: the one spec parser decides hub ids and revisions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.models.resolve import FORMS, Target, resolve  # noqa: E402
from attncoda.models.series import parse_series  # noqa: E402


@pytest.mark.parametrize(
    ("spec", "repo", "revision"),
    [
        ("EleutherAI/pythia-70m", "EleutherAI/pythia-70m", None),
        ("EleutherAI/pythia-70m@step512", "EleutherAI/pythia-70m", "step512"),
        # Everything after the first '@' is the revision (the hub then refuses it by name).
        ("owner/name@x@y", "owner/name", "x@y"),
    ],
)
def test_hub_ids_and_revisions(spec, repo, revision, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve(spec) == Target("hub", repo, repo, revision=revision)


@pytest.mark.parametrize("spec", ["owner/name@", "owner/name@  "])
def test_an_empty_revision_is_refused(spec):
    message = (
        f"model spec {spec!r} has an empty revision after '@': write "
        "'owner/name@<revision>' or drop the '@'"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        resolve(spec)


@pytest.mark.parametrize("spec", ["own--er/name", "owner/na..me@step1"])
def test_double_punctuation_is_no_hub_id(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = (
        f"unknown model spec {spec!r}: not an embedded model name, an existing path "
        f"or a hub id. {FORMS}"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        resolve(spec)


def test_an_existing_folder_is_never_split_at_its_at_sign(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = Path("owner") / "name@step8"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    found = str(folder.resolve())
    assert resolve(str(folder)) == Target("local", found, found)


def test_series_revisions_follow_the_same_parser():
    message = "series spec 'owner/name@step1,x@y': revision 'x@y' is not a checkpoint name stepN"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}"):
        parse_series("owner/name@step1,x@y")
    message = "series spec 'own--er/name@step1,step2': 'own--er/name' before '@' is not a hub id"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}"):
        parse_series("own--er/name@step1,step2")
