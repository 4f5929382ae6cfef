"""One model's capture of the corpus windows, with the facts its manifest records."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import HeadRows
from attncoda.experiments.contract import head_rows as rows_of_capture
from attncoda.run.options import CaptureOptions
from attncoda.run.windows import corpus_windows

__all__ = ["Captured", "capture_corpus", "capture_ids", "head_rows"]


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


def capture_corpus(
    spec: str,
    *,
    text: str | None = None,
    options: CaptureOptions | None = None,
    max_tokens: int = 128,
    docs: int = 32,
    batch_size: int = 8,
    record_rows: Any = "auto",
    block_size: int = 512,
    progress: bool = False,
    loaded: tuple | None = None,
) -> Captured:
    """Load ``spec`` (unless ``loaded`` gives ``(model, tokenizer, info)``) as ``options``
    say (device or device map, dtype) and capture ``docs`` windows of the corpus with the
    registered attention function, by the options' method, kernel, sink and seed. The
    config records the dtype, the device the model ran on and the method (all three change
    the numbers), and the device map when one placed the model."""
    from attncoda.models.load import load_model
    from attncoda.models.placement import input_device

    if not isinstance(docs, int) or isinstance(docs, bool) or docs < 1:
        raise AttncodaError(f"docs must be a positive integer; got {docs!r}")
    options = options or CaptureOptions()
    sink, seed, method = options.sink, options.seed, options.method
    if loaded is None:
        model, tokenizer, info = load_model(spec, dtype=options.dtype, **options.placement())
    else:
        model, tokenizer, info = loaded
    if tokenizer is None:
        raise AttncodaError(f"model {spec!r} has no tokenizer: give a folder with one")
    found, corpus_facts = corpus_windows(tokenizer, text=text, max_tokens=max_tokens, docs=docs)
    cap = capture_ids(
        (model, tokenizer),
        [w.input_ids for w in found],
        options,
        batch_size=batch_size,
        record_rows=record_rows,
        block_size=block_size,
        progress=progress,
    )
    if cap.mode == "outputs":
        # The automatic fallback changes how rows are read (eager probabilities, a zero
        # policy): say so where the run is watched; the manifest records it too.
        print(
            f"note: {spec} ({cap.model_class}) does not route its attention through "
            f"transformers' AttentionInterface: capture reads its eager output_attentions "
            f"(zeros={cap.zeros!r})",
            file=sys.stderr,
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
        "device": input_device(model).type,
        **({"device_map": info.device_map} if getattr(info, "device_map", None) else {}),
        "method": method,
        **({"kernel": cap.kernel} if cap.kernel is not None else {}),
    }
    return Captured(spec=spec, info=info, capture=cap, config=config)


def capture_ids(
    loaded: tuple,
    windows: Sequence[Any],
    options: CaptureOptions,
    *,
    batch_size: int = 8,
    record_rows: Any = "none",
    block_size: int = 512,
    progress: bool = False,
) -> Any:
    """The capture of token windows by a loaded ``(model, tokenizer, ...)``, made as the
    run's ``options`` say: their method, kernel, sink and seed (the model was loaded with
    their dtype and device). The one place a run turns its options into a capture: the
    corpus windows of :func:`capture_corpus` and the windows the runner captures for an
    experiment (prune's profiling windows, each collapse checkpoint's series windows).

    Parameters
    ----------
    loaded : tuple
        ``(model, tokenizer, ...)``; only the first two are read (the tokenizer for token
        sink specs and the pad id; ``None`` works for other specs).
    windows : sequence of sequence of int
        Token ids of each window, unpadded (``Window`` objects are read by their
        ``input_ids``).
    options : CaptureOptions
        How to capture.
    batch_size, record_rows, block_size, progress
        As for :func:`attncoda.capture_windows`.

    Returns
    -------
    Capture

    Raises
    ------
    AttncodaError
        A window that holds a token id outside the model's vocabulary (windows cut by
        another tokenizer), and every error of :func:`attncoda.capture_windows`.
    """
    import numpy as np

    from attncoda.capture import capture_windows

    model, tokenizer = loaded[0], loaded[1]
    ids = [np.asarray(getattr(w, "input_ids", w), dtype=np.int64) for w in windows]
    config = getattr(model, "config", None)
    text_config = getattr(config, "get_text_config", lambda: config)()
    vocab = getattr(text_config, "vocab_size", None)
    top = max((int(w.max()) for w in ids if w.size), default=-1)
    if isinstance(vocab, int) and top >= vocab:
        raise AttncodaError(
            f"the model has a vocabulary of {vocab} tokens, but the windows hold token id "
            f"{top}: make the windows with this model's tokenizer"
        )
    return capture_windows(
        model,
        ids,
        batch_size=batch_size,
        sink=options.sink,
        tokenizer=tokenizer,
        record_rows=record_rows,
        seed=options.seed,
        block_size=block_size,
        progress=progress,
        method=options.method,
        kernel=options.kernel,
    )


def head_rows(captured: Captured) -> HeadRows:
    """The recorded rows of every head of a captured model (see
    :func:`attncoda.experiments.contract.head_rows`), labelled with its spec."""
    return rows_of_capture(captured.capture, captured.spec)
