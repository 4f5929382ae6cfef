"""Text corpora: the embedded English corpus, user files, and token windows.

A corpus is a list of :class:`Document`. It comes from the corpus embedded in the package
(``"embedded"``, original English prose), from a ``.txt`` or ``.jsonl`` file, or from a
folder of such files. :func:`windows` cuts the documents into token windows a model can
read, deterministically, and :func:`batch` pads windows into a rectangular batch.

This module never imports ``torch`` or ``transformers``: the tokenizer is handed in by the
caller and the batch is made of plain Python lists.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError

__all__ = [
    "ACCEPTED_SUFFIXES",
    "EMBEDDED_SPEC",
    "Document",
    "Window",
    "batch",
    "corpus_hash",
    "corpus_source",
    "embedded",
    "embedded_metadata",
    "load_corpus",
    "read_corpus",
    "windows",
]

#: The corpus spec that names the embedded corpus.
EMBEDDED_SPEC = "embedded"
#: File extensions :func:`read_corpus` reads.
ACCEPTED_SUFFIXES = (".txt", ".jsonl")

_DATA_PACKAGE = "attncoda.data"
_EMBEDDED_FILE = "corpus_en.jsonl"
_EMBEDDED_META = "corpus_en.meta.json"
# A blank line: a line holding nothing but whitespace.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\f\v]*\n\s*")
# Text tokenized to find where a tokenizer puts its special tokens.
_PROBE_TEXT = "The river ran under the old bridge."


@dataclass(frozen=True)
class Document:
    """One document of a corpus.

    Attributes
    ----------
    id : str
        Identifier, unique within the corpus.
    text : str
        The document text.
    title : str
        A human-readable title; ``""`` when the source has none.
    """

    id: str
    text: str
    title: str = ""


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


# --------------------------------------------------------------------------------------------
# Reading


def embedded() -> list[Document]:
    """Return the corpus embedded in the package.

    Original English prose written for attncoda (essays, encyclopedia-style articles, short
    stories and letters on everyday and general-knowledge topics), released with the package
    under its licence. ``data/assets/CORPUS.md`` and ``corpus_en.meta.json`` record its
    size and sha256.

    Returns
    -------
    list of Document
        The documents, in their fixed order.

    Examples
    --------
    >>> docs = embedded()
    >>> len(docs) >= 40
    True
    """
    return list(_embedded_documents())


@lru_cache(maxsize=1)
def _embedded_documents() -> tuple[Document, ...]:
    text = _embedded_data().joinpath(_EMBEDDED_FILE).read_text(encoding="utf-8")
    return tuple(_parse_jsonl(text, f"{_EMBEDDED_FILE} (embedded)", "embedded"))


def _embedded_data() -> Any:
    return resources.files(_DATA_PACKAGE).joinpath("assets")


def embedded_metadata() -> dict[str, Any]:
    """Return what ``corpus_en.meta.json`` records about the embedded corpus.

    Returns
    -------
    dict
        ``source``, ``licence``, ``n_documents``, ``n_words``, ``n_bytes``, ``sha256`` (of
        the ``.jsonl`` file's bytes) and ``corpus_hash`` (:func:`corpus_hash` of
        :func:`embedded`).
    """
    meta: dict[str, Any] = json.loads(
        _embedded_data().joinpath(_EMBEDDED_META).read_text(encoding="utf-8")
    )
    return meta


def read_corpus(path: str | os.PathLike[str]) -> list[Document]:
    """Read a corpus from a ``.txt`` file, a ``.jsonl`` file, or a folder of them.

    - ``.txt``: one document per paragraph; paragraphs are separated by one or more blank
      lines. Each paragraph is kept as written, less its leading and trailing whitespace.
      Ids are ``name:0``, ``name:1``, ... with ``name`` the file name without extension.
    - ``.jsonl``: one JSON object per line with a non-empty string ``text``; ``id`` and
      ``title`` (strings) are optional, the id defaulting to ``name:k`` for the ``k``-th
      document of the file. Blank lines are skipped.
    - a folder: every ``.txt`` and ``.jsonl`` file directly inside it, in sorted name order.

    Parameters
    ----------
    path : str or path-like
        The file or folder.

    Returns
    -------
    list of Document
        The documents in file order.

    Raises
    ------
    AttncodaError
        If the path does not exist, has another extension, is not UTF-8, holds no document,
        holds a line that is not a JSON object with a ``text``, or repeats a document id.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and _suffix(f) in ACCEPTED_SUFFIXES)
        if not files:
            raise AttncodaError(
                f"corpus folder '{p}' holds no {' or '.join(ACCEPTED_SUFFIXES)} file: add one, "
                f"or give a file"
            )
        docs = [doc for f in files for doc in _read_file(f)]
    elif p.is_file():
        docs = _read_file(p)
    else:
        raise AttncodaError(
            f"corpus path '{p}' does not exist: give a .txt or .jsonl file, or a folder of them"
        )
    _check_unique_ids(docs, f"corpus '{p}'")
    return docs


def load_corpus(spec: str | os.PathLike[str] | None) -> list[Document]:
    """Load the corpus a spec names.

    Parameters
    ----------
    spec : str, path-like or None
        ``None`` or ``"embedded"`` for :func:`embedded`; otherwise a path for
        :func:`read_corpus`.

    Returns
    -------
    list of Document
    """
    if spec is None or spec == EMBEDDED_SPEC:
        return embedded()
    return read_corpus(spec)


