"""Atomic file writes: a result file is either complete or absent, never half-written.

Each write goes to a temporary file in the same folder, is flushed and fsynced, then renamed
over the target (``os.replace`` is atomic on POSIX and Windows within one filesystem). A
folder written as a whole (a model checkpoint) is filled under a temporary name beside its
target and renamed into place (:func:`atomic_folder`). :func:`is_temporary` recognises what a
killed write leaves behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TEMP_PREFIX",
    "atomic_folder",
    "atomic_write_bytes",
    "atomic_write_json",
    "is_temporary",
    "jsonable",
    "read_json",
    "read_table",
    "write_table",
]

#: Name prefix of the temporary folders :func:`atomic_folder` fills.
TEMP_PREFIX = ".attncoda-tmp-"


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; create the parent folder if needed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        _refuse_full(exc, target, len(data))
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            # mkstemp makes the file private (0600); results get the usual 0666 & ~umask.
            os.fchmod(handle.fileno(), 0o666 & ~_UMASK)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        _refuse_full(exc, target, len(data))
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _refuse_full(exc: OSError, target: Path, size: int) -> None:
    """A full disk (or quota) as one clear error; other OSErrors go on as they are."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise AttncodaError(
            f"no space left on the device for {str(target)!r} ({size} bytes): free some "
            f"space and rerun; nothing half-written was kept"
        ) from None


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once at import (setting and restoring the umask is process-wide, not thread-safe).
_UMASK = _read_umask()


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=jsonable) + "\n"
    return atomic_write_bytes(path, text.encode("utf-8"))


def jsonable(value: Any) -> Any:
    """``json.dumps``'s ``default``: a numpy scalar as its Python value, a path as a string.

    Raises ``TypeError`` for anything else, as ``json.dumps`` expects of ``default``.
    """
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def is_temporary(name: str) -> bool:
    """Whether ``name`` is that of a temporary this module writes (what a killed write leaves).

    ``.<target>.<random>.tmp`` files of :func:`atomic_write_bytes` and
    ``.attncoda-tmp-<target>-<pid>`` folders of :func:`atomic_folder`.
    """
    return name.startswith(TEMP_PREFIX) or (name.startswith(".") and name.endswith(".tmp"))


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Fill a folder under a temporary name, then put it at ``path`` in one rename.

    Yields ``<parent>/.attncoda-tmp-<name>-<pid>`` (emptied first if a killed attempt of this
    process id left it). When the block ends without an error, whatever ``path`` held is
    removed and the temporary folder is renamed to ``path``; on an error the temporary
    folder is removed and ``path`` is left as it was.
    """
    target = Path(path)
    temp = target.parent / f"{TEMP_PREFIX}{target.name}-{os.getpid()}"
    if temp.exists():
        shutil.rmtree(temp)
    temp.mkdir(parents=True)
    try:
        yield temp
        if target.exists():
            shutil.rmtree(target)
        os.rename(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file written by :func:`atomic_write_json`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise AttncodaError(f"no such file: {str(path)!r}") from exc
    except json.JSONDecodeError as exc:
        raise AttncodaError(f"{str(path)!r} is not valid JSON: {exc}") from exc


def write_table(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write a pandas DataFrame as Parquet (pyarrow, no index), atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return atomic_write_bytes(path, sink.getvalue().to_pybytes())


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a Parquet table written by :func:`write_table` into pandas."""
    import pandas as pd

    if not Path(path).is_file():
        raise AttncodaError(f"no such table: {str(path)!r}")
    return pd.read_parquet(path)
