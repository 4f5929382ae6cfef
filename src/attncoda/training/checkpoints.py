"""A checkpoint series on disk: the ``step{N}`` folders, their records, the series file.

Checkpoints are saved on Pythia's log-spaced schedule (:func:`checkpoint_steps`) into
``out/step{N}`` folders, each written whole through the store's atomic writes
(:func:`attncoda.store.files.atomic_folder`); ``attncoda_series.json`` is written last and
marks the series as finished. :func:`inspect_out_dir` decides what an existing folder leads
to, with the store's config diff naming what differs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.data.tasks import BIGRAM_BACKCOPY, BigramBackcopy
from attncoda.store.files import atomic_folder, atomic_write_json, is_temporary, read_json
from attncoda.store.runs import config_differences
from attncoda.training.config import check_steps

__all__ = [
    "CHECKPOINT_META",
    "SERIES_META",
    "TrainResult",
    "checkpoint_steps",
    "checkpoint_task",
    "inspect_out_dir",
    "list_checkpoints",
    "remove_entry",
    "save_checkpoint",
    "task_fields",
    "write_series",
]

#: Name of the JSON file each checkpoint folder holds.
CHECKPOINT_META = "attncoda_train.json"
#: Name of the JSON file that marks a finished series.
SERIES_META = "attncoda_series.json"

_STEP_DIR = re.compile(r"step(\d+)")
_LOG_SPACED_UNTIL = 512
_LINEAR_EVERY = 1000


@dataclass(frozen=True)
class TrainResult:
    """What :func:`attncoda.training.train.train_tiny` produced.

    Attributes
    ----------
    out_dir : Path
        The series folder.
    steps : tuple of int
        The checkpoint steps, increasing; ``steps[0] == 0``.
    checkpoints : tuple of Path
        ``out_dir / f"step{N}"`` for each step.
    train_loss, val_loss : tuple of float
        Mean next-token cross-entropy (nats per token) at each checkpoint, on fixed windows of
        the training documents and on the held-out documents.
    first_token_attention : tuple of tuple of float
        ``[checkpoint][layer]``: mean attention on key 0 (``<|bos|>``) over heads, held-out
        windows and query positions ``1..window-1``. Uniform causal attention would give
        about ``(ln(window) - 0.42) / (window - 1)``, 0.034 for 128-token windows.
    seconds : float
        Wall time of the training loop (evaluation and saving included).
    steps_per_second : float
        Optimiser steps per second of ``seconds``.
    trained : bool
        False when the call found the finished series already in ``out_dir`` and returned
        what its series file records (``seconds`` and ``steps_per_second`` of that run).
    task : str
        ``"text"`` or ``"bigram-backcopy"``.
    bos_attention_trigger, bos_attention_non_trigger : tuple of tuple of tuple of float
        Bigram-Backcopy only (empty for text), ``[checkpoint][layer][head]``: mean attention
        on ``<|bos|>`` over the trigger queries and over the other queries of the held-out
        sequences (:func:`attncoda.data.tasks.bos_attention`). A dormant head has a large
        non-trigger value; an active head a small trigger value.
    """

    out_dir: Path
    steps: tuple[int, ...]
    checkpoints: tuple[Path, ...]
    train_loss: tuple[float, ...]
    val_loss: tuple[float, ...]
    first_token_attention: tuple[tuple[float, ...], ...]
    seconds: float
    steps_per_second: float
    trained: bool = True
    task: str = "text"
    bos_attention_trigger: tuple[tuple[tuple[float, ...], ...], ...] = ()
    bos_attention_non_trigger: tuple[tuple[tuple[float, ...], ...], ...] = ()


def checkpoint_steps(steps: int) -> list[int]:
    """Return the steps at which :func:`train_tiny` saves a checkpoint.

    Pythia's schedule: ``0``, then the powers of two up to 512, then every multiple of 1000,
    all up to ``steps``, and ``steps`` itself.

    Parameters
    ----------
    steps : int
        Number of optimiser steps, at least 1.

    Returns
    -------
    list of int
        Increasing steps, starting at 0 and ending at ``steps``.

    Examples
    --------
    >>> checkpoint_steps(20)
    [0, 1, 2, 4, 8, 16, 20]
    >>> checkpoint_steps(2500)[-4:]
    [512, 1000, 2000, 2500]
    """
    check_steps(steps)
    out = [0]
    power = 1
    while power <= min(steps, _LOG_SPACED_UNTIL):
        out.append(power)
        power *= 2
    out.extend(range(_LINEAR_EVERY, steps + 1, _LINEAR_EVERY))
    if out[-1] != steps:
        out.append(steps)
    return out


def list_checkpoints(folder: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Return the ``step{N}`` checkpoint folders of a series, ordered by ``N``.

    Parameters
    ----------
    folder : str or path-like
        The series folder.

    Returns
    -------
    list of (int, Path)
        ``(N, folder / f"step{N}")``, increasing in ``N`` (``step10`` after ``step2``).

    Raises
    ------
    AttncodaError
        If the folder does not exist or holds no ``step{N}`` folder.
    """
    root = Path(folder)
    if not root.is_dir():
        raise AttncodaError(f"checkpoint folder '{root}' does not exist")
    found = []
    for path in root.iterdir():
        match = _STEP_DIR.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    if not found:
        raise AttncodaError(
            f"checkpoint folder '{root}' holds no step<N> folder (e.g. 'step0', 'step1000')"
        )
    return sorted(found)


