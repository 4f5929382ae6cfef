"""A resumable run folder: one manifest, one partition per unit of work, unioned tables.

Layout of a run folder ``DIR``::

    DIR/manifest.json                          config, package versions, model facts
    DIR/units/<experiment>/<model>@<revision>/ one partition per unit:
        <table>.parquet ...                    the unit's tables
        _done.json                             written last: the unit is finished, with
                                               the size and sha256 of each of its files
    DIR/.lock                                  the writer's pid and host while it runs
    DIR/tables/<table>.parquet                 the union of every unit's partition

A *unit* is ``(model, revision, experiment)``. Every file is written atomically (a temporary
file in the same folder, then a rename), and ``_done.json`` only after every table of its
unit, so a run killed at any moment leaves finished units (skipped on rerun) and at most
unfinished ones (redone from scratch). Units never share files, so they may run in separate
processes (or on separate machines sharing the folder) at once.

A run folder belongs to one config: opening it with another is refused, and the message names
the differing keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.store.files import atomic_write_json, jsonable, read_json, read_table, write_table
from attncoda.store.guard import check_run_folder
from attncoda.store.manifest import MANIFEST, run_manifest

if TYPE_CHECKING:
    import pandas as pd

DONE = "_done.json"
_SLUG = re.compile(r"[^A-Za-z0-9_.+-]+")
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: ``revision`` of a unit whose model has no revision (an embedded model, a local folder).
NO_REVISION = "-"


def slug(text: str) -> str:
    """``text`` made safe as one folder name (``/`` and other odd characters become ``_``)."""
    return _SLUG.sub("_", text).strip("_") or "_"


@dataclass(frozen=True, order=True)
class Unit:
    """One unit of work: an experiment on one model at one revision.

    Attributes
    ----------
    experiment : str
        ``profile``, ``flips``, ``cluster``, ``safety``, ``predictor``, ``prune``, ``train``
        or ``collapse``.
    model : str
        The model spec as given (``smollm2``, ``owner/name``, a folder, a series name).
    revision : str
        The revision (``step512``, a commit), or ``"-"`` for none.
    """

    experiment: str
    model: str
    revision: str = NO_REVISION

    @property
    def key(self) -> str:
        """``experiment/model@revision``: how the unit is named in messages and progress."""
        return f"{self.experiment}/{self.model}@{self.revision}"

    @property
    def folder(self) -> str:
        """The unit's partition folder, relative to ``DIR/units``."""
        return f"{slug(self.experiment)}/{slug(self.model)}@{slug(self.revision)}"


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        if not obj and prefix:
            out[prefix[:-1]] = {}
        return out
    return {prefix[:-1]: obj}


