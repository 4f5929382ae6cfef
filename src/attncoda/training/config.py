"""What a ``train-tiny`` run is: :class:`TrainConfig`, its task defaults and its checks.

A :class:`TrainConfig` holds every choice that determines the checkpoints. Its fields'
defaults are the only defaults; a field left at ``None`` takes its task's value from
:data:`TASK_DEFAULTS` when the config is :meth:`TrainConfig.resolved`. The resolved config,
with the thread count and the corpus hash, is what a series folder records
(:meth:`TrainConfig.record`): a folder holding another record is refused.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.data.tasks import BIGRAM_BACKCOPY, TASKS

if TYPE_CHECKING:
    from attncoda.data.corpus import Document
    from attncoda.data.tasks import BigramBackcopy

__all__ = [
    "FORMAT",
    "MODEL_SIZES",
    "SIZES",
    "TASK_DEFAULTS",
    "ResolvedTrainConfig",
    "TrainConfig",
    "check_steps",
    "check_threads",
]

#: name -> (layers, hidden size, attention heads); the MLP is 4x the hidden size.
SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 64, 4),
    "small": (4, 128, 4),
}
#: Accepted values of ``size``.
MODEL_SIZES = tuple(SIZES)

#: What ``None`` stands for in :class:`TrainConfig`, per task. The Bigram-Backcopy values are
#: those that grew a sink on a shared 2-core CPU in under two minutes (see
#: :func:`attncoda.training.train.train_tiny`'s notes).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "text": {"steps": 1000, "size": "small", "window": 128, "batch_size": 16, "lr": 2e-3},
    BIGRAM_BACKCOPY: {"steps": 2000, "size": "tiny", "window": 64, "batch_size": 32, "lr": 1e-2},
}

#: The version of the recorded config; a change makes older series "another configuration".
FORMAT = 1
_MIN_WINDOW = 8


@dataclass(frozen=True)
class TrainConfig:
    """One ``train-tiny`` run: the model, the data and the optimiser.

    Attributes
    ----------
    task : str
        ``"text"``: next-token prediction on the corpus. ``"bigram-backcopy"``: the
        synthetic task of :mod:`attncoda.data.tasks` (fresh sequences every step; the
        corpus fields are unused), on which a sink grows.
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
        Size of the byte-level BPE vocabulary trained on the training documents (text).
    val_fraction : float
        Share of the documents, taken from the end of the corpus, held out (text).
    corpus : str, path-like, sequence of Document or None
        The text; ``None`` for the embedded corpus, a spec or path as for
        :func:`attncoda.data.corpus.load_corpus`, or the documents themselves (text).
    triggers : int
        Trigger tokens of the task (bigram-backcopy; ``n_triggers`` of
        :class:`attncoda.data.tasks.BigramBackcopy`, recorded in its ``task_config``).
    """

    task: str = "text"
    steps: int | None = None
    seed: int = 0
    size: str | None = None
    window: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    warmup: int | None = None
    weight_decay: float = 0.1
    vocab_size: int = 1024
    val_fraction: float = 0.05
    corpus: str | os.PathLike[str] | Sequence[Document] | None = None
    triggers: int = 3

    def resolved(self) -> ResolvedTrainConfig:
        """This config with its task's defaults in place of ``None`` and the warmup set.

        Raises
        ------
        AttncodaError
            An unknown task or size, or a field out of range (the message names it).
        """
        if self.task not in TASKS:
            raise AttncodaError(
                f"unknown task {self.task!r}; accepted: {', '.join(repr(t) for t in TASKS)}"
            )
        defaults = TASK_DEFAULTS[self.task]
        filled = {
            name: defaults[name] if getattr(self, name) is None else getattr(self, name)
            for name in ("steps", "size", "window", "batch_size", "lr")
        }
        config = dataclasses.replace(self, **filled)
        check_steps(config.steps)
        config._check()
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        if config.warmup is None:
            fields["warmup"] = min(100, filled["steps"] // 10)
        return ResolvedTrainConfig(**fields)

    def _check(self) -> None:
        if self.size not in SIZES:
            raise AttncodaError(
                f"unknown model size {self.size!r}; accepted: {', '.join(repr(s) for s in SIZES)}"
            )
        for name, value, least in (
            ("window", self.window, _MIN_WINDOW),
            ("batch_size", self.batch_size, 1),
            ("vocab_size", self.vocab_size, 300),
            ("triggers", self.triggers, 1),
        ):
            _check_int(name, value, least)
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise AttncodaError(f"seed must be an integer from 0 to 2**63 - 1, got {seed!r}")
        warmup = self.warmup
        if warmup is not None and (
            isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0
        ):
            raise AttncodaError(f"warmup must be None or an integer of at least 0, got {warmup!r}")
        lr = self.lr
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise AttncodaError(f"lr must be a finite number above 0, got {lr!r}")
        decay = self.weight_decay
        if not (isinstance(decay, (int, float)) and math.isfinite(decay)) or decay < 0:
            raise AttncodaError(
                f"weight_decay must be a finite number of at least 0, got {decay!r}"
            )
        fraction = self.val_fraction
        if not (isinstance(fraction, (int, float)) and 0 < fraction < 1):
            raise AttncodaError(
                f"val_fraction must be a number strictly between 0 and 1, got {fraction!r}"
            )


@dataclass(frozen=True)
class ResolvedTrainConfig:
    """A :class:`TrainConfig` with every field set (:meth:`TrainConfig.resolved`): what the
    training loop reads. The fields are those of :class:`TrainConfig`."""

    task: str
    steps: int
    seed: int
    size: str
    window: int
    batch_size: int
    lr: float
    warmup: int
    weight_decay: float
    vocab_size: int
    val_fraction: float
    corpus: str | os.PathLike[str] | Sequence[Document] | None
    triggers: int

    def record(
        self, threads: int, *, corpus_sha256: str | None = None, task: BigramBackcopy | None = None
    ) -> dict[str, Any]:
        """The JSON config a series folder records for this config.

        ``threads`` is recorded as the caller asked for it (training itself runs on one pinned
        thread, :mod:`attncoda.training.pinned`, so it does not change the weights); the text
        task records the corpus's ``corpus_sha256``, the Bigram-Backcopy task its ``task``
        definition.
        """
        common = {
            "size": self.size,
            "steps": self.steps,
            "seed": self.seed,
            "window": self.window,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "warmup": self.warmup,
            "weight_decay": self.weight_decay,
        }
        if task is not None:
            return {
                "format": FORMAT,
                "task": BIGRAM_BACKCOPY,
                "task_config": task.to_dict(),
                **common,
                "threads": threads,
            }
        return {
            "format": FORMAT,
            **common,
            "vocab_size": self.vocab_size,
            "val_fraction": self.val_fraction,
            "threads": threads,
            "corpus_sha256": corpus_sha256,
        }


def check_steps(steps: object) -> None:
    """Refuse ``steps`` unless it is an integer of at least 1 (``bool`` is no integer here)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise AttncodaError(f"steps must be an integer of at least 1, got {steps!r}")


def check_threads(threads: object) -> None:
    """Refuse a torch thread count that is not an integer of at least 1."""
    _check_int("threads", threads, 1)


def _check_int(name: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise AttncodaError(f"{name} must be an integer of at least {least}, got {value!r}")