def corpus_hash(docs: Sequence[Document]) -> str:
    """Return a sha256 hex digest of the documents' ids and texts.

    The digest depends on the order of the documents and on every character of their ids
    and texts, not on their titles. Each field is length-prefixed, so no two different
    corpora share an encoding.

    Parameters
    ----------
    docs : sequence of Document

    Returns
    -------
    str
        64 hexadecimal characters.

    Examples
    --------
    >>> corpus_hash([Document("a", "x")]) == corpus_hash([Document("a", "x", title="t")])
    True
    >>> corpus_hash([Document("a", "x")]) == corpus_hash([Document("ax", "")])
    False
    """
    h = hashlib.sha256()
    for doc in docs:
        for field in (doc.id, doc.text):
            data = field.encode("utf-8")
            h.update(f"{len(data)}:".encode("ascii"))
            h.update(data)
    return h.hexdigest()


def corpus_source(spec: str | os.PathLike[str] | None) -> dict[str, Any]:
    """Return what a run manifest records about a corpus.

    Parameters
    ----------
    spec : str, path-like or None
        As for :func:`load_corpus`.

    Returns
    -------
    dict
        ``spec`` (``"embedded"`` for ``None``), ``source`` (the embedded corpus's recorded
        source, or the path as given), ``n_documents``, and ``sha256`` (:func:`corpus_hash`).
    """
    docs = load_corpus(spec)
    if spec is None or spec == EMBEDDED_SPEC:
        spec_text = EMBEDDED_SPEC
        source = str(embedded_metadata()["source"])
    else:
        spec_text = os.fspath(spec)
        source = f"file {spec_text}"
    return {
        "spec": spec_text,
        "source": source,
        "n_documents": len(docs),
        "sha256": corpus_hash(docs),
    }


def _suffix(p: Path) -> str:
    return p.suffix.lower()


def _read_file(p: Path) -> list[Document]:
    suffix = _suffix(p)
    if suffix not in ACCEPTED_SUFFIXES:
        shown = f"'{suffix}'" if suffix else "no extension"
        raise AttncodaError(
            f"corpus file '{p}' has {shown}; accepted: {', '.join(ACCEPTED_SUFFIXES)}"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AttncodaError(
            f"corpus file '{p}' is not UTF-8 text ({err.reason}): give a text file"
        ) from None
    if suffix == ".txt":
        docs = _parse_txt(text, p.stem)
    else:
        docs = _parse_jsonl(text, str(p), p.stem)
    if not docs:
        raise AttncodaError(f"corpus file '{p}' holds no document: give a file with some text")
    return docs


def _parse_txt(text: str, stem: str) -> list[Document]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    paragraphs = [para.strip() for para in _PARAGRAPH_BREAK.split(text)]
    return [Document(f"{stem}:{k}", para) for k, para in enumerate(p for p in paragraphs if p)]


def _parse_jsonl(text: str, name: str, stem: str) -> list[Document]:
    docs: list[Document] = []
    seen: set[str] = set()
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"corpus file '{name}' line {line_no}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise AttncodaError(f"{where} is not valid JSON: {err.msg}") from None
        if not isinstance(record, dict):
            raise AttncodaError(f"{where} is not a JSON object")
        body = record.get("text")
        if not isinstance(body, str) or not body.strip():
            raise AttncodaError(f"{where} has no 'text' (a non-empty string)")
        doc_id = record.get("id", f"{stem}:{len(docs)}")
        title = record.get("title", "")
        if not isinstance(doc_id, str) or not doc_id:
            raise AttncodaError(f"{where} has an 'id' that is not a non-empty string")
        if not isinstance(title, str):
            raise AttncodaError(f"{where} has a 'title' that is not a string")
        if doc_id in seen:
            raise AttncodaError(f"{where} repeats the document id '{doc_id}'")
        seen.add(doc_id)
        docs.append(Document(doc_id, body, title))
    return docs


def _check_unique_ids(docs: Sequence[Document], where: str) -> None:
    seen: set[str] = set()
    for doc in docs:
        if doc.id in seen:
            raise AttncodaError(f"document id '{doc.id}' occurs twice in {where}")
        seen.add(doc.id)


# --------------------------------------------------------------------------------------------
# Windows


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


# --------------------------------------------------------------------------------------------
# Batching


def batch(
    windows: Sequence[Window], pad_token_id: int, padding_side: str = "right"
) -> dict[str, list[list[int]]]:
    """Pad windows to the longest one.

    Parameters
    ----------
    windows : sequence of Window
        At least one window.
    pad_token_id : int
        Id written into padding positions (for a tokenizer without a pad token, such as a
        LLaMA one, its ``eos_token_id`` does).
    padding_side : {"right", "left"}
        Where the padding goes.

    Returns
    -------
    dict
        ``input_ids`` and ``attention_mask`` (1 for a real token, 0 for padding), each a list
        of ``batch`` lists of ``key_pos`` ints.

    Examples
    --------
    >>> a, b = Window("a", 0, (5, 6, 7)), Window("b", 0, (8,))
    >>> batch([a, b], pad_token_id=0, padding_side="left")["input_ids"]
    [[5, 6, 7], [0, 0, 8]]
    """
    if padding_side not in ("right", "left"):
        raise AttncodaError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int):
        raise AttncodaError(f"pad_token_id must be an integer token id, got {pad_token_id!r}")
    if not windows:
        raise AttncodaError("batch() needs at least one window")
    width = max(w.n_tokens for w in windows)
    input_ids: list[list[int]] = []
    attention_mask: list[list[int]] = []
    for w in windows:
        n_pad = width - w.n_tokens
        ids, mask, pad = list(w.input_ids), [1] * w.n_tokens, [0] * n_pad
        if padding_side == "right":
            input_ids.append(ids + [pad_token_id] * n_pad)
            attention_mask.append(mask + pad)
        else:
            input_ids.append([pad_token_id] * n_pad + ids)
            attention_mask.append(pad + mask)
    return {"input_ids": input_ids, "attention_mask": attention_mask}
