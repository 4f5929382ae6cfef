"""What a unit reads and what its manifest records of it: the corpus windows of a run
(:func:`corpus_windows`), one model's capture of them (:func:`capture_corpus`,
:func:`capture_ids`), and attention handed in instead of a model, read from a file
(:func:`capture_file`) or given as a capture (:func:`handed_in`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import HeadRows, Reading
from attncoda.experiments.contract import head_rows as rows_of_capture

__all__ = [
    "TASK_CORPUS",
    "Batching",
    "Captured",
    "GivenInfo",
    "capture_corpus",
    "capture_file",
    "capture_ids",
    "corpus_windows",
    "handed_in",
    "head_rows",
    "task_sha256",
]

#: The corpus name of a Bigram-Backcopy checkpoint's task sequences, in facts and protocols.
TASK_CORPUS = "bigram-backcopy"


@dataclass(frozen=True)
class Captured:
    """A model, the corpus windows it read, and the capture of those windows; or attention
    handed in (a file, a capture) and its capture.

    Attributes
    ----------
    spec : str
        The model spec as given, the attention file's name or the capture's label.
    info : ModelInfo or GivenInfo
        What :func:`attncoda.load_model` learnt about the model, or what was handed in.
    capture : Capture
        Statistics ``(doc, layer, head, query_pos)`` and recorded rows; its sink spec,
        method, kernel, seed and forward say how it was made.
    reading : Reading or None
        The corpus windows the model read (the corpus by name and sha256, the windows and
        their length as read); ``None`` for attention handed in.
    """

    spec: str
    info: Any
    capture: Any
    reading: Reading | None = None

    def to_json(self, *, named: bool = False) -> dict[str, Any]:
        """What a unit's facts record of the capture (``read``): the windows read and their
        length as read (with ``named``, the corpus by name and sha256 too), or the documents
        of attention handed in; and the forward it followed (``Capture.forward_facts``)."""
        forward = self.capture.forward_facts()
        if self.reading is None:
            return {"documents": self.capture.n_docs, **forward}
        read = {"windows": self.reading.windows, "max_tokens": self.reading.window_tokens}
        named_as = {"corpus": self.reading.corpus, "corpus_sha256": self.reading.corpus_sha256}
        return read | forward | (named_as if named else {})


def capture_corpus(  # params: capture_windows' keywords, the corpus and a loaded model
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
    registered attention function, by the options' method, kernel, sink and seed. Its
    reading names the windows read (:func:`corpus_windows`); the capture and the model's
    facts say how they were read (method, kernel, dtype, device map)."""
    from attncoda.models.load import load_model

    if not isinstance(docs, int) or isinstance(docs, bool) or docs < 1:
        raise AttncodaError(f"docs must be a positive integer; got {docs!r}")
    options = options or CaptureOptions()
    if loaded is None:
        model, tokenizer, info = load_model(spec, dtype=options.dtype, **options.placement())
    else:
        model, tokenizer, info = loaded
    if tokenizer is None:
        raise AttncodaError(f"model {spec!r} has no tokenizer: give a folder with one")
    found, reading = corpus_windows(tokenizer, text=text, max_tokens=max_tokens, docs=docs)
    batching = Batching(batch_size, record_rows, block_size, progress)
    cap = capture_ids((model, tokenizer), [w.input_ids for w in found], options, batching)
    if cap.mode == "outputs":
        # The automatic fallback changes how rows are read (eager probabilities, a zero
        # policy): say so where the run is watched; the manifest records it too.
        print(
            f"note: {spec} ({cap.model_class}) does not route its attention through "
            f"transformers' AttentionInterface: capture reads its eager output_attentions "
            f"(zeros={cap.zeros!r})",
            file=sys.stderr,
        )
    return Captured(spec=spec, info=info, capture=cap, reading=reading)


@dataclass(frozen=True)
class Batching:
    """How :func:`capture_ids` hands windows to :func:`attncoda.capture_windows` (its
    keywords of the same names): ``batch_size`` windows a forward, queries in blocks of
    ``block_size``, the rows it records, and whether it shows progress."""

    batch_size: int = 8
    record_rows: Any = "none"
    block_size: int = 512
    progress: bool = False


def capture_ids(
    loaded: tuple, windows: Sequence[Any], options: CaptureOptions, batching: Batching = Batching()
) -> Any:
    """The capture of token ``windows`` (ids of each, unpadded; ``Window`` objects are read
    by their ``input_ids``) by a loaded ``(model, tokenizer, ...)`` (the tokenizer for
    token sink specs and the pad id; ``None`` works for other specs), made as the run's
    ``options`` say: their method, kernel, sink and seed (the model was loaded with their
    dtype and device), the windows handed over as ``batching`` says. The one place a run
    turns its options into a capture: the corpus windows of :func:`capture_corpus` and the
    windows the runner captures for an experiment (prune's profiling windows, each
    collapse checkpoint's series windows). Refuses, besides every error of
    :func:`attncoda.capture_windows`, a window that holds a token id outside the model's
    vocabulary (windows cut by another tokenizer)."""
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
    batched = dataclasses.asdict(batching)  # capture_windows' keywords of the same names
    return capture_windows(model, ids, tokenizer=tokenizer, options=options, **batched)


def head_rows(captured: Captured) -> HeadRows:
    """The recorded rows of every head of a captured model (see
    :func:`attncoda.experiments.contract.head_rows`), labelled with its spec."""
    return rows_of_capture(captured.capture, captured.spec)


