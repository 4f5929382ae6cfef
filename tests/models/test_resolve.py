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


# --------------------------------------------------------------------------- check_spec


def _cache_model(hub: Path, repo: str, commit: str, refs: tuple[str, ...]) -> None:
    """One cached model in the hub cache's on-disk layout (huggingface_hub's docs, "Manage
    the cache"): refs name commits, a snapshot holds the files of one commit."""
    folder = hub / f"models--{repo.replace('/', '--')}"
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "snapshots" / commit / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "refs").mkdir()
    for ref in refs:
        (folder / "refs" / ref).write_text(commit)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub

    folder = tmp_path / "hub"
    folder.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(folder))
    commit = "0123456789abcdef0123456789abcdef01234567"
    _cache_model(folder, "owner/cached", commit, ("main", "step8"))
    return folder, commit


def test_check_spec_offline_agrees_with_the_loaders_cache_lookup(hub, tmp_path, monkeypatch):
    """A hub id passes offline exactly when transformers' own cached-file lookup (the one
    ``from_pretrained`` makes with ``local_files_only``) finds its config.json."""
    from transformers.utils import cached_file

    from attncoda.models.resolve import check_spec

    folder, commit = hub
    monkeypatch.chdir(tmp_path)
    for spec in (
        "owner/cached",
        "owner/cached@step8",
        f"owner/cached@{commit}",
        "owner/cached@step16",
        "owner/absent",
        "owner/absent@step8",
    ):
        repo, _, revision = spec.partition("@")
        try:
            cached_file(
                repo,
                "config.json",
                revision=revision or None,
                cache_dir=str(folder),
                local_files_only=True,
            )
            found = True
        except OSError:
            found = False
        try:
            check_spec(spec)
            passed = True
        except AttncodaError as exc:
            at = f" at revision {revision!r}" if revision else ""
            assert str(exc) == (
                f"model spec {spec!r}: {repo!r}{at} is not in the local Hugging Face cache and "
                "HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE to download it, or give a local "
                "folder containing config.json"
            )
            passed = False
        assert passed == found, spec
        assert passed == (spec.startswith("owner/cached") and "step16" not in spec)


def test_check_spec_online_checks_only_the_form(hub, monkeypatch, tmp_path):
    from attncoda.models.resolve import check_spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    check_spec("owner/absent@step8")  # the hub answers when the model loads
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_spec("owner/absent@step8", cache=False)  # a sweep's units may run elsewhere
    with pytest.raises(AttncodaError, match="is not in the local Hugging Face cache"):
        check_spec("owner/absent@step8")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "no-such-model",
            "unknown model spec 'no-such-model': not an embedded model name, an existing path "
            f"or a hub id. {FORMS}",
        ),
        (
            "own--er/name@step8",
            "unknown model spec 'own--er/name@step8': not an embedded model name, an existing "
            f"path or a hub id. {FORMS}",
        ),
        (
            "./nowhere/model",
            f"model spec './nowhere/model' looks like a path, but nothing exists there. {FORMS}",
        ),
        (
            "owner/name@",
            "model spec 'owner/name@' has an empty revision after '@': write "
            "'owner/name@<revision>' or drop the '@'",
        ),
    ],
)
def test_check_spec_refuses_what_resolve_refuses(spec, message, tmp_path, monkeypatch):
    from attncoda.models.resolve import check_spec

    monkeypatch.chdir(tmp_path)
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        check_spec(spec, cache=False)


@pytest.mark.parametrize("name", ["smollm2", "minilm", "gemma3", "mpnet", "qwen2.5-coder-1.5b"])
def test_check_spec_passes_an_embedded_model_exactly_when_it_is_installed(name):
    """Nothing is joined or loaded: the wheels' files are only looked for."""
    from attncoda.models.resolve import check_spec
    from attncoda.models.zoo import EMBEDDED

    entry = EMBEDDED[name]
    if entry.installed():
        check_spec(name)
    else:
        with pytest.raises(AttncodaError, match=f"^embedded model {name!r} needs the package"):
            check_spec(name)
