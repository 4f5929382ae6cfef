r"""The Bigram-Backcopy task: synthetic sequences on which small transformers grow a sink.

Guo et al. (2024) define the task to study *active-dormant* attention heads:

- every sequence begins with ``<|bos|>``;
- the first ordinary token is drawn uniformly from the non-trigger tokens;
- each next token follows a fixed bigram transition ``P[prev]``, except that after one of a
  few **trigger** tokens the next token **copies the token before the trigger**.

A one- to three-layer transformer learns the bigram with its MLP and the back-copy with an
attention head that, at a trigger query, attends to the previous token. At every other query
that head has nothing to do; it parks its attention on ``<|bos|>``: a *dormant* head with an
attention sink, grown in a few thousand steps on a CPU (no text model trainable offline
grows one: Gu et al. 2025 saw none below about 100M training tokens).

Our definition, written from the paper's description: ``n_tokens`` ordinary tokens, the
transition rows drawn from a symmetric Dirichlet(``concentration``) by
``numpy.random.default_rng(task_seed)``, and the first ``n_triggers`` ordinary tokens as the
triggers. Token ids: ``0`` is ``<|bos|>``, ``1`` is ``<|endoftext|>`` (padding only; never in a
sequence) and ordinary token ``k`` (written ``t{k}``) has id ``k + 2``.

References
----------
Guo, Kong, Song, Kasiviswanathan, Mei, Goldblum, Wilson, Jordan (2024), "Active-Dormant
Attention Heads: Mechanistically Demystifying Extreme-Token Phenomena in LLMs",
arXiv:2410.13835. Gu et al. (2025), "When Attention Sink Emerges in Language Models: An
Empirical View", ICLR.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "BIGRAM_BACKCOPY",
    "TASKS",
    "BigramBackcopy",
    "bos_attention",
    "task_tokenizer",
    "task_windows",
]

#: The token put first in every window and every encoded text.
BOS_TOKEN = "<|bos|>"
#: The token that ends each document in the training stream.
EOS_TOKEN = "<|endoftext|>"

#: Name of the Bigram-Backcopy task (``train-tiny --task``).
BIGRAM_BACKCOPY = "bigram-backcopy"
#: Accepted values of ``TrainConfig(task=...)``: the embedded corpus, or the synthetic task.
TASKS = ("text", BIGRAM_BACKCOPY)

_FIRST_ID = 2  # ids 0 and 1 are <|bos|> and <|endoftext|>
# Held-out sequences come from their own stream, apart from every training seed's.
_EVAL_STREAM = 7919


@dataclass(frozen=True, eq=False)
class BigramBackcopy:
    """One Bigram-Backcopy task: its transition, its triggers and its sequence length.

    Attributes
    ----------
    n_tokens : int
        Ordinary tokens; the vocabulary has ``n_tokens + 2`` ids (``<|bos|>``, ``<|endoftext|>``).
    n_triggers : int
        Trigger tokens: ordinary tokens ``0 .. n_triggers - 1`` (ids ``2 .. n_triggers + 1``).
    seq_len : int
        Tokens per sequence, ``<|bos|>`` included.
    concentration : float
        Dirichlet concentration of each transition row (smaller: a more predictable bigram).
    task_seed : int
        Seeds the transition.
    transition : ndarray, shape (n_tokens, n_tokens)
        ``transition[a, b] = P(next = b | current = a)`` over ordinary tokens; rows sum to 1.
    """

    n_tokens: int = 64
    n_triggers: int = 3
    seq_len: int = 64
    concentration: float = 0.1
    task_seed: int = 0
    transition: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name, value, least in (
            ("n_tokens", self.n_tokens, 4),
            ("n_triggers", self.n_triggers, 1),
            ("seq_len", self.seq_len, 4),
            ("task_seed", self.task_seed, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise AttncodaError(f"{name} must be an integer of at least {least}, got {value!r}")
        if self.n_triggers >= self.n_tokens:
            raise AttncodaError(
                f"n_triggers={self.n_triggers} leaves no ordinary token of {self.n_tokens} "
                "to start a sequence; use fewer triggers"
            )
        c = self.concentration
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not (0 < c < np.inf):
            raise AttncodaError(f"concentration must be a finite number above 0, got {c!r}")
        rng = np.random.default_rng(self.task_seed)
        matrix = rng.dirichlet(np.full(self.n_tokens, float(c)), size=self.n_tokens)
        object.__setattr__(self, "transition", matrix)

    @property
    def vocab_size(self) -> int:
        """Ids in the vocabulary: the ordinary tokens, ``<|bos|>`` and ``<|endoftext|>``."""
        return self.n_tokens + _FIRST_ID

    @property
    def trigger_ids(self) -> tuple[int, ...]:
        """Token ids of the triggers."""
        return tuple(range(_FIRST_ID, _FIRST_ID + self.n_triggers))

    def to_dict(self) -> dict[str, Any]:
        """The task's defining numbers (JSON-ready); ``BigramBackcopy(**d)`` remakes it."""
        return {
            "n_tokens": int(self.n_tokens),
            "n_triggers": int(self.n_triggers),
            "seq_len": int(self.seq_len),
            "concentration": float(self.concentration),
            "task_seed": int(self.task_seed),
        }

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``n`` sequences.

        Parameters
        ----------
        n : int
            Sequences.
        rng : numpy.random.Generator
            The randomness (the same generator state gives the same sequences).

        Returns
        -------
        ndarray of int64, shape (batch, seq_len)
            Token ids, ``<|bos|>`` (0) first.
        """
        cdf = np.cumsum(self.transition, axis=1)
        cdf[:, -1] = 1.0  # the last bin takes any rounding of the cumulative sum
        ids = np.zeros((n, self.seq_len), dtype=np.int64)
        tok = rng.integers(self.n_triggers, self.n_tokens, size=n)  # ordinary-token index
        ids[:, 1] = tok + _FIRST_ID
        before = np.full(n, -1, dtype=np.int64)
        for i in range(2, self.seq_len):
            u = rng.random(n)
            drawn = (cdf[tok] <= u[:, None]).sum(axis=1)
            copy = tok < self.n_triggers
            nxt = np.where(copy, before, np.minimum(drawn, self.n_tokens - 1))
            before, tok = tok, nxt
            ids[:, i] = tok + _FIRST_ID
        return ids

    def evaluation_sequences(self, n: int) -> np.ndarray:
        """``n`` fixed held-out sequences (one set for every training seed), ``(n, seq_len)``."""
        return self.sample(n, np.random.default_rng([self.task_seed, _EVAL_STREAM]))

    def trigger_queries(self, ids: np.ndarray) -> np.ndarray:
        """Which queries sit on a trigger (their next token is a back-copy).

        Parameters
        ----------
        ids : ndarray of int, shape (batch, query_pos)
            Sequences from :meth:`sample`.

        Returns
        -------
        ndarray of bool, same shape
            True at a trigger token; False at ``<|bos|>`` and every other token.
        """
        ids = np.asarray(ids)
        return (ids >= _FIRST_ID) & (ids < _FIRST_ID + self.n_triggers)


def task_tokenizer(task: BigramBackcopy, max_length: int) -> Any:
    """A word-level tokenizer for the task's tokens, saved with every checkpoint.

    ``"t5 t0 t5"`` encodes to ``[0, 7, 2, 7]`` (``<|bos|>`` first), so a checkpoint folder
    loads offline with ``AutoTokenizer`` like any other.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {BOS_TOKEN: 0, EOS_TOKEN: 1}
    vocab.update({f"t{k}": k + _FIRST_ID for k in range(task.n_tokens)})
    word = Tokenizer(models.WordLevel(vocab=vocab, unk_token=EOS_TOKEN))
    word.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", special_tokens=[(BOS_TOKEN, 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=word,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        unk_token=EOS_TOKEN,
        model_max_length=max_length,
    )


