"""The windows of the corpus a run reads, and the corpus facts its manifest records."""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

__all__ = ["TASK_CORPUS", "corpus_windows", "task_sha256"]

#: The corpus name of a Bigram-Backcopy checkpoint's task sequences, in facts and protocols.
TASK_CORPUS = "bigram-backcopy"


def task_sha256(task: Any) -> str:
    """The sha256 of a Bigram-Backcopy task's definition (its ``to_dict()`` as canonical
    JSON: sorted keys, no spaces), 64 hex digits: what its sequences are read from."""
    text = json.dumps(task.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def corpus_windows(tokenizer: Any, *, text: str | None, max_tokens: int, docs: int) -> tuple:
    """Windows of the corpus (at most ``docs``), and the corpus facts a manifest records.

    When ``max_tokens`` is longer than every document, the documents are joined (in order,
    separated by blank lines) before cutting, so long-context runs get full windows. A
    tokenizer saved with a Bigram-Backcopy checkpoint gets the task's held-out sequences
    instead (``text`` is ignored): the corpus facts then name the task (``spec``
    :data:`TASK_CORPUS`, ``sha256`` :func:`task_sha256`) and record the sequences' length as
    read (``max_tokens``: 64 for the default task, whatever longer length was asked).
    """
    from attncoda.data import corpus
    from attncoda.data.tasks import task_windows
    from attncoda.training.train import checkpoint_task

    # A Bigram-Backcopy checkpoint reads its task's held-out sequences: text means nothing to it.
    task = checkpoint_task(getattr(tokenizer, "name_or_path", None))
    if task is not None:
        found = task_windows(task, docs, max_tokens)
        facts = {
            "spec": TASK_CORPUS,
            "source": "bigram-backcopy",
            "sha256": task_sha256(task),
            **task.to_dict(),
            "windows": docs,
        }
        return found, {**facts, "max_tokens": len(found[0].input_ids), "joined": False}
    documents = corpus.load_corpus(text)
    source = corpus.corpus_source(text)
    joined = False
    lengths = tokenizer([d.text for d in documents], add_special_tokens=False, verbose=False)
    if max_tokens > max(len(ids) for ids in lengths["input_ids"]):
        whole = "\n\n".join(d.text for d in documents)
        documents = [corpus.Document(id="joined", text=whole, title="all documents")]
        joined = True
    found = corpus.windows(documents, tokenizer, max_tokens, n_windows=docs)
    if len(found) < docs:
        # docs is an upper bound: a short text is used whole, and the run says so.
        print(
            f"note: the corpus gives {len(found)} window{'s' if len(found) != 1 else ''} of "
            f"up to {max_tokens} tokens (docs={docs} asked for): using all of them",
            file=sys.stderr,
        )
    facts = {**source, "windows": len(found), "max_tokens": max_tokens, "joined": joined}
    return found, facts
