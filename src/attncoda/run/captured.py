"""One model's capture of the corpus windows, with the facts its manifest records."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import HeadRows
from attncoda.experiments.contract import head_rows as rows_of_capture
from attncoda.run.options import CaptureOptions
from attncoda.run.windows import corpus_windows

__all__ = ["Captured", "capture_corpus", "head_rows"]


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
    from attncoda.capture.capture import capture_windows
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
        method=method,
        kernel=options.kernel,
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


def head_rows(captured: Captured) -> HeadRows:
    """The recorded rows of every head of a captured model (see
    :func:`attncoda.experiments.contract.head_rows`), labelled with its spec."""
    return rows_of_capture(captured.capture, captured.spec)