def checkpoint_task(folder: str | os.PathLike[str] | None) -> BigramBackcopy | None:
    """The task a ``train-tiny`` checkpoint folder was trained on, or ``None``.

    ``None`` for anything that is not a local folder holding a Bigram-Backcopy checkpoint's
    ``attncoda_train.json`` (a hub id, a text-task checkpoint, a pretrained model).
    """
    if folder is None:
        return None
    meta = Path(folder) / CHECKPOINT_META
    try:
        config = json.loads(meta.read_text(encoding="utf-8"))["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(config, dict) or config.get("task") != BIGRAM_BACKCOPY:
        return None
    return BigramBackcopy(**config["task_config"])


def task_fields(record: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The :class:`TrainResult` fields that only the Bigram-Backcopy task fills, from the
    checkpoint records of a series recorded with config ``record``."""
    if record.get("task", "text") == "text":
        return {}

    def nested(key: str) -> tuple[tuple[tuple[float, ...], ...], ...]:
        return tuple(tuple(tuple(float(v) for v in layer) for layer in r[key]) for r in records)

    return {
        "task": record["task"],
        "bos_attention_trigger": nested("bos_attention_trigger"),
        "bos_attention_non_trigger": nested("bos_attention_non_trigger"),
    }


def save_checkpoint(out: Path, step: int, model: Any, tokenizer: Any, meta: dict[str, Any]) -> None:
    """Write ``out/step{step}`` whole or not at all: weights, tokenizer, ``attncoda_train.json``."""
    with atomic_folder(out / f"step{step}") as temp:
        with _quiet_saving():
            model.save_pretrained(temp)
        tokenizer.save_pretrained(temp)
        atomic_write_json(temp / CHECKPOINT_META, meta)


@contextmanager
def _quiet_saving() -> Iterator[None]:
    """Hide the "Writing model shards" bar that ``save_pretrained`` shows for every save."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def write_series(
    out: Path, record: dict[str, Any], records: list[dict[str, Any]], result: TrainResult
) -> None:
    """Write ``out/attncoda_series.json`` (atomically, last): the series is finished."""
    keys: tuple[str, ...] = ("step", "train_loss", "val_loss", "first_token_attention")
    if record.get("task", "text") != "text":
        keys += ("bos_attention_trigger", "bos_attention_non_trigger")
    series = {
        "config": record,
        "checkpoints": [{k: r[k] for k in keys} for r in records],
        "seconds": result.seconds,
        "steps_per_second": result.steps_per_second,
    }
    atomic_write_json(out / SERIES_META, series)


def inspect_out_dir(
    out: Path, record: dict[str, Any], overwrite: bool
) -> tuple[TrainResult | None, list[Path]]:
    """The finished series ``out`` holds for config ``record``, or the entries to remove
    before training (nothing is changed on disk here).

    - missing or empty: ``(None, [])``;
    - a finished series of the same config: ``(result, [])``, ``result.trained`` False;
    - an unfinished series of the same config, or any series with ``overwrite``:
      ``(None, entries)``;
    - a series of another config without ``overwrite``: refused, naming the differing keys
      (:func:`attncoda.store.runs.config_differences`);
    - anything no training run writes: refused, even with ``overwrite``.
    """
    if out.exists() and not out.is_dir():
        raise AttncodaError(f"output path '{out}' exists and is not a folder")
    entries = sorted(out.iterdir()) if out.exists() else []
    if not entries:
        return None, []
    for entry in entries:
        if not _is_series_entry(entry):
            raise AttncodaError(
                f"output folder '{out}' holds '{entry.name}', which no training run writes; "
                "choose a new or empty folder"
            )
    if not overwrite:
        finished = _finished_series(out, record)
        if finished is not None:
            return finished, []
        differing = _differing_keys(out, record)
        if differing:
            raise AttncodaError(
                f"output folder '{out}' holds checkpoints of another training configuration "
                f"(differs in: {', '.join(differing)}); pass overwrite=True to replace them"
            )
    return None, entries


def remove_entry(entry: Path) -> None:
    """Remove a file or folder that :func:`inspect_out_dir` listed."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _is_series_entry(entry: Path) -> bool:
    if is_temporary(entry.name):
        return True
    if entry.name == SERIES_META:
        return entry.is_file()
    return entry.is_dir() and _STEP_DIR.fullmatch(entry.name) is not None


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (AttncodaError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _finished_series(out: Path, record: dict[str, Any]) -> TrainResult | None:
    series = _read_record(out / SERIES_META)
    if series is None or series.get("config") != record:
        return None
    try:
        records = series["checkpoints"]
        steps = tuple(int(r["step"]) for r in records)
        paths = tuple(out / f"step{step}" for step in steps)
        result = TrainResult(
            out_dir=out,
            steps=steps,
            checkpoints=paths,
            train_loss=tuple(float(r["train_loss"]) for r in records),
            val_loss=tuple(float(r["val_loss"]) for r in records),
            first_token_attention=tuple(
                tuple(float(v) for v in r["first_token_attention"]) for r in records
            ),
            seconds=float(series["seconds"]),
            steps_per_second=float(series["steps_per_second"]),
            trained=False,
            **task_fields(record, records),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if list(steps) != checkpoint_steps(record["steps"]):
        return None
    if not all((path / CHECKPOINT_META).is_file() for path in paths):
        return None
    return result


def _differing_keys(out: Path, record: dict[str, Any]) -> list[str]:
    """Config keys in which the series in ``out`` differs from ``record``."""
    differing: set[str] = set()
    metas = [out / SERIES_META] + [p / CHECKPOINT_META for p in out.iterdir() if p.is_dir()]
    for meta in metas:
        if not meta.exists() and is_temporary(meta.parent.name):
            continue
        data = _read_record(meta)
        if data is None:
            if meta.exists() or meta.name == CHECKPOINT_META:
                differing.add(f"unreadable {meta.parent.name}/{meta.name}")
            continue
        recorded = data.get("config")
        if not isinstance(recorded, dict):
            differing.add(f"unreadable {meta.parent.name}/{meta.name}")
            continue
        differing.update(config_differences(recorded, record))
    return sorted(differing)
