"""Train a tiny Pythia-architecture model from scratch and save a checkpoint series.

:func:`train_tiny` trains a GPT-NeoX model (rotary, parallel residual: Pythia's
architecture) on the embedded corpus (``task="text"``) or on the synthetic Bigram-Backcopy
task of :mod:`attncoda.data.tasks` (``task="bigram-backcopy"``, on which a sink grows;
fresh sequences every step, a word-level tokenizer, and per-head attention on ``<|bos|>`` at
trigger and non-trigger queries in every checkpoint's record), on the CPU, and saves Hugging
Face checkpoints in ``out_dir/step{N}`` folders on Pythia's log-spaced schedule
(:func:`checkpoint_steps`). Such a folder is a *series*: the ``collapse`` experiment reads
it, ordered by :func:`list_checkpoints`. Every checkpoint loads offline with
``AutoModelForCausalLM.from_pretrained(folder)`` and ``AutoTokenizer.from_pretrained(folder)``.

The run is one :class:`TrainConfig` (:mod:`attncoda.training.config`). The parts:

- :mod:`attncoda.training.tokenizer`: the byte-level BPE trained on the training documents;
- :mod:`attncoda.training.data`: the windows (``<|bos|>`` first, so a first-token sink can
  form; Gu et al. 2024) and the held-out split;
- :mod:`attncoda.training.loop`: model, AdamW with Pythia's schedule, determinism;
- :mod:`attncoda.training.checkpoints`: the ``step{N}`` folders, their records, the series
  file and what an existing folder leads to.

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

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda.data.corpus import Document, corpus_hash
from attncoda.data.tasks import (
    BIGRAM_BACKCOPY,
    BOS_TOKEN,
    EOS_TOKEN,
    BigramBackcopy,
    task_tokenizer,
)
from attncoda.training.checkpoints import (
    CHECKPOINT_META,
    SERIES_META,
    TrainResult,
    checkpoint_steps,
    checkpoint_task,
    inspect_out_dir,
    list_checkpoints,
    remove_entry,
)
from attncoda.training.config import (
    MODEL_SIZES,
    TASK_DEFAULTS,
    ResolvedTrainConfig,
    TrainConfig,
    check_threads,
)
from attncoda.training.data import documents, task_data, text_data
from attncoda.training.loop import deterministic, train
from attncoda.training.pinned import run_pinned
from attncoda.training.tokenizer import train_tokenizer

__all__ = [
    "BOS_TOKEN",
    "CHECKPOINT_META",
    "EOS_TOKEN",
    "MODEL_SIZES",
    "SERIES_META",
    "TASK_DEFAULTS",
    "TrainConfig",
    "TrainResult",
    "checkpoint_steps",
    "checkpoint_task",
    "list_checkpoints",
    "train_tiny",
]


def train_tiny(
    out_dir: str | os.PathLike[str],
    config: TrainConfig | None = None,
    *,
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
    config : TrainConfig, optional
        The run (:class:`TrainConfig`; its defaults when omitted: the text task).
    threads : int
        Recorded with the configuration, as before; training itself always runs on one
        thread in the pinned worker, the only count whose rounding every machine can repeat,
        so the weights do not depend on it.
    overwrite : bool
        Replace a series of another configuration in ``out_dir``.
    progress : bool
        Show progress with the running training loss (a bar on a terminal, a line every
        10 s elsewhere); also inside a run that shows progress.

    Returns
    -------
    TrainResult

    Raises
    ------
    AttncodaError
        For a field out of range, an unknown task or size, a corpus too small for a window,
        or an ``out_dir`` that holds something it may not replace.

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

    Examples
    --------
    >>> train_tiny("series", TrainConfig(task="bigram-backcopy", steps=64))  # doctest: +SKIP
    """
    run = (TrainConfig() if config is None else config).resolved()
    check_threads(threads)
    out = Path(out_dir)
    task, docs = None, []
    if run.task == BIGRAM_BACKCOPY:
        task = BigramBackcopy(seq_len=run.window, n_triggers=run.triggers)
        record = run.record(threads, task=task)
    else:
        docs = documents(run.corpus)
        record = run.record(threads, corpus_sha256=corpus_hash(docs))
    finished, stale = inspect_out_dir(out, record, overwrite)
    if finished is not None:
        return finished
    from attncoda._progress import Meter, showing

    job = TrainJob(out, run, record, task if run.task == BIGRAM_BACKCOPY else None, docs, stale)
    desc = "train-tiny" if run.task != BIGRAM_BACKCOPY else f"train-tiny {BIGRAM_BACKCOPY}"
    shown = progress or showing()  # asked for, or inside a run that shows progress
    with Meter(desc=desc, unit="step", total=run.steps, enabled=shown) as meter:

        def report(step: int, loss: float) -> None:
            meter.update(step, f"loss {loss:.3f}")

        return run_pinned(job, report if shown else None)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class TrainJob:
    """What the pinned worker needs to train one accepted series (:func:`execute`)."""

    out: Path
    run: ResolvedTrainConfig
    record: dict[str, Any]
    task: BigramBackcopy | None
    docs: list[Document]
    stale: list[Path]

    def __call__(self, report: Callable[[int, float], None] | None = None) -> TrainResult:
        """Train this job (:func:`execute`): what the pinned worker calls."""
        return execute(self, report)


def execute(job: TrainJob, report: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train ``job`` in this process, which must be pinned (:mod:`attncoda.training.pinned`)."""
    with deterministic(1):
        if job.task is not None:
            tokenizer = task_tokenizer(job.task, job.run.window)
            data = task_data(job.task)
        else:
            tokenizer = train_tokenizer(job.docs, job.run)
            data = text_data(job.docs, tokenizer, job.run)
        # Only now, with every argument and the corpus accepted, is the folder touched.
        for entry in job.stale:
            remove_entry(entry)
        job.out.mkdir(parents=True, exist_ok=True)
        return train(job.out, tokenizer, data, job.run, job.record, report)
