"""What every run shares: the model, its windows of the corpus, one capture, a manifest."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.inputs import HeadRows
from attncoda.experiments.inputs import head_rows as rows_of_capture

#: Where a run puts its models, captures and head distances (``auto``: CUDA when present).
DEVICES = ("cpu", "cuda", "auto")
#: Model parameter dtypes a run may ask for (statistics accumulate in float32 or wider).
DTYPES = ("float32", "bfloat16", "float16", "float64")


def load_options(
    device: str,
    device_map: Any = None,
    max_memory: Any = None,
    offload_folder: Any = None,
) -> dict[str, Any]:
    """The placement keywords of :func:`attncoda.load_model` for a run's options: the
    resolved ``device``, or without it the device map, its memory limits (JSON keys of a run
    config read back) and offload folder."""
    if device_map is None:
        return {"device": resolve_device(device)}
    from attncoda.models.placement import max_memory_from_config

    limits = max_memory_from_config(max_memory)
    return {"device_map": device_map, "max_memory": limits, "offload_folder": offload_folder}


def resolve_device(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` for a device option of :data:`DEVICES`.

    ``"auto"`` is CUDA when torch sees a GPU, else the CPU; ``"cuda"`` without a GPU is
    refused rather than silently run elsewhere.
    """
    if device not in DEVICES:
        raise AttncodaError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise AttncodaError("device 'cuda' asked for, but torch sees no GPU: use cpu or auto")
    return "cpu"


def check_dtype(dtype: str | None) -> str | None:
    """A dtype option of :data:`DTYPES` (None: the model's default, float32)."""
    if dtype is not None and dtype not in DTYPES:
        raise AttncodaError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return dtype


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
    """Windows of the corpus (at most ``docs``), and the corpus facts a manifest records.

    When ``max_tokens`` is longer than every document, the documents are joined (in order,
    separated by blank lines) before cutting, so long-context runs get full windows. A
    tokenizer saved with a Bigram-Backcopy checkpoint gets the task's held-out sequences
    instead (``text`` is ignored): the corpus facts then name the task.
    """
    from attncoda.data import corpus
    from attncoda.data.tasks import task_windows
    from attncoda.training.train import checkpoint_task

    # A Bigram-Backcopy checkpoint reads its task's held-out sequences: text means nothing to it.
    task = checkpoint_task(getattr(tokenizer, "name_or_path", None))
    if task is not None:
        found = task_windows(task, docs, max_tokens)
        facts = {"source": "bigram-backcopy", **task.to_dict(), "windows": docs}
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
    device: str = "cpu",
    method: str = "exact",
    kernel: str = "auto",
    device_map: Any = None,
    max_memory: Any = None,
    offload_folder: Any = None,
) -> Captured:
    """Load ``spec`` (unless ``loaded`` gives ``(model, tokenizer, info)``) on ``device``
    in ``dtype`` and capture ``docs`` windows of the corpus with the registered attention
    function, by ``method`` (``"exact"`` or ``"fast"``). The config records the dtype, the
    device the model ran on and the method: all three change the numbers. ``device_map``
    (with ``max_memory`` and ``offload_folder``) places the model instead of ``device``
    (:func:`attncoda.load_model`); the config then records it too."""
    from attncoda.capture import capture_windows
    from attncoda.models.load import load_model
    from attncoda.models.placement import input_device

    if not isinstance(docs, int) or isinstance(docs, bool) or docs < 1:
        raise AttncodaError(f"docs must be a positive integer; got {docs!r}")
    check_dtype(dtype)
    if loaded is None:
        placement = load_options(device, device_map, max_memory, offload_folder)
        model, tokenizer, info = load_model(spec, dtype=dtype, **placement)
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
        kernel=kernel,
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


def identity_of(loaded: tuple) -> dict[str, Any]:
    """:func:`attncoda.training.identity.model_identity` of a loaded ``(model, tokenizer,
    info)``: its weights hash and, for a local ``train-tiny`` checkpoint, its recipe."""
    from attncoda.training.identity import model_identity

    model, _, info = loaded
    folder = info.name_or_path if getattr(info, "source", None) == "local" else None
    return model_identity(model, folder)


def head_rows(captured: Captured) -> HeadRows:
    """The recorded rows of every head of a captured model (see
    :func:`attncoda.experiments.inputs.head_rows`), labelled with its spec."""
    return rows_of_capture(captured.capture, captured.spec)


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
    config = {
        "model": name,
        "attentions": info.path,
        "kind": chosen,
        "sink": sink,
        "record_rows": record_rows,
        "seed": seed,
    }
    return Captured(spec=name, info=info, capture=cap, config=config)


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
