"""Token windows: documents cut into runs of tokens a model can read, deterministically.

:func:`windows` tokenizes each document on its own and cuts its ids into consecutive,
non-overlapping chunks, each with the tokenizer's own special tokens around it. The
tokenizer is handed in by the caller: this module never imports ``torch`` or
``transformers``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError

if TYPE_CHECKING:
    from attncoda.data.document import Document

__all__ = ["Window", "windows", "windows_hash"]

# Text tokenized to find where a tokenizer puts its special tokens.
_PROBE_TEXT = "The river ran under the old bridge."


@dataclass(frozen=True)
class Window:
    """A run of consecutive tokens of one document, ready for a model.

    ``input_ids`` is ``prefix + content + suffix``: the tokenizer's special tokens around a
    chunk of the document's own tokens (for BERT ``[CLS] ... [SEP]``; for SmolLM2 nothing).

    Attributes
    ----------
    doc_id : str
        :attr:`Document.id` of the document the window comes from.
    index : int
        Position of the window within its document: 0 for the first chunk, 1 for the next.
    input_ids : tuple of int
        Token ids, special tokens included; shape ``(key_pos,)``.
    start, end : int or None
        Character span ``text[start:end]`` of the document covered by the content tokens,
        or ``None`` when the tokenizer gives no offsets (a slow tokenizer).
    n_prefix, n_suffix : int
        Number of special tokens before and after the content tokens.
    """

    doc_id: str
    index: int
    input_ids: tuple[int, ...]
    start: int | None = None
    end: int | None = None
    n_prefix: int = 0
    n_suffix: int = 0

    @property
    def n_tokens(self) -> int:
        """Length of :attr:`input_ids`, special tokens included."""
        return len(self.input_ids)

    @property
    def content_ids(self) -> tuple[int, ...]:
        """The document's own tokens: :attr:`input_ids` without the special tokens."""
        return self.input_ids[self.n_prefix : len(self.input_ids) - self.n_suffix]


def windows(
    docs: Sequence[Document],
    tokenizer: Any,
    max_tokens: int,
    *,
    n_windows: int | None = None,
    add_special_tokens: bool = True,
    min_tokens: int = 16,
) -> list[Window]:
    """Cut documents into token windows of at most ``max_tokens`` tokens.

    Each document is tokenized on its own, without special tokens (so no truncation and no
    "sequence too long" warning), and its ids are cut into consecutive, non-overlapping
    chunks of ``max_tokens - n_special`` tokens, where ``n_special`` is the number of special
    tokens the tokenizer adds to one sequence (2 for BERT's ``[CLS] ... [SEP]``, 0 for
    SmolLM2, which adds no BOS). Each chunk then gets those special tokens, the same ones
    ``tokenizer(text)`` would add, when ``add_special_tokens`` is true. A window shorter than
    ``min_tokens`` (special tokens included) is dropped; only a document's last chunk can be
    that short. No token is lost otherwise: a document's windows, less their special tokens,
    concatenate to its token sequence.

    Order: round-robin across documents. First the first window of every document (in
    document order), then the second window of every document that has one, and so on. So
    ``n_windows=k`` takes ``windows(...)[:k]``, and a small ``k`` still spreads over as many
    documents as it can, each window starting at its document's first token.

    Parameters
    ----------
    docs : sequence of Document
        The corpus.
    tokenizer : transformers tokenizer
        Called as ``tokenizer(texts, add_special_tokens=False)``; offsets are asked for when
        ``tokenizer.is_fast``.
    max_tokens : int
        Largest window length, special tokens included.
    n_windows : int or None
        Return at most this many windows (fewer when the corpus has fewer); ``None`` for all.
    add_special_tokens : bool
        Whether to put the tokenizer's special tokens around each chunk.
    min_tokens : int
        Smallest window length kept, special tokens included.

    Returns
    -------
    list of Window
        Every window has ``1 <= n_tokens <= max_tokens``.

    Raises
    ------
    AttncodaError
        If ``max_tokens``, ``min_tokens`` or ``n_windows`` is not positive, ``max_tokens <
        min_tokens``, the special tokens leave no room for text, or no window is long enough.
    """
    _check_window_args(max_tokens, min_tokens, n_windows)
    prefix, suffix = _special_tokens(tokenizer) if add_special_tokens else ((), ())
    n_special = len(prefix) + len(suffix)
    if max_tokens <= n_special:
        raise AttncodaError(
            f"max_tokens={max_tokens} leaves no room for text: the tokenizer adds {n_special} "
            "special tokens to each window"
        )
    body = max_tokens - n_special

    per_doc: list[list[Window]] = []
    n_doc_tokens = 0
    longest = 0
    for doc, ids, offsets in zip(docs, *_tokenize(tokenizer, docs), strict=True):
        n_doc_tokens += len(ids)
        longest = max(longest, len(ids))
        doc_windows = []
        for index, lo in enumerate(range(0, len(ids), body)):
            hi = min(lo + body, len(ids))
            if hi - lo + n_special < min_tokens:
                continue
            start = offsets[lo][0] if offsets is not None else None
            end = offsets[hi - 1][1] if offsets is not None else None
            doc_windows.append(
                Window(
                    doc_id=doc.id,
                    index=index,
                    input_ids=(*prefix, *ids[lo:hi], *suffix),
                    start=start,
                    end=end,
                    n_prefix=len(prefix),
                    n_suffix=len(suffix),
                )
            )
        per_doc.append(doc_windows)

    ordered = [
        doc_windows[rank]
        for rank in range(max((len(w) for w in per_doc), default=0))
        for doc_windows in per_doc
        if rank < len(doc_windows)
    ]
    if not ordered:
        raise AttncodaError(
            f"no window reaches min_tokens={min_tokens}: {len(docs)} documents, "
            f"{n_doc_tokens} tokens in all, the longest {longest} tokens plus {n_special} "
            "special tokens; lower min_tokens or give longer documents"
        )
    return ordered if n_windows is None else ordered[:n_windows]


