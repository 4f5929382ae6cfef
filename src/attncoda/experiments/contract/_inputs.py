"""What the experiments consume: recorded attention rows of every head, per document, and
what they were read from."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError


@dataclass(frozen=True)
class DocRows:
    """Recorded log-probability rows of every head for one document.

    Attributes
    ----------
    logp : ndarray, shape (head, row, key_pos)
        Log-probabilities (float32 or float64) of every head — heads flattened layer-major,
        ``layer * n_heads + head`` — at the same recorded query positions. Entries where
        ``key_mask`` is False are ignored whatever they hold.
    key_mask : ndarray of bool, shape (row, key_pos)
        Which keys each recorded row attends to (causal rows are shorter).
    sink : tuple of int
        The document's sink key positions (key 0 = the first real token).
    """

    logp: np.ndarray
    key_mask: np.ndarray
    sink: tuple[int, ...]

    def split_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(mask, is_sink, used)``: the key mask as bool ``(row, key_pos)``, the sink keys
        as bool ``(key_pos,)``, and bool ``(row,)``, the rows whose sink/content split is
        defined (every sink key visible, at least two content keys)."""
        mask = np.asarray(self.key_mask, dtype=bool)
        is_sink = np.zeros(mask.shape[1], dtype=bool)
        is_sink[list(self.sink)] = True
        used = mask[:, is_sink].all(axis=1) & (mask.sum(axis=1) - len(self.sink) >= 2)
        return mask, is_sink, used


@dataclass(frozen=True)
class HeadRows:
    """Everything a convention experiment needs from one model.

    Attributes
    ----------
    model : str
        The model spec (as given to ``load_model``), used to label tables.
    n_layers, n_heads : int
        Heads are flattened layer-major: head index ``i`` is layer ``i // n_heads``.
    docs : tuple of DocRows
        One entry per document, all with ``n_layers * n_heads`` heads.
    sink_mass : ndarray, shape (head,)
        Mean sink mass of each head over the rows that have content.
    identity : mapping or None
        What identifies the model the rows were read from, by content
        (:func:`attncoda.training.identity.model_identity`: ``weights_sha256``,
        ``weights_sketch`` and, for a ``train-tiny`` checkpoint, its ``recipe``); ``None``
        for attention handed in.
    """

    model: str
    n_layers: int
    n_heads: int
    docs: tuple[DocRows, ...]
    sink_mass: np.ndarray
    identity: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        n = self.n_layers * self.n_heads
        if not self.docs:
            raise AttncodaError(f"model {self.model!r} has no documents with recorded rows")
        for i, doc in enumerate(self.docs):
            if doc.logp.shape[0] != n:
                raise AttncodaError(
                    f"document {i} of {self.model!r} has {doc.logp.shape[0]} heads; "
                    f"expected n_layers * n_heads = {n}"
                )
        if tuple(self.sink_mass.shape) != (n,):
            raise AttncodaError(
                f"sink_mass of {self.model!r} must have shape ({n},); "
                f"got {tuple(self.sink_mass.shape)}"
            )

    @property
    def layer_of(self) -> np.ndarray:
        """Layer of each flattened head, shape (head,)."""
        return np.arange(self.n_layers * self.n_heads) // self.n_heads


@dataclass(frozen=True)
class Reading:
    """What recorded rows read: the windows of one corpus.

    Attributes
    ----------
    corpus : str
        ``"embedded"`` (the corpus shipped with attncoda), a text file's path as given, or
        ``"bigram-backcopy"`` (a checkpoint's task sequences).
    corpus_sha256 : str
        The sha256 of the corpus (:func:`attncoda.data.corpus.corpus_hash`) or of the task's
        definition (:func:`attncoda.run.captured.task_sha256`): rows match by it, not by the
        name.
    windows : int
        Windows (or task sequences) read per model.
    window_tokens : int
        Tokens per window as read (a task sequence's length when shorter than asked).
    """

    corpus: str
    corpus_sha256: str
    windows: int
    window_tokens: int

    def to_dict(self) -> dict[str, Any]:
        """The reading as a JSON object."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One phrase: ``16 windows of 128 tokens of the embedded corpus``."""
        what = "task sequences" if self.corpus == "bigram-backcopy" else "windows"
        name = (
            "the bigram-backcopy task"
            if self.corpus == "bigram-backcopy"
            else f"the {self.corpus} corpus"
        )
        return f"{self.windows} {what} of {self.window_tokens} tokens of {name}"


