"""The text task's tokenizer: a byte-level BPE trained on the training documents.

Deterministic and offline, ``vocab_size`` entries. A small vocabulary keeps the embedding
and the softmax, which dominate a tiny model's cost, cheap, and gives more token positions
per byte of text. Two special tokens: ``<|bos|>`` (id 0), put before every window and every
encoded text, and ``<|endoftext|>`` (id 1), which ends each document in the token stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from attncoda._errors import AttncodaError
from attncoda.data.tasks import BOS_TOKEN, EOS_TOKEN

if TYPE_CHECKING:
    from attncoda.data.corpus import Document
    from attncoda.training.config import ResolvedTrainConfig

__all__ = ["split_documents", "token_stream", "train_tokenizer"]


def train_tokenizer(docs: list[Document], config: ResolvedTrainConfig) -> Any:
    """The BPE tokenizer of ``config``, trained on the training documents only.

    Returns a ``transformers.PreTrainedTokenizerFast`` whose template puts ``<|bos|>``
    before every text; ``<|endoftext|>`` is also its pad token.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    train_docs, _ = split_documents(docs, config.val_fraction)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
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
        model_max_length=config.window,
    )


def split_documents(
    docs: list[Document], val_fraction: float
) -> tuple[list[Document], list[Document]]:
    """``(training, held-out)``: the last ``round(val_fraction * n)`` documents held out
    (at least 1, and at least 1 left to train on)."""
    if len(docs) < 2:
        raise AttncodaError(
            f"the corpus holds {len(docs)} document{'' if len(docs) == 1 else 's'}; training "
            "needs at least 2 (one is held out for validation)"
        )
    n_val = min(len(docs) - 1, max(1, round(val_fraction * len(docs))))
    return docs[: len(docs) - n_val], docs[len(docs) - n_val :]


def token_stream(texts: list[str], tokenizer: Any) -> torch.Tensor:
    """int64 ``(n_tokens,)``: the texts' tokens joined, each text followed by
    ``<|endoftext|>`` (no ``<|bos|>``)."""
    # The backend tokenizer: no "longer than model_max_length" warning for whole documents.
    encodings = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    eos = tokenizer.eos_token_id
    return torch.tensor([t for enc in encodings for t in (*enc.ids, eos)], dtype=torch.long)
