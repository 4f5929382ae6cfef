"""Train a tiny Pythia-architecture model from scratch and save a checkpoint series.

:func:`train_tiny` trains a GPT-NeoX model (rotary, parallel residual: Pythia's
architecture) on the embedded corpus (``task="text"``) or on the synthetic Bigram-Backcopy
task of :mod:`attncoda.data.tasks` (``task="bigram-backcopy"``, on which a sink grows;
fresh sequences every step, a word-level tokenizer, and per-head attention on ``<|bos|>`` at
trigger and non-trigger queries in every checkpoint's record), on the CPU, and saves Hugging
Face checkpoints in
``out_dir/step{N}`` folders on Pythia's log-spaced schedule (:func:`checkpoint_steps`). Such
a folder is a *series*: the ``collapse`` experiment reads it, ordered by
:func:`list_checkpoints`. Every checkpoint loads offline with
``AutoModelForCausalLM.from_pretrained(folder)`` and ``AutoTokenizer.from_pretrained(folder)``.

Choices, and why:

- **Tokenizer**: a byte-level BPE trained here on the training documents (deterministic,
  offline, ``vocab_size`` entries). A small vocabulary keeps the embedding and the softmax,
  which dominate a tiny model's cost, cheap, and gives more token positions per byte of text.
  Two special tokens: ``<|bos|>`` (id 0), put before every window and every encoded text, and
  ``<|endoftext|>`` (id 1), which ends each document in the token stream.
- **Data**: the last ``val_fraction`` of the documents are held out. The training documents
  are concatenated into one stream (each followed by ``<|endoftext|>``); a training window is
  ``<|bos|>`` followed by ``window - 1`` consecutive stream tokens from a random start. A
  fixed first token at every window start is what lets a first-token attention sink form
  (Gu et al. 2024).
- **Optimiser**: AdamW (betas 0.9/0.95, weight decay on matrices only), linear warmup then
  cosine decay to a tenth of the peak rate, gradient clipping at 1.0: Pythia's recipe.
- **Determinism**: the same arguments give bit-identical checkpoints on the same machine and
  library versions: the weights are initialised under ``torch.manual_seed(seed)`` (in a
  forked RNG, so the caller's global RNG is untouched), windows are drawn from a
  ``torch.Generator`` seeded with ``seed``, deterministic algorithms are switched on and the
  thread count is fixed (``threads``) for the run; both are restored afterwards.

Each checkpoint folder also holds ``attncoda_train.json``: the step, the losses, the seed, the
training configuration, the corpus sha256 and the mean attention each head puts on key 0
(the ``<|bos|>`` token) on held-out windows. When every checkpoint is written, the series
file ``attncoda_series.json`` is written in ``out_dir``: it marks the series as finished.

References
----------
Biderman et al. (2023), "Pythia: A Suite for Analyzing Large Language Models Across Training
and Scaling". Gu et al. (2024), "When Attention Sink Emerges in Language Models: An Empirical
View".
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attncoda._errors import AttncodaError
from attncoda.data.corpus import Document, corpus_hash, load_corpus
from attncoda.data.tasks import (
    BIGRAM_BACKCOPY,
    BOS_TOKEN,
    EOS_TOKEN,
    TASKS,
    BigramBackcopy,
    bos_attention,
)

__all__ = [
    "BOS_TOKEN",
    "CHECKPOINT_META",
    "EOS_TOKEN",
    "MODEL_SIZES",
    "SERIES_META",
    "TASK_DEFAULTS",
    "TrainResult",
    "checkpoint_steps",
    "checkpoint_task",
    "list_checkpoints",
    "train_tiny",
]

#: Name of the JSON file each checkpoint folder holds.
CHECKPOINT_META = "attncoda_train.json"
#: Name of the JSON file that marks a finished series.
SERIES_META = "attncoda_series.json"

# name -> (layers, hidden size, attention heads); the MLP is 4x the hidden size.
_SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 64, 4),
    "small": (4, 128, 4),
}
#: Accepted values of ``size``.
MODEL_SIZES = tuple(_SIZES)

#: What ``None`` stands for in :func:`train_tiny`, per task. The Bigram-Backcopy values are
#: those that grew a sink on a shared 2-core CPU in under two minutes (see train_tiny's notes).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "text": {"steps": 1000, "size": "small", "window": 128, "batch_size": 16, "lr": 2e-3},
    BIGRAM_BACKCOPY: {"steps": 2000, "size": "tiny", "window": 64, "batch_size": 32, "lr": 1e-2},
}

_STEP_DIR = re.compile(r"step(\d+)")
_TEMP_PREFIX = ".attncoda-tmp-"
_LOG_SPACED_UNTIL = 512
_LINEAR_EVERY = 1000
_MIN_WINDOW = 8
_N_TRAIN_EVAL_WINDOWS = 32
_MAX_VAL_WINDOWS = 64
_N_ATTENTION_WINDOWS = 8
_FORMAT = 1


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train_tiny` produced.

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


@dataclass(frozen=True)
class _Data:
    train_stream: torch.Tensor  # (n_tokens,) int64, documents joined by <|endoftext|>
    train_eval: torch.Tensor  # (batch, window) fixed training windows, <|bos|> first
    val: torch.Tensor  # (batch, window) held-out windows, <|bos|> first
    n_train_docs: int
    n_val_docs: int
    task: BigramBackcopy | None = None


# --------------------------------------------------------------------------------------------
# Public functions


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
    _check_steps(steps)
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


def train_tiny(
    out_dir: str | os.PathLike[str],
    *,
    task: str = "text",
    steps: int | None = None,
    seed: int = 0,
    size: str | None = None,
    window: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    warmup: int | None = None,
    weight_decay: float = 0.1,
    vocab_size: int = 1024,
    val_fraction: float = 0.05,
    corpus: str | os.PathLike[str] | Sequence[Document] | None = None,
    threads: int = 1,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train a tiny GPT-NeoX (Pythia architecture) from scratch and save a checkpoint series.

    Checkpoints go to ``out_dir/step{N}`` for ``N`` in :func:`checkpoint_steps`, each written
    into a temporary folder beside it and renamed when complete; ``attncoda_series.json`` is
    written last. What an existing ``out_dir`` leads to:

    - missing or empty: trained;
    - a finished series with the same configuration: nothing is trained, the recorded
      result is returned (``trained=False``);
    - an unfinished series with the same configuration (an interrupted run): trained again
      from step 0 (training is deterministic, so the checkpoints already there are rewritten
      with identical weights);
    - a series with another configuration: refused, unless ``overwrite=True``, which removes
      it first;
    - anything else (a file that no training run writes): refused, even with ``overwrite``.

    Parameters
    ----------
    out_dir : str or path-like
        The series folder; created if missing.
    task : str
        ``"text"``: next-token prediction on the corpus. ``"bigram-backcopy"``: the
        synthetic task of :mod:`attncoda.data.tasks` (fresh sequences every step; the
        corpus arguments are unused), on which a sink grows.
    steps : int or None
        Optimiser steps, at least 1. ``None`` here and below: the task's value in
        :data:`TASK_DEFAULTS` (text: 1000 steps, ``"small"``, 128-token windows, batches
        of 16, lr 2e-3; bigram-backcopy: 2000, ``"tiny"``, 64, 32, 1e-2).
    seed : int
        Seeds the weight initialisation and the window sampling.
    size : str or None
        ``"tiny"`` (2 layers, hidden 64, 4 heads) or ``"small"`` (4 layers, hidden 128,
        4 heads).
    window : int or None
        Tokens per window, ``<|bos|>`` included; also the model's context length.
    batch_size : int or None
        Windows per optimiser step.
    lr : float or None
        Peak learning rate.
    warmup : int or None
        Linear warmup steps; ``None`` for ``min(100, steps // 10)``.
    weight_decay : float
        AdamW weight decay, applied to weight matrices and embeddings, not to biases and
        layer norms.
    vocab_size : int
        Size of the byte-level BPE vocabulary trained on the training documents.
    val_fraction : float
        Share of the documents, taken from the end of the corpus, held out for validation.
    corpus : str, path-like, sequence of Document or None
        The text; ``None`` for the embedded corpus, a spec or path as for
        :func:`attncoda.data.corpus.load_corpus`, or the documents themselves. Text
        task only.
    threads : int
        Torch CPU threads during training; results are bit-identical only for the same count.
    overwrite : bool
        Replace a series of another configuration in ``out_dir``.
    progress : bool
        Show a tqdm progress bar with the running training loss.

    Returns
    -------
    TrainResult

    Raises
    ------
    AttncodaError
        For an argument out of range, an unknown size, a corpus too small for a window, or an
        ``out_dir`` that holds something it may not replace.

    Notes
    -----
    Measured with the defaults on the embedded corpus (50 training documents, 48k tokens;
    3 held-out documents), one thread of a shared 2-core CPU: about 2.5 steps/s, 6.5 minutes
    for 1000 steps. The held-out loss is lowest (4.49 nats) near step 256 and rises after it
    as the model memorises the training text (train/held-out 1.67/5.53 at step 1000). No
    first-token sink forms: the mean attention on ``<|bos|>`` stays at the uniform value
    (0.035) up to step 256 and reaches only 0.035-0.095 per layer at step 1000 (highest in
    layer 0; no head above 0.12, far from the 0.3 of Gu et al.'s sink criterion). A larger
    learning rate and weight decay (4e-3, 0.5) or the ``"tiny"`` size for 3000 steps gave
    the same picture. Gu et al. find that sinks need enough training data; 48k tokens is far
    below that: a larger ``corpus`` is the lever to try (not measured here).

    Bigram-Backcopy with its defaults (64 ordinary tokens, 3 triggers, 64-token sequences;
    2 layers x 4 heads, hidden 64; lr 1e-2, 2000 steps of 32 sequences): a sink grows.
    See the README's collapse section for the measured series and what it took.
    """
    if task not in TASKS:
        raise AttncodaError(f"unknown task {task!r}; accepted: {', '.join(repr(t) for t in TASKS)}")
    defaults = TASK_DEFAULTS[task]
    steps = defaults["steps"] if steps is None else steps
    size = defaults["size"] if size is None else size
    window = defaults["window"] if window is None else window
    batch_size = defaults["batch_size"] if batch_size is None else batch_size
    lr = defaults["lr"] if lr is None else lr
    _check_steps(steps)
    _check_arguments(
        size, seed, window, batch_size, lr, warmup, weight_decay, vocab_size, val_fraction, threads
    )
    if warmup is None:
        warmup = min(100, steps // 10)
    out = Path(out_dir)
    if task == BIGRAM_BACKCOPY:
        return _train_task(
            out,
            steps,
            seed,
            size,
            window,
            batch_size,
            lr,
            warmup,
            weight_decay,
            threads,
            overwrite,
            progress,
        )
    docs = _documents(corpus)
    config = {
        "format": _FORMAT,
        "size": size,
        "steps": steps,
        "seed": seed,
        "window": window,
        "batch_size": batch_size,
        "lr": lr,
        "warmup": warmup,
        "weight_decay": weight_decay,
        "vocab_size": vocab_size,
        "val_fraction": val_fraction,
        "threads": threads,
        "corpus_sha256": corpus_hash(docs),
    }
    finished, stale = _inspect_out_dir(out, config, overwrite)
    if finished is not None:
        return finished
    with _deterministic(threads):
        tokenizer = _train_tokenizer(docs, config)
        data = _prepare_data(docs, tokenizer, config)
        # Only now, with every argument and the corpus accepted, is the folder touched.
        for entry in stale:
            _remove(entry)
        out.mkdir(parents=True, exist_ok=True)
        return _train(out, tokenizer, data, config, progress)


def _train_task(
    out: Path,
    steps: int,
    seed: int,
    size: str,
    window: int,
    batch_size: int,
    lr: float,
    warmup: int,
    weight_decay: float,
    threads: int,
    overwrite: bool,
    progress: bool,
) -> TrainResult:
    """Bigram-Backcopy: the same model, loop, schedule and folder rules as the text task."""
    from attncoda.data.tasks import task_tokenizer

    task = BigramBackcopy(seq_len=window)
    config = {
        "format": _FORMAT,
        "task": BIGRAM_BACKCOPY,
        "task_config": task.to_dict(),
        "size": size,
        "steps": steps,
        "seed": seed,
        "window": window,
        "batch_size": batch_size,
        "lr": lr,
        "warmup": warmup,
        "weight_decay": weight_decay,
        "threads": threads,
    }
    finished, stale = _inspect_out_dir(out, config, overwrite)
    if finished is not None:
        return finished
    with _deterministic(threads):
        tokenizer = task_tokenizer(task, window)
        held_out = torch.from_numpy(
            task.evaluation_sequences(_N_TRAIN_EVAL_WINDOWS + _MAX_VAL_WINDOWS)
        )
        data = _Data(
            train_stream=torch.zeros(0, dtype=torch.long),
            train_eval=held_out[:_N_TRAIN_EVAL_WINDOWS],
            val=held_out[_N_TRAIN_EVAL_WINDOWS:],
            n_train_docs=0,
            n_val_docs=0,
            task=task,
        )
        for entry in stale:
            _remove(entry)
        out.mkdir(parents=True, exist_ok=True)
        return _train(out, tokenizer, data, config, progress)


# --------------------------------------------------------------------------------------------
# Argument checks


def _check_steps(steps: object) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise AttncodaError(f"steps must be an integer of at least 1, got {steps!r}")


def _check_arguments(
    size: str,
    seed: int,
    window: int,
    batch_size: int,
    lr: float,
    warmup: int | None,
    weight_decay: float,
    vocab_size: int,
    val_fraction: float,
    threads: int,
) -> None:
    if size not in _SIZES:
        raise AttncodaError(
            f"unknown model size {size!r}; accepted: {', '.join(repr(s) for s in _SIZES)}"
        )
    for name, value, least in (
        ("window", window, _MIN_WINDOW),
        ("batch_size", batch_size, 1),
        ("vocab_size", vocab_size, 300),
        ("threads", threads, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise AttncodaError(f"{name} must be an integer of at least {least}, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise AttncodaError(f"seed must be an integer from 0 to 2**63 - 1, got {seed!r}")
    if warmup is not None and (
        isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0
    ):
        raise AttncodaError(f"warmup must be None or an integer of at least 0, got {warmup!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise AttncodaError(f"lr must be a finite number above 0, got {lr!r}")
    if not (isinstance(weight_decay, (int, float)) and math.isfinite(weight_decay)) or (
        weight_decay < 0
    ):
        raise AttncodaError(
            f"weight_decay must be a finite number of at least 0, got {weight_decay!r}"
        )
    if not (isinstance(val_fraction, (int, float)) and 0 < val_fraction < 1):
        raise AttncodaError(
            f"val_fraction must be a number strictly between 0 and 1, got {val_fraction!r}"
        )


def _documents(corpus: str | os.PathLike[str] | Sequence[Document] | None) -> list[Document]:
    if corpus is None or isinstance(corpus, (str, os.PathLike)):
        return load_corpus(corpus)
    docs = list(corpus)
    for doc in docs:
        if not isinstance(doc, Document):
            raise AttncodaError(
                f"corpus must be a spec, a path or a sequence of Document, got an item of type "
                f"{type(doc).__name__}"
            )
    return docs


# --------------------------------------------------------------------------------------------
# The output folder


def _inspect_out_dir(
    out: Path, config: dict[str, Any], overwrite: bool
) -> tuple[TrainResult | None, list[Path]]:
    """Return the finished series ``out`` holds, or the entries to remove before training.

    Nothing is changed on disk here.
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
        finished = _finished_series(out, config)
        if finished is not None:
            return finished, []
        differing = _differing_keys(out, config)
        if differing:
            raise AttncodaError(
                f"output folder '{out}' holds checkpoints of another training configuration "
                f"(differs in: {', '.join(differing)}); pass overwrite=True to replace them"
            )
    return None, entries


def _is_series_entry(entry: Path) -> bool:
    if entry.name.startswith(_TEMP_PREFIX):
        return True
    if entry.name == SERIES_META:
        return entry.is_file()
    return entry.is_dir() and _STEP_DIR.fullmatch(entry.name) is not None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _finished_series(out: Path, config: dict[str, Any]) -> TrainResult | None:
    series = _read_json(out / SERIES_META)
    if series is None or series.get("config") != config:
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
            **_task_fields(config, records),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if list(steps) != checkpoint_steps(config["steps"]):
        return None
    if not all((path / CHECKPOINT_META).is_file() for path in paths):
        return None
    return result


def _differing_keys(out: Path, config: dict[str, Any]) -> list[str]:
    """Configuration keys in which the series in ``out`` differs from ``config``."""
    differing: set[str] = set()
    metas = [out / SERIES_META] + [p / CHECKPOINT_META for p in out.iterdir() if p.is_dir()]
    for meta in metas:
        if not meta.exists() and meta.parent.name.startswith(_TEMP_PREFIX):
            continue
        data = _read_json(meta)
        if data is None:
            if meta.exists() or meta.name == CHECKPOINT_META:
                differing.add(f"unreadable {meta.parent.name}/{meta.name}")
            continue
        recorded = data.get("config")
        if not isinstance(recorded, dict):
            differing.add(f"unreadable {meta.parent.name}/{meta.name}")
            continue
        differing.update(
            k for k in config.keys() | recorded.keys() if recorded.get(k) != config.get(k)
        )
    return sorted(differing)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


# --------------------------------------------------------------------------------------------
# Training


@contextmanager
def _deterministic(threads: int) -> Iterator[None]:
    old_threads = torch.get_num_threads()
    old_deterministic = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_deterministic, warn_only=old_warn)


def _train(
    out: Path, tokenizer: Any, data: _Data, config: dict[str, Any], progress: bool
) -> TrainResult:
    from tqdm.auto import tqdm
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    layers, hidden, heads = _SIZES[config["size"]]
    model_config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=config["window"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        use_parallel_residual=True,
    )
    torch.manual_seed(config["seed"])
    # Eager attention: deterministic, and it returns the attention weights the checkpoint
    # statistics need; at these widths and lengths attention is a small share of the cost.
    model = GPTNeoXForCausalLM._from_config(model_config, attn_implementation="eager")
    optimizer = _optimizer(model, config)
    sampler: Any = (
        torch.Generator().manual_seed(config["seed"])
        if data.task is None
        else np.random.default_rng(config["seed"])
    )
    schedule = checkpoint_steps(config["steps"])
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    running = float("nan")
    desc = "train-tiny" if data.task is None else f"train-tiny {BIGRAM_BACKCOPY}"
    bar = tqdm(total=config["steps"], desc=desc, unit="step", disable=not progress)
    try:
        for step in range(config["steps"] + 1):
            if step == schedule[len(records)]:
                record = _evaluate(model, data, step)
                _save_checkpoint(
                    out,
                    step,
                    model,
                    tokenizer,
                    {
                        **record,
                        "seed": config["seed"],
                        "config": config,
                        **(
                            {"corpus_sha256": config["corpus_sha256"], "corpus": _corpus_info(data)}
                            if data.task is None
                            else {}
                        ),
                    },
                )
                records.append(record)
            if step == config["steps"]:
                break
            loss = _train_step(model, optimizer, data, sampler, step, config)
            running = loss if math.isnan(running) else 0.95 * running + 0.05 * loss
            bar.update(1)
            if step % 10 == 0 or step + 1 == config["steps"]:
                bar.set_postfix(loss=f"{running:.3f}")
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    result = TrainResult(
        out_dir=out,
        steps=tuple(r["step"] for r in records),
        checkpoints=tuple(out / f"step{r['step']}" for r in records),
        train_loss=tuple(r["train_loss"] for r in records),
        val_loss=tuple(r["val_loss"] for r in records),
        first_token_attention=tuple(tuple(r["first_token_attention"]) for r in records),
        seconds=seconds,
        steps_per_second=config["steps"] / seconds,
        **_task_fields(config, records),
    )
    _write_series(out, config, records, result)
    return result


def _task_fields(config: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The TrainResult fields that only the Bigram-Backcopy task fills."""
    if config.get("task", "text") == "text":
        return {}

    def nested(key: str) -> tuple[tuple[tuple[float, ...], ...], ...]:
        return tuple(tuple(tuple(float(v) for v in layer) for layer in r[key]) for r in records)

    return {
        "task": config["task"],
        "bos_attention_trigger": nested("bos_attention_trigger"),
        "bos_attention_non_trigger": nested("bos_attention_non_trigger"),
    }


def _train_tokenizer(docs: list[Document], config: dict[str, Any]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    train_docs, _ = _split(docs, config["val_fraction"])
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config["vocab_size"],
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([doc.text for doc in train_docs], trainer)
    bos = bpe.token_to_id(BOS_TOKEN)
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {EOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, bos), (EOS_TOKEN, bpe.token_to_id(EOS_TOKEN))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        model_max_length=config["window"],
    )


def _split(docs: list[Document], val_fraction: float) -> tuple[list[Document], list[Document]]:
    if len(docs) < 2:
        raise AttncodaError(
            f"the corpus holds {len(docs)} document{'' if len(docs) == 1 else 's'}; training "
            "needs at least 2 (one is held out for validation)"
        )
    n_val = min(len(docs) - 1, max(1, round(val_fraction * len(docs))))
    return docs[: len(docs) - n_val], docs[len(docs) - n_val :]


def _stream(texts: list[str], tokenizer: Any) -> torch.Tensor:
    # The backend tokenizer: no "longer than model_max_length" warning for whole documents.
    encodings = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    eos = tokenizer.eos_token_id
    return torch.tensor([t for enc in encodings for t in (*enc.ids, eos)], dtype=torch.long)


def _prepare_data(docs: list[Document], tokenizer: Any, config: dict[str, Any]) -> _Data:
    train_docs, val_docs = _split(docs, config["val_fraction"])
    window = config["window"]
    train = _stream([d.text for d in train_docs], tokenizer)
    val = _stream([d.text for d in val_docs], tokenizer)
    body = window - 1
    if len(train) < body + 1 or len(val) < body:
        raise AttncodaError(
            f"the corpus is too small for {window}-token windows: {len(train)} training and "
            f"{len(val)} held-out tokens; each needs at least {body + 1} and {body}"
        )
    # Fixed, evenly spaced training windows: the training loss at every checkpoint is
    # measured on the same text, whatever the seed.
    n_eval = _N_TRAIN_EVAL_WINDOWS
    starts = torch.linspace(0, len(train) - body, n_eval).long()
    train_eval = _with_bos(
        torch.stack([train[s : s + body] for s in starts]), tokenizer.bos_token_id
    )
    n_val = min(_MAX_VAL_WINDOWS, len(val) // body)
    val_windows = _with_bos(val[: n_val * body].reshape(n_val, body), tokenizer.bos_token_id)
    return _Data(train, train_eval, val_windows, len(train_docs), len(val_docs))


def _with_bos(body: torch.Tensor, bos_id: int) -> torch.Tensor:
    bos = torch.full((body.shape[0], 1), bos_id, dtype=torch.long)
    return torch.cat([bos, body], dim=1)


def _corpus_info(data: _Data) -> dict[str, int]:
    return {
        "n_train_documents": data.n_train_docs,
        "n_val_documents": data.n_val_docs,
        "n_train_tokens": int(data.train_stream.numel()),
        "n_val_windows": int(data.val.shape[0]),
    }


def _optimizer(model: Any, config: dict[str, Any]) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config["lr"],
        betas=(0.9, 0.95),
        eps=1e-8,
    )


def _learning_rate(step: int, config: dict[str, Any]) -> float:
    peak, warmup, total = config["lr"], config["warmup"], config["steps"]
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _train_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    data: _Data,
    sampler: torch.Generator,
    step: int,
    config: dict[str, Any],
) -> float:
    if data.task is not None:
        batch = torch.from_numpy(data.task.sample(config["batch_size"], sampler))
    else:
        body = config["window"] - 1
        n_starts = len(data.train_stream) - body + 1
        starts = torch.randint(n_starts, (config["batch_size"],), generator=sampler)
        offsets = torch.arange(body)
        batch = _with_bos(data.train_stream[starts[:, None] + offsets], model.config.bos_token_id)
    for group in optimizer.param_groups:
        group["lr"] = _learning_rate(step, config)
    model.train()
    loss = model(input_ids=batch, labels=batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def _evaluate(model: Any, data: _Data, step: int) -> dict[str, Any]:
    model.eval()
    train_loss = _mean_loss(model, data.train_eval)
    val_loss = _mean_loss(model, data.val)
    heads = _first_token_attention(model, data.val[:_N_ATTENTION_WINDOWS])
    record = {
        "step": step,
        "train_loss": train_loss,
        "val_loss": val_loss,
        "first_token_attention": [sum(row) / len(row) for row in heads],
        "first_token_attention_per_head": heads,
    }
    if data.task is not None:
        attentions = model(input_ids=data.val, output_attentions=True).attentions
        trigger, non_trigger = bos_attention(
            attentions, data.task.trigger_queries(data.val.numpy())
        )
        record["bos_attention_trigger"] = trigger
        record["bos_attention_non_trigger"] = non_trigger
    return record


def _mean_loss(model: Any, windows: torch.Tensor) -> float:
    # Every window has the same length, so the mean over batches of 16 is the token mean.
    losses = [
        float(model(input_ids=chunk, labels=chunk).loss) * chunk.shape[0]
        for chunk in windows.split(16)
    ]
    return sum(losses) / windows.shape[0]


def _first_token_attention(model: Any, windows: torch.Tensor) -> list[list[float]]:
    """Mean attention on key 0 per ``[layer][head]``, over windows and queries ``1..n-1``."""
    attentions = model(input_ids=windows, output_attentions=True).attentions
    # each: (batch, head, query_pos, key_pos); query 0 can only attend to key 0: left out.
    return [a[:, :, 1:, 0].mean(dim=(0, 2)).tolist() for a in attentions]


def _save_checkpoint(
    out: Path, step: int, model: Any, tokenizer: Any, meta: dict[str, Any]
) -> None:
    final = out / f"step{step}"
    temp = out / f"{_TEMP_PREFIX}step{step}-{os.getpid()}"
    if temp.exists():
        shutil.rmtree(temp)
    try:
        with _quiet_saving():
            model.save_pretrained(temp)
        tokenizer.save_pretrained(temp)
        (temp / CHECKPOINT_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        os.rename(temp, final)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


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


def _write_series(
    out: Path, config: dict[str, Any], records: list[dict[str, Any]], result: TrainResult
) -> None:
    keys = ("step", "train_loss", "val_loss", "first_token_attention")
    if config.get("task", "text") != "text":
        keys += ("bos_attention_trigger", "bos_attention_non_trigger")
    series = {
        "config": config,
        "checkpoints": [{k: r[k] for k in keys} for r in records],
        "seconds": result.seconds,
        "steps_per_second": result.steps_per_second,
    }
    temp = out / f"{_TEMP_PREFIX}{SERIES_META}-{os.getpid()}"
    temp.write_text(json.dumps(series, indent=2) + "\n", encoding="utf-8")
    os.replace(temp, out / SERIES_META)


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
