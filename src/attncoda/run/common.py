"""What every run shares: the model, its windows of the corpus, one capture, a manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.inputs import DocRows, HeadRows


@dataclass(frozen=True)
class Captured:
    """A model, the corpus windows it read, and the capture of those windows.

    Attributes
    ----------
    spec : str
        The model spec as given.
    info : ModelInfo
        What :func:`attncoda.load_model` learnt about the model.
    capture : Capture
        Statistics ``(doc, layer, head, query_pos)`` and recorded rows.
    config : dict
        Everything that determines the results (for the manifest).
    """

    spec: str
    info: Any
    capture: Any
    config: dict[str, Any]


def corpus_windows(tokenizer: Any, *, text: str | None, max_tokens: int, docs: int) -> tuple:
    """Windows of the corpus, and the corpus facts a manifest records.

    When ``max_tokens`` is longer than every document, the documents are joined (in order,
    separated by blank lines) before cutting, so long-context runs get full windows.
    """
    from attncoda.capture import corpus

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
        raise AttncodaError(
            f"the corpus gives only {len(found)} windows of up to {max_tokens} tokens; "
            f"asked for docs={docs}: lower docs or max_tokens, or pass a larger --text"
        )
    facts = {**source, "windows": len(found), "max_tokens": max_tokens, "joined": joined}
    return found, facts


def capture_corpus(
    spec: str,
    *,
    text: str | None = None,
    sink: str = "first",
    max_tokens: int = 128,
    docs: int = 32,
    batch_size: int = 8,
    record_rows: Any = "auto",
    seed: int = 0,
    dtype: str | None = None,
    block_size: int = 512,
    progress: bool = False,
    loaded: tuple | None = None,
) -> Captured:
    """Load ``spec`` (unless ``loaded`` gives ``(model, tokenizer, info)``) and capture
    ``docs`` windows of the corpus with the registered attention function."""
    from attncoda.capture.capture import capture_windows
    from attncoda.capture.models import load_model

    if not isinstance(docs, int) or isinstance(docs, bool) or docs < 1:
        raise AttncodaError(f"docs must be a positive integer; got {docs!r}")
    model, tokenizer, info = loaded if loaded is not None else load_model(spec, dtype=dtype)
    if tokenizer is None:
        raise AttncodaError(f"model {spec!r} has no tokenizer: give a folder with one")
    found, corpus_facts = corpus_windows(tokenizer, text=text, max_tokens=max_tokens, docs=docs)
    cap = capture_windows(
        model,
        [w.input_ids for w in found],
        batch_size=batch_size,
        sink=sink,
        tokenizer=tokenizer,
        record_rows=record_rows,
        seed=seed,
        block_size=block_size,
        progress=progress,
    )
    config = {
        "model": spec,
        "revision": getattr(info, "revision", None),
        "dtype": getattr(info, "dtype", None),
        "sink": sink,
        "corpus": corpus_facts,
        "docs": docs,
        "max_tokens": max_tokens,
        "batch_size": batch_size,
        "record_rows": record_rows,
        "seed": seed,
        "block_size": block_size,
    }
    return Captured(spec=spec, info=info, capture=cap, config=config)


def head_rows(captured: Captured) -> HeadRows:
    """The recorded rows of every head, per document, as the experiments consume them.

    Heads are flattened layer-major; each document's rows keep key 0 = its first real token
    and a key mask of the keys each recorded query sees. ``sink_mass`` is each head's mean
    over the rows that have content.
    """
    cap = captured.capture
    if not cap.rows or all(r.shape[2] == 0 for r in cap.rows):
        raise AttncodaError(
            f"the capture of {captured.spec!r} recorded no full rows: run it with "
            "record_rows='auto' (or a number of rows per document)"
        )
    n_layers, n_heads = cap.n_layers, cap.n_heads
    docs = []
    for rows, sinks in zip(cap.rows, cap.sink_positions, strict=True):
        if rows.shape[2] == 0:
            continue
        logp = rows.reshape(n_layers * n_heads, rows.shape[2], rows.shape[3])
        visible = np.isfinite(rows)
        key_mask = visible[0, 0]
        _check_same_keys(captured.spec, visible)
        docs.append(DocRows(logp=logp, key_mask=key_mask, sink=tuple(int(s) for s in sinks)))
    with_content = cap.has_content
    mass = np.where(with_content, cap.sink_mass, 0.0).sum(axis=(0, 3))
    count = with_content.sum(axis=(0, 3))
    if (count == 0).any():
        raise AttncodaError(f"some heads of {captured.spec!r} have no row with content")
    sink_mass = (mass / count).reshape(n_layers * n_heads)
    return HeadRows(
        model=captured.spec,
        n_layers=n_layers,
        n_heads=n_heads,
        docs=tuple(docs),
        sink_mass=sink_mass,
    )


def _check_same_keys(spec: str, visible: np.ndarray) -> None:
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
        f"the recorded rows of {spec!r} do not see the same keys in every head: layer "
        f"{layer} head {head} sees {int(n_keys[layer, head, row])} keys in recorded row "
        f"{row} where layer 0 head 0 sees {int(n_keys[0, 0, row])} (a sliding-window "
        "layer); flips, cluster and safety compare heads over the same keys, so use windows "
        "no longer than the model's sliding window (e.g. at most 512 tokens for gemma3)"
    )
