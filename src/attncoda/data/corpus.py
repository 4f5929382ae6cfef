"""Text corpora: the embedded English corpus and user files.

A corpus is a list of :class:`Document`. It comes from the corpus embedded in the package
(``"embedded"``, original English prose), from a ``.txt`` or ``.jsonl`` file, or from a
folder of such files. :func:`attncoda.data.windows.windows` cuts the documents into token
windows a model can read (also served here as :func:`windows`, with :class:`Window`).

This module never imports ``torch`` or ``transformers``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.data.document import Document
from attncoda.data.windows import Window, windows

__all__ = [
    "ACCEPTED_SUFFIXES",
    "EMBEDDED_SPEC",
    "Document",
    "Window",
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