def task_sha256(task: Any) -> str:
    """The sha256 of a Bigram-Backcopy task's definition (its ``to_dict()`` as canonical
    JSON: sorted keys, no spaces), 64 hex digits: what its sequences are read from."""
    text = json.dumps(task.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def corpus_windows(
    tokenizer: Any, *, text: str | None, max_tokens: int, docs: int
) -> tuple[list, Reading]:
    """Windows of the corpus (at most ``docs``), and what they read (:class:`Reading`: the
    corpus by name and sha256, the windows and their length as read).

    When ``max_tokens`` is longer than every document, the documents are joined (in order,
    separated by blank lines) before cutting, so long-context runs get full windows. A
    tokenizer saved with a Bigram-Backcopy checkpoint gets the task's held-out sequences
    instead (``text`` is ignored): the reading then names the task (:data:`TASK_CORPUS`,
    sha256 :func:`task_sha256`) and the sequences' length as read (64 tokens for the
    default task, whatever longer length was asked).
    """
    from attncoda.data import corpus
    from attncoda.data.tasks import task_windows
    from attncoda.training.train import checkpoint_task

    # A Bigram-Backcopy checkpoint reads its task's held-out sequences: text means nothing to it.
    task = checkpoint_task(getattr(tokenizer, "name_or_path", None))
    if task is not None:
        found = task_windows(task, docs, max_tokens)
        return found, Reading(TASK_CORPUS, task_sha256(task), docs, len(found[0].input_ids))
    documents = corpus.load_corpus(text)
    source = corpus.corpus_source(text)
    lengths = tokenizer([d.text for d in documents], add_special_tokens=False, verbose=False)
    if max_tokens > max(len(ids) for ids in lengths["input_ids"]):
        whole = "\n\n".join(d.text for d in documents)
        documents = [corpus.Document(id="joined", text=whole, title="all documents")]
    found = corpus.windows(documents, tokenizer, max_tokens, n_windows=docs)
    if len(found) < docs:
        # docs is an upper bound: a short text is used whole, and the run says so.
        print(
            f"note: the corpus gives {len(found)} window{'s' if len(found) != 1 else ''} of "
            f"up to {max_tokens} tokens (docs={docs} asked for): using all of them",
            file=sys.stderr,
        )
    return found, Reading(source["spec"], source["sha256"], len(found), max_tokens)


@dataclass(frozen=True)
class GivenInfo:
    """What a manifest records of attention read from a file instead of a model."""

    spec: str
    path: str
    fingerprint: str
    kind: str
    n_layers: int
    n_heads: int
    causal: bool
    source: str = "attentions file"
    architecture: str = "given attention"
    family: str = "given attention"
    capture_mode: str = "given"

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "n_kv_heads": self.n_heads, "prepends_bos": None}


def capture_file(
    path: str,
    *,
    tokens: str | None = None,
    kind: str | None = None,
    sink: str = "first",
    record_rows: Any = "auto",
    seed: int = 0,
) -> Captured:
    """The :class:`Captured` of attention saved in ``path`` (``.npz``, ``.pt`` or
    ``.safetensors``; see :func:`attncoda.capture.given.read_attentions`), with token ids
    from the file or from ``tokens`` (a file of one array)."""
    from attncoda.capture.given import from_attentions, read_attentions

    found = read_attentions(path)
    ids = found["tokens"] if tokens is None else _read_ids(tokens)
    chosen = kind or found["kind"] or "probs"
    cap = from_attentions(
        found["attn"],
        kind=chosen,
        sink=sink,
        tokens=ids,
        attention_mask=found["attention_mask"],
        record_rows=record_rows,
        seed=seed,
    )
    name = Path(path).name
    info = GivenInfo(
        spec=name,
        path=str(Path(path).resolve()),
        fingerprint="sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        kind=chosen,
        n_layers=cap.n_layers,
        n_heads=cap.n_heads,
        causal=cap.causal,
    )
    return Captured(spec=name, info=info, capture=cap)


def handed_in(cap: Any, label: str) -> Captured:
    """The :class:`Captured` of a capture handed to an experiment function, labelled
    ``label``: what the runner reads when it is lent
    (:meth:`Loaded.lend <attncoda.run.loaded.Loaded.lend>`)."""
    info = GivenInfo(
        spec=label,
        path="",
        fingerprint="",
        kind="capture",
        n_layers=cap.n_layers,
        n_heads=cap.n_heads,
        causal=cap.causal,
        source="capture",
    )
    return Captured(spec=label, info=info, capture=cap)


def _read_ids(path: str) -> Any:
    """Token ids ``(batch, pos)`` from a ``.npy``, ``.npz`` (``input_ids`` or its only
    array) or ``.pt`` file."""
    file = Path(path)
    if not file.is_file():
        raise AttncodaError(f"token file {path!r} does not exist")
    try:
        if file.suffix == ".npy":
            return np.load(file, allow_pickle=False)
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as data:
                key = "input_ids" if "input_ids" in data.files else data.files[0]
                return data[key]
        if file.suffix == ".pt":
            import torch

            return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # the readers raise many types for a damaged file
        raise AttncodaError(
            f"token file {path!r} could not be read ({type(err).__name__}: {err})"
        ) from None
    raise AttncodaError(f"token file {path!r} is not .npy, .npz or .pt: save the ids with numpy")