def bos_attention(
    attentions: Any, trigger: np.ndarray
) -> tuple[list[list[float]], list[list[float]]]:
    """Each head's mean attention on ``<|bos|>`` (key 0) at trigger and at non-trigger queries.

    Parameters
    ----------
    attentions : sequence of tensor or ndarray
        Per layer, ``(batch, head, query_pos, key_pos)`` attention probabilities.
    trigger : ndarray of bool, shape (batch, query_pos)
        :meth:`BigramBackcopy.trigger_queries` of the sequences.

    Returns
    -------
    trigger_mean, non_trigger_mean : list of list of float
        ``[layer][head]`` means over the trigger queries and over the other queries
        ``1 .. seq_len - 1`` (query 0 can only attend to key 0: left out). An active head
        attends away from ``<|bos|>`` at triggers; a dormant head puts most of its mass on
        ``<|bos|>`` at the other queries.
    """
    mask = np.asarray(trigger, dtype=bool)[:, 1:]
    if not mask.any() or mask.all():
        raise AttncodaError(
            "the sequences need both trigger and non-trigger queries; draw more of them"
        )
    out_t: list[list[float]] = []
    out_n: list[list[float]] = []
    for layer in attentions:
        probs = layer.detach().cpu().numpy() if hasattr(layer, "detach") else np.asarray(layer)
        bos = probs[:, :, 1:, 0].astype(np.float64).transpose(1, 0, 2)  # head, batch, query
        out_t.append([float(h[mask].mean()) for h in bos])
        out_n.append([float(h[~mask].mean()) for h in bos])
    return out_t, out_n


def task_windows(task: BigramBackcopy, n: int, max_tokens: int | None = None) -> list[Any]:
    """``n`` held-out sequences as corpus windows (``<|bos|>`` the one prefix token).

    Parameters
    ----------
    task : BigramBackcopy
    n : int
        Windows; :meth:`BigramBackcopy.evaluation_sequences` gives them, the same for
        every checkpoint and seed of a series.
    max_tokens : int, optional
        Cut each to its first ``max_tokens`` tokens (at most ``seq_len``).

    Returns
    -------
    list of attncoda.data.corpus.Window
    """
    from attncoda.data.windows import Window

    length = task.seq_len if max_tokens is None else min(int(max_tokens), task.seq_len)
    ids = task.evaluation_sequences(n)[:, :length]
    return [
        Window(
            doc_id=f"{BIGRAM_BACKCOPY}-{i}",
            index=0,
            input_ids=tuple(int(t) for t in row),
            n_prefix=1,
        )
        for i, row in enumerate(ids)
    ]