def _check_window_args(max_tokens: int, min_tokens: int, n_windows: int | None) -> None:
    if max_tokens <= 0:
        raise AttncodaError(f"max_tokens must be a positive integer, got {max_tokens}")
    if min_tokens <= 0:
        raise AttncodaError(f"min_tokens must be a positive integer, got {min_tokens}")
    if max_tokens < min_tokens:
        raise AttncodaError(
            f"max_tokens={max_tokens} is smaller than min_tokens={min_tokens}; "
            "raise max_tokens or lower min_tokens"
        )
    if n_windows is not None and n_windows <= 0:
        raise AttncodaError(f"n_windows must be a positive integer or None, got {n_windows}")


def _special_tokens(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Return the special token ids the tokenizer puts before and after one sequence.

    Found by tokenizing a probe text with and without special tokens: transformers 5 fast
    tokenizers no longer have ``build_inputs_with_special_tokens``, and this gives the same
    ids for every single-sequence template (``[CLS] x [SEP]``, ``<s> x``, ``x </s>``, ``x``).
    """
    with_special = list(tokenizer(_PROBE_TEXT, add_special_tokens=True)["input_ids"])
    plain = list(tokenizer(_PROBE_TEXT, add_special_tokens=False)["input_ids"])
    n_special = len(with_special) - len(plain)
    for lo in range(n_special + 1):
        if with_special[lo : lo + len(plain)] == plain:
            return tuple(with_special[:lo]), tuple(with_special[lo + len(plain) :])
    raise AttncodaError(
        f"{type(tokenizer).__name__} adds special tokens inside the text, not only around it; "
        "pass add_special_tokens=False"
    )


def _tokenize(
    tokenizer: Any, docs: Sequence[Document]
) -> tuple[list[list[int]], list[list[tuple[int, int]] | None]]:
    if not docs:
        return [], []
    is_fast = bool(getattr(tokenizer, "is_fast", False))
    # verbose=False: whole documents may exceed model_max_length; windows cut them after.
    encoded = tokenizer(
        [doc.text for doc in docs],
        add_special_tokens=False,
        return_offsets_mapping=is_fast,
        verbose=False,
    )
    ids = [list(map(int, row)) for row in encoded["input_ids"]]
    if is_fast:
        offsets: list[list[tuple[int, int]] | None] = [
            [(int(a), int(b)) for a, b in row] for row in encoded["offset_mapping"]
        ]
    else:
        offsets = [None] * len(docs)
    return ids, offsets


def windows_hash(windows: Sequence[Any]) -> str:
    """``"sha256:<hex>"`` of windows of token ids: each window's ids as little-endian int64,
    followed by ``|``. A run records it for the windows a unit read (collapse, prune).

    Parameters
    ----------
    windows : sequence of array-likes of int
        Token ids, one sequence per window.

    Examples
    --------
    >>> windows_hash([[1, 2], [3]]) == windows_hash([(1, 2), (3,)])
    True
    >>> windows_hash([[1, 2], [3]]) == windows_hash([[1], [2, 3]])
    False
    """
    import numpy as np

    digest = hashlib.sha256()
    for window in windows:
        digest.update(np.asarray(window, dtype="<i8").tobytes())
        digest.update(b"|")
    return "sha256:" + digest.hexdigest()
