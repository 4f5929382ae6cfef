"""The folders of attncoda's model cache (``ATTNCODA_CACHE``), whoever fills them: a GGUF
model dequantised (:mod:`attncoda.models.gguf`) or a model joined from its wheels
(:mod:`attncoda.models.wheels`).

A folder is written under a temporary name, synced and renamed in one step, with a metadata
file listing every file's size, so a half-written or damaged folder is never read; one
process at a time fills a folder (:func:`one_writer`), and temporary folders a crashed
writer left are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "TEMP_PREFIX",
    "discard_folder",
    "folder_meta",
    "fsync_folder",
    "lock_file",
    "one_writer",
    "publish_folder",
    "read_or_make",
    "remove_stale_temps",
]

#: The name prefix of a folder being written (or discarded).
TEMP_PREFIX = ".tmp-"
# A temp folder untouched this long belongs to a crashed writer (a write takes seconds).
_STALE_TEMP_S = 3600.0


def lock_file(final: Path) -> Path:
    """The lock file of the cache folder ``final``: ``locks/<kind>-<key>.lock`` in the cache,
    beside the ``gguf`` and ``wheels`` folders (``locks/gguf-<key>.lock``)."""
    return final.parent.parent / "locks" / f"{final.parent.name}-{final.name}.lock"


@contextlib.contextmanager
def one_writer(lock: Path) -> Iterator[None]:
    """Hold the advisory lock file ``lock`` (made, with its folder, if missing) inside: a
    second process that loads the same cold model waits for the first one's folder instead
    of making it again (two workers of a run on a fresh machine; the lock of a cache folder
    is :func:`lock_file`). The kernel drops the lock of a process that dies, so none is ever
    stale. Where it cannot be taken (a read-only cache, no ``fcntl``), the work inside runs
    without it."""
    try:
        import fcntl

        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = lock.open("a")
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


_T = TypeVar("_T")


def read_or_make(
    final: Path,
    read: Callable[[Path], dict[str, Any] | None],
    warm: Callable[[dict[str, Any]], _T],
    make: Callable[[], _T],
) -> _T:
    """``warm(meta)`` of the complete cache folder ``final`` (``meta = read(final)``), or, where
    there is none, ``make()``, which writes it: one process at a time (:func:`one_writer`),
    the others wait for it and read its folder. Temporary folders a crashed writer left
    beside ``final`` are removed first, and an incomplete ``final`` before ``make()``."""
    remove_stale_temps(final.parent)
    meta = read(final)
    if meta is None:
        with one_writer(lock_file(final)):
            meta = read(final)
            if meta is None:
                if final.exists():
                    discard_folder(final)
                return make()
    return warm(meta)


def folder_meta(folder: Path, meta_name: str, fmt: int) -> dict[str, Any] | None:
    """The metadata file ``meta_name`` of a cache folder if it is of format ``fmt`` and every
    file it lists (``"files"``: name to size) has its size, else None (also when it is
    missing or unreadable)."""
    try:
        meta = json.loads((folder / meta_name).read_text(encoding="utf-8"))
        complete = meta["format"] == fmt and all(
            (folder / name).stat().st_size == size for name, size in meta["files"].items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return meta if complete else None


def publish_folder(temp: Path, final: Path, complete: Callable[[Path], bool]) -> None:
    """Flush ``temp`` (and its sub-folders) and rename it to ``final`` in one step.

    When another process published ``final`` first (``complete(final)`` is true), its copy
    is as good as ours and ``temp`` is removed; any other failure propagates.
    """
    fsync_folder(temp)
    for sub in temp.iterdir():
        if sub.is_dir():
            fsync_folder(sub)
    try:
        os.rename(temp, final)
    except OSError:
        if not complete(final):
            raise
        shutil.rmtree(temp, ignore_errors=True)


def fsync_folder(folder: Path) -> None:
    """Flush every file directly in ``folder``, then the folder entry itself, to disk."""
    # Without this a power loss after the rename can leave empty files under a valid name.
    for path in folder.iterdir():
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
    if hasattr(os, "O_DIRECTORY"):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_stale_temps(parent: Path) -> None:
    """Delete temp folders left by crashed writers; recent ones may belong to a live one."""
    if not parent.is_dir():
        return
    now = time.time()
    for temp in parent.glob(f"{TEMP_PREFIX}*"):
        try:
            stale = now - temp.stat().st_mtime > _STALE_TEMP_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(temp, ignore_errors=True)


def discard_folder(folder: Path) -> None:
    """Remove an incomplete cache folder; rename first so no reader sees it half-deleted."""
    aside = folder.with_name(f"{TEMP_PREFIX}discard-{folder.name}-{os.getpid()}")
    try:
        os.rename(folder, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)
