"""One writer per run folder: a lock file that names its holder.

The writer of a run folder (the process that plans and runs its units, in process or as Ray
tasks) holds ``DIR/.lock``, a JSON file with its pid, host, command and start time, made
with ``O_CREAT | O_EXCL`` so two writers can never both hold it. A second writer is refused
with a message naming the first. A lock whose pid no longer lives on this host was left by a
killed process: it is taken over, with a note. Readers (``attncoda report``) never take it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError

LOCK = ".lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _holder(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _stale(holder: dict[str, Any], host: str) -> bool:
    """A lock is stale when its pid does not live on this host (the holder was killed)."""
    pid = holder.get("pid")
    return holder.get("host") == host and isinstance(pid, int) and not _alive(pid)


def _create(path: Path, record: dict[str, Any]) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return True


@contextlib.contextmanager
def writer_lock(root: str | os.PathLike[str], command: str) -> Iterator[dict[str, Any]]:
    """Hold the writer lock of run folder ``root`` inside the block.

    Parameters
    ----------
    root : path-like
        The run folder (it must exist).
    command : str
        Recorded in the lock, for the message a second writer gets.

    Yields
    ------
    dict
        The lock's record: ``pid``, ``host``, ``command``, ``started``.

    Raises
    ------
    AttncodaError
        Another live process holds the lock (the message names its pid and host).
    """
    path = Path(root) / LOCK
    host = socket.gethostname()
    record = {
        "pid": os.getpid(),
        "host": host,
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for _ in range(3):
        if _create(path, record):
            break
        holder = _holder(path)
        if holder is None:  # released between the two calls
            continue
        if holder and _stale(holder, host):
            path.unlink(missing_ok=True)
            print(
                f"note: took over the lock of {str(root)!r} from pid {holder['pid']} on "
                f"{host}, which no longer runs (its unfinished unit is redone)",
                file=sys.stderr,
            )
            continue
        who = (
            f"pid {holder.get('pid')} on {holder.get('host')} ({holder.get('command')}, "
            f"since {holder.get('started')})"
            if holder
            else f"a writer whose lock file {str(path)!r} is unreadable"
        )
        raise AttncodaError(
            f"{str(root)!r} is being written by {who}: wait for it to finish, or give another --out"
        )
    else:
        raise AttncodaError(f"could not take the lock {str(path)!r}: try again")
    try:
        yield record
    finally:
        if _holder(path) == record:
            path.unlink(missing_ok=True)


__all__ = ["LOCK", "writer_lock"]