def head_rows(cap: Any, model: str) -> HeadRows:
    """The recorded rows of every head of a capture, per document, as the experiments
    consume them.

    Parameters
    ----------
    cap : attncoda.Capture
        From a model run or from :func:`attncoda.from_attentions`; it must have recorded rows.
    model : str
        The name that labels the tables.

    Returns
    -------
    HeadRows
        Heads flattened layer-major; each document's rows keep key 0 = its first real token
        and a key mask of the keys each recorded query sees. ``sink_mass`` is each head's
        mean over the rows that have content.
    """
    if not cap.rows or all(r.shape[2] == 0 for r in cap.rows):
        raise AttncodaError(
            f"the capture of {model!r} recorded no full rows: run it with "
            "record_rows='auto' (or a number of rows per document)"
        )
    n_layers, n_heads = cap.n_layers, cap.n_heads
    docs = []
    for rows, sinks in zip(cap.rows, cap.sink_positions, strict=True):
        if rows.shape[2] == 0:
            continue
        logp = rows.reshape(n_layers * n_heads, rows.shape[2], rows.shape[3])
        visible = np.isfinite(rows)
        _check_same_keys(model, visible)
        key_mask = visible[0, 0]
        docs.append(DocRows(logp=logp, key_mask=key_mask, sink=tuple(int(s) for s in sinks)))
    with_content = cap.has_content
    mass = np.where(with_content, cap.sink_mass, 0.0).sum(axis=(0, 3))
    count = with_content.sum(axis=(0, 3))
    if (count == 0).any():
        raise AttncodaError(f"some heads of {model!r} have no row with content")
    sink_mass = (mass / count).reshape(n_layers * n_heads)
    return HeadRows(
        model=model,
        n_layers=n_layers,
        n_heads=n_heads,
        docs=tuple(docs),
        sink_mass=sink_mass,
    )


def _check_same_keys(model: str, visible: np.ndarray) -> None:
    """Refuse rows whose heads see different keys (``visible``: layer, head, row, key).

    Head-pair distances compare two heads' rows over the same keys. A sliding-window layer
    (Gemma 3, Mistral, GPT-Neo) sees fewer keys than a full layer once the document is
    longer than its window, and its far rows do not even see the sink.
    """
    n_keys = visible.sum(axis=-1)  # (layer, head, row)
    differs = np.argwhere((visible != visible[0, 0]).any(axis=-1))
    if len(differs) == 0:
        return
    layer, head, row = (int(v) for v in differs[0])
    raise AttncodaError(
        f"the recorded rows of {model!r} do not see the same keys in every head: layer "
        f"{layer} head {head} sees {int(n_keys[layer, head, row])} keys in recorded row "
        f"{row} where layer 0 head 0 sees {int(n_keys[0, 0, row])} (a sliding-window "
        "layer); flips, cluster and safety compare heads over the same keys, so use windows "
        "no longer than the model's sliding window (e.g. at most 512 tokens for gemma3)"
    )


def captured_ids(capture: Any) -> list[np.ndarray]:
    """The token ids each document of an :class:`attncoda.Capture` read, unpadded: one
    int64 array of ``n_tokens[doc]`` ids per document."""
    return [
        np.asarray(capture.token_ids[doc, : int(n)], dtype=np.int64)
        for doc, n in enumerate(capture.n_tokens)
    ]


def check_captured(capture: Any, windows: list[np.ndarray], name: str) -> None:
    """Refuse a capture that did not read exactly ``windows`` (int64 id arrays, in order);
    the error names ``name`` (what the windows are) and the first window that differs."""
    read = captured_ids(capture)
    if len(read) != len(windows):
        raise AttncodaError(
            f"the capture read {len(read)} windows, but there are {len(windows)} {name}: "
            f"capture the {name}"
        )
    for index, (got, want) in enumerate(zip(read, windows, strict=True)):
        if not np.array_equal(got, want):
            raise AttncodaError(
                f"the capture's window {index} is not {name} window {index}: capture the "
                f"{name}, in their order"
            )
