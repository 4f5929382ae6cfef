"""What a run may write into, and what a failed run takes away again.

A run folder (``--out DIR``, ``out=``) is only ever a new folder, an empty one or the folder
of an earlier attncoda run (:func:`check_run_folder`), so a user's files are never written
into; a run that fails removes what it made there and nothing else (:func:`new_folders`
before it, :func:`remove_created` after).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from attncoda._errors import AttncodaError
from attncoda.store.files import read_json
from attncoda.store.manifest import MANIFEST, is_run_manifest


def check_run_folder(root: str | os.PathLike[str]) -> bool:
    """Refuse ``root`` as a run folder unless writing there can harm nothing of a user's.

    A run folder (``--out DIR``, ``out=``) is accepted when it does not exist, is an empty
    folder, or holds a run manifest (:func:`is_run_manifest`; the run is resumed, or refused
    for another config, by :class:`attncoda.store.runs.RunStore`). Nothing is written here.

    Returns
    -------
    bool
        Whether ``root`` exists already (as an empty folder or a run folder).

    Raises
    ------
    AttncodaError
        ``root`` is a file, or a folder holding anything but an attncoda run (the message
        names one of its entries and says what to give instead).
    """
    path = Path(root)
    if not path.exists():
        return False
    if not path.is_dir():
        raise AttncodaError(f"--out {str(path)!r} is a file: give a folder")
    manifest = path / MANIFEST
    if manifest.is_file():
        try:
            stored = read_json(manifest)
        except AttncodaError:
            return True  # a run's manifest damaged: RunStore says so, naming it
        if is_run_manifest(stored):
            return True
        raise AttncodaError(
            f"--out {str(path)!r} holds a manifest.json that attncoda did not write: give a "
            f"new or empty folder, or the folder of an earlier attncoda run"
        )
    entries = sorted(p.name for p in path.iterdir())
    if entries:
        more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
        raise AttncodaError(
            f"--out {str(path)!r} is not empty ({entries[0]!r}{more}) and is no attncoda run "
            f"folder: give a new or empty folder, or the folder of an earlier attncoda run"
        )
    return True


def new_folders(root: str | os.PathLike[str]) -> tuple[Path, ...]:
    """``root`` and each of its parents that does not exist yet, innermost first: what a
    run into ``root`` creates (for :func:`remove_created`)."""
    path = Path(root).absolute()
    return tuple(p for p in (path, *path.parents) if not p.exists())


def remove_created(root: str | os.PathLike[str], created: tuple[Path, ...]) -> None:
    """Remove what a failed run made in ``root``, a folder that was new or empty before it.

    Everything inside ``root`` goes (the run wrote all of it); ``root`` itself and the
    parents in ``created`` (:func:`new_folders`, taken before the run) go when they are
    empty then, so a folder that another process filled meanwhile stays, and a folder that
    existed before the run is never removed.
    """
    path = Path(root)
    if path.is_dir():
        for entry in path.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    for folder in created:
        try:
            folder.rmdir()
        except OSError:  # not empty (another writer's), or gone already
            break


__all__ = ["check_run_folder", "new_folders", "remove_created"]
