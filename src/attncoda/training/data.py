"""What the model trains and is evaluated on: token windows, ``<|bos|>`` first.

Text task: the last ``val_fraction`` of the documents are held out. The training documents
are concatenated into one stream (each followed by ``<|endoftext|>``); a training window is
``<|bos|>`` followed by ``window - 1`` consecutive stream tokens from a random start (drawn
by the loop). A fixed first token at every window start is what lets a first-token attention
sink form (Gu et al. 2024). The loss at every checkpoint is measured on fixed, evenly spaced
training windows and on the held-out windows.

Bigram-Backcopy: fresh sequences every step (:meth:`BigramBackcopy.sample`); the evaluation
windows are the task's fixed held-out sequences.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from attncoda._errors import AttncodaError
from attncoda.data.corpus import Document, load_corpus
from attncoda.training.tokenizer import split_documents, token_stream

if TYPE_CHECKING:
    from attncoda.data.tasks import BigramBackcopy
    from attncoda.training.config import ResolvedTrainConfig

__all__ = [
    "N_ATTENTION_WINDOWS",
    "TrainData",
    "corpus_info",
    "documents",
    "task_data",
    "text_data",
    "with_bos",
]

_N_TRAIN_EVAL_WINDOWS = 32
_MAX_VAL_WINDOWS = 64
#: Held-out windows the first-token attention of a checkpoint is measured on.
N_ATTENTION_WINDOWS = 8


@dataclass(frozen=True)
class TrainData:
    """The windows of one run.

    Attributes
    ----------
    train_stream : torch.Tensor
        int64 ``(n_tokens,)``: the training documents joined by ``<|endoftext|>`` (empty for
        the Bigram-Backcopy task).
    train_eval, val : torch.Tensor
        int64 ``(batch, window)``: fixed training windows and held-out windows, ``<|bos|>``
        first.
    n_train_docs, n_val_docs : int
    task : BigramBackcopy or None
        The synthetic task that draws the training batches, None for text.
    """

    train_stream: torch.Tensor
    train_eval: torch.Tensor
    val: torch.Tensor
    n_train_docs: int
    n_val_docs: int
    task: BigramBackcopy | None = None


def documents(corpus: str | os.PathLike[str] | Sequence[Document] | None) -> list[Document]:
    """The documents of a :attr:`TrainConfig.corpus`: loaded from a spec or path, or checked."""
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


def text_data(docs: list[Document], tokenizer: Any, config: ResolvedTrainConfig) -> TrainData:
    """The text task's windows of ``config``, in ``tokenizer``'s ids."""
    train_docs, val_docs = split_documents(docs, config.val_fraction)
    window = config.window
    train = token_stream([d.text for d in train_docs], tokenizer)
    val = token_stream([d.text for d in val_docs], tokenizer)
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
    bos = tokenizer.bos_token_id
    train_eval = with_bos(torch.stack([train[s : s + body] for s in starts]), bos)
    n_val = min(_MAX_VAL_WINDOWS, len(val) // body)
    val_windows = with_bos(val[: n_val * body].reshape(n_val, body), bos)
    return TrainData(train, train_eval, val_windows, len(train_docs), len(val_docs))


def task_data(task: BigramBackcopy) -> TrainData:
    """The Bigram-Backcopy task's evaluation windows (its held-out sequences)."""
    held_out = torch.from_numpy(task.evaluation_sequences(_N_TRAIN_EVAL_WINDOWS + _MAX_VAL_WINDOWS))
    return TrainData(
        train_stream=torch.zeros(0, dtype=torch.long),
        train_eval=held_out[:_N_TRAIN_EVAL_WINDOWS],
        val=held_out[_N_TRAIN_EVAL_WINDOWS:],
        n_train_docs=0,
        n_val_docs=0,
        task=task,
    )


def with_bos(body: torch.Tensor, bos_id: int) -> torch.Tensor:
    """int64 ``(batch, 1 + n)``: ``<|bos|>`` put before every row of ``body`` ``(batch, n)``."""
    bos = torch.full((body.shape[0], 1), bos_id, dtype=torch.long)
    return torch.cat([bos, body], dim=1)


def corpus_info(data: TrainData) -> dict[str, int]:
    """What a text checkpoint records about its data: documents, tokens and windows."""
    return {
        "n_train_documents": data.n_train_docs,
        "n_val_documents": data.n_val_docs,
        "n_train_tokens": int(data.train_stream.numel()),
        "n_val_windows": int(data.val.shape[0]),
    }