def config_differences(stored: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two configs (missing counts as differing)."""
    a, b = _flatten(_plain(stored)), _flatten(_plain(given))
    return sorted(k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING))


_MISSING = object()


def _plain(obj: Any) -> Any:
    """JSON's view of ``obj`` (tuples become lists), so a stored and a given config compare."""
    return json.loads(json.dumps(obj, default=jsonable))


class RunStore:
    """A run folder holding one config's results, unit by unit.

    Parameters
    ----------
    root : path-like
        The run folder; created if missing. It must be new, empty or a run folder
        (:func:`check_run_folder`): a folder of a user's files is never written into.
    command : str
        The command that makes the run (recorded in the manifest).
    config : dict
        Everything that determines the results: models, revisions, series, settings, corpus
        hash, seeds. JSON-ready. A folder already holding a manifest with another config is
        refused.

    Raises
    ------
    AttncodaError
        ``root`` is a file or a folder of other files, or holds a run of another command or
        config (the message names every differing key), or its manifest is unreadable.
    """

    def __init__(self, root: str | os.PathLike[str], command: str, config: Mapping[str, Any]):
        self.root = Path(root)
        self.command = command
        self.config = _plain(dict(config))
        check_run_folder(self.root)
        manifest_path = self.root / MANIFEST
        #: Whether this store wrote the folder's manifest (the folder held no run before).
        self.made = False
        if manifest_path.is_file():
            try:
                stored = read_json(manifest_path)
            except AttncodaError as exc:
                raise AttncodaError(
                    f"the run manifest {str(manifest_path)!r} is corrupt ({exc}): move the "
                    f"folder aside, or give another --out"
                ) from None
            if stored.get("command") != command:
                raise AttncodaError(
                    f"{str(self.root)!r} holds a run of {stored.get('command')!r}, not "
                    f"{command!r}: give another --out"
                )
            differing = config_differences(stored.get("config", {}), self.config)
            if differing:
                shown = ", ".join(
                    f"{k} (stored {_get(stored.get('config', {}), k)!r}, given "
                    f"{_get(self.config, k)!r})"
                    for k in differing[:8]
                )
                more = f" and {len(differing) - 8} more" if len(differing) > 8 else ""
                raise AttncodaError(
                    f"{str(self.root)!r} holds a run with another config; differing keys: "
                    f"{shown}{more}. Rerun with the stored settings to resume it, or give "
                    f"another --out"
                )
            self.manifest = stored
        else:
            self.manifest = run_manifest(command, self.config)
            atomic_write_json(manifest_path, self.manifest)
            self.made = True

    # units -----------------------------------------------------------------------------------

    def unit_dir(self, unit: Unit) -> Path:
        """The folder of ``unit``'s partition."""
        return self.root / "units" / unit.folder

    def is_done(self, unit: Unit) -> bool:
        """Whether ``unit`` finished: its ``_done.json`` names it and every file it lists
        has the recorded size and sha256 (see :meth:`damage`)."""
        path = self.unit_dir(unit) / DONE
        if not path.is_file():
            return False
        try:
            done = read_json(path)
        except AttncodaError:
            return False
        if done.get("unit") != [unit.experiment, unit.model, unit.revision]:
            return False
        return self.damage(unit, done) is None

    def damage(self, unit: Unit, done: Mapping[str, Any] | None = None) -> str | None:
        """Why a finished unit's files cannot be trusted (a file missing, truncated or
        changed since ``_done.json`` recorded it), or None when they all match."""
        folder = self.unit_dir(unit)
        if done is None:
            try:
                done = read_json(folder / DONE)
            except AttncodaError as exc:
                return str(exc)
        for name, want in dict(done.get("files", {})).items():
            file = folder / name
            if not file.is_file():
                return f"{name} is missing"
            size = file.stat().st_size
            if size != want.get("bytes"):
                return f"{name} has {size} bytes, {want.get('bytes')} were written"
            if _sha256(file) != want.get("sha256"):
                return f"{name} changed since it was written (sha256 differs)"
        return None

    def begin(self, unit: Unit) -> Path:
        """Clear what an interrupted attempt at ``unit`` left, and return its folder."""
        folder = self.unit_dir(unit)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        return folder

    def clear_unfinished(self) -> list[Path]:
        """Remove every unit folder without a ``_done.json`` (what an interrupted run left);
        return them."""
        cleared = []
        for done_parent in sorted((self.root / "units").glob("*/*")):
            if done_parent.is_dir() and not (done_parent / DONE).is_file():
                shutil.rmtree(done_parent)
                cleared.append(done_parent)
        return cleared

    def finish(
        self,
        unit: Unit,
        tables: Mapping[str, pd.DataFrame],
        facts: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write ``unit``'s tables, then its ``_done.json`` (last, atomically).

        Each table gets ``model`` and ``revision`` columns first (the unit's) so the union of
        partitions keeps them apart. ``facts`` (JSON-ready: model facts, timings, a status)
        go into ``_done.json``; they are not tables, and may differ between reruns.
        """
        folder = self.unit_dir(unit)
        folder.mkdir(parents=True, exist_ok=True)
        for name, frame in tables.items():
            if not _TABLE_NAME.fullmatch(name):
                raise AttncodaError(f"table name {name!r} must be lower_snake_case")
            write_table(_keyed(frame, unit), folder / f"{name}.parquet")
        files = {
            p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
            for p in sorted(folder.iterdir())
            if p.is_file() and p.name != DONE and not p.name.startswith(".")
        }
        return atomic_write_json(
            folder / DONE,
            {
                "unit": [unit.experiment, unit.model, unit.revision],
                "tables": sorted(tables),
                "files": files,
                "facts": dict(facts or {}),
            },
        )

    def facts(self, unit: Unit) -> dict[str, Any]:
        """The facts a finished unit recorded."""
        return dict(read_json(self.unit_dir(unit) / DONE).get("facts", {}))

    def partition(self, unit: Unit, name: str) -> pd.DataFrame:
        """Table ``name`` of a finished unit (a pandas DataFrame)."""
        return read_table(self.unit_dir(unit) / f"{name}.parquet")

    def has_partition(self, unit: Unit, name: str) -> bool:
        """Whether a finished unit wrote table ``name``."""
        return self.is_done(unit) and (self.unit_dir(unit) / f"{name}.parquet").is_file()

    # the union -------------------------------------------------------------------------------

    def union(self, name: str, units: Iterable[Unit]) -> pd.DataFrame | None:
        """Table ``name`` over ``units`` (in the order given; units without it are passed)."""
        import pandas as pd

        frames = [self.partition(u, name) for u in units if self.has_partition(u, name)]
        frames = [f for f in frames if len(f.columns)]
        if not frames:
            return None
        if len(frames) == 1:
            return frames[0]
        return pd.concat(frames, ignore_index=True)

    def write_union(self, name: str, units: Iterable[Unit]) -> Path | None:
        """Write ``DIR/tables/<name>.parquet``, the union of the units' partitions (or remove
        a stale one when no unit has the table)."""
        frame = self.union(name, units)
        if frame is None:
            (self.root / "tables" / f"{name}.parquet").unlink(missing_ok=True)
            return None
        return write_table(frame, self.root / "tables" / f"{name}.parquet")

    def write_table(self, name: str, frame: pd.DataFrame) -> Path:
        """Write a derived table (computed from partitions) to ``DIR/tables``."""
        return write_table(frame, self.root / "tables" / f"{name}.parquet")

    def update_manifest(self, **facts: Any) -> Path:
        """Add what was learnt while running (model facts per unit) to the manifest."""
        self.manifest = {**self.manifest, **_plain(facts)}
        return atomic_write_json(self.root / MANIFEST, self.manifest)


_HASHES: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    """The file's sha256, remembered per (path, size, mtime) within the process."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def _keyed(frame: pd.DataFrame, unit: Unit) -> pd.DataFrame:
    out = frame.copy()
    for column in ("revision", "model"):
        if column in out.columns:
            out = out.drop(columns=column)
    out.insert(0, "revision", unit.revision)
    out.insert(0, "model", unit.model)
    return out


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    return _flatten(_plain(config)).get(dotted, "<absent>")


def read_run_tables(root: str | os.PathLike[str]) -> dict[str, pd.DataFrame]:
    """Every table of ``DIR/tables`` as ``{name: DataFrame}`` (sorted by name)."""
    folder = Path(root) / "tables"
    if not folder.is_dir():
        raise AttncodaError(
            f"{str(root)!r} holds no tables/ folder: give the --out folder of a run "
            f"(reproduce, sweep or an experiment command)"
        )
    return {p.stem: read_table(p) for p in sorted(folder.glob("*.parquet"))}


__all__ = [
    "NO_REVISION",
    "RunStore",
    "Unit",
    "config_differences",
    "read_run_tables",
    "slug",
]
