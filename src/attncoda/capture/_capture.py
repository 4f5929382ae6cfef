"""The public entry point: run a model over token windows and keep per-row statistics.

``mode="attention"`` routes every layer through the registered ``"attncoda"`` attention
function (exact, bounded memory). ``mode="outputs"`` runs eager with
``output_attentions=True`` and reads the returned probabilities, for architectures that do
not use transformers' AttentionInterface (e.g. MPNet, Bloom); exact zeros then need
a policy (``zeros="raise"`` or ``"floor"``) because the statistics take logs.
``mode="auto"`` (the default) routes a model that can be routed and reads the others'
eager outputs; ``Capture.mode`` records which was used.

Here :func:`capture` checks its arguments and the model once into one
:class:`attncoda.capture._plan.CapturePlan`, then hands it off: the batch (the BOS, the
sinks, the row plan) and the result's facts are built here; the pass itself is
:func:`attncoda.capture._pass.run_pass`, and a TransformerBridge or nnsight model is run by
:func:`attncoda.capture.live.capture_live`, each taking the plan whole.

The pieces live beside this module and are served here too: :class:`Capture`,
:func:`assemble` and :func:`capture_frame` (:mod:`attncoda.capture._result`), the batch and
forward helpers (:mod:`attncoda.capture._forward`) and :func:`record_plan`
(:mod:`attncoda.capture.stats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from attncoda._errors import AttncodaError, check_choice
from attncoda.capture._forward import (
    bos_id,
    check_batch,
    first_position,
    forward_kwargs,
    pad,
    position_ids,
)
from attncoda.capture._pass import forwards_ran, kernels_ran, routes_a_call, run_pass
from attncoda.capture._plan import Batch, CapturePlan, check_block_size
from attncoda.capture._result import BatchDocuments, Capture, assemble, capture_frame, concatenate
from attncoda.capture.kernels.registry import (
    KERNELS,
    PORTABLE,
    check_dtype,
    resolve_kernel,
    takes_dtype,
)
from attncoda.capture.live import capture_live, kind_of, live_model
from attncoda.capture.names import METHODS, MODES, ZEROS
from attncoda.capture.routing import routable, unroutable_message
from attncoda.capture.sinks import auto_sinks, parse_sink, resolve_sinks
from attncoda.capture.stats import record_plan
from attncoda.models.placement import input_device

if TYPE_CHECKING:
    from attncoda.capture.options import CaptureOptions

__all__ = [
    "METHODS",
    "MODES",
    "Capture",
    "assemble",
    "capture",
    "capture_frame",
    "capture_windows",
    "check_batch",
    "first_position",
    "forward_kwargs",
    "position_ids",
    "record_plan",
]


def capture(  # params: the public entry point, each keyword one a caller sets # long: their docs
    model, input_ids, attention_mask=None, *, sink="first", tokenizer=None,
    block_size: int = 512, record_rows="auto", seed: int = 0, mode: str = "auto",
    zeros: str = "raise", prepend_bos: bool = False, method: str = "auto",
    kernel: str = "auto", keep_outputs: bool = False, options: CaptureOptions | None = None,
    _first_doc: int = 0,
) -> Capture:  # fmt: skip
    """Run ``model`` over a padded batch and capture per-row attention statistics.

    Parameters
    ----------
    model : transformers.PreTrainedModel, TransformerBridge or nnsight LanguageModel
        In eval mode. A wrapper is run as its users run it (the bridge's ``forward``, an
        nnsight ``trace``) inside :func:`attncoda.capture.live.recording`: right-padded
        batches, ``mode`` ``"auto"`` or ``"attention"``, no ``keep_outputs``.
    input_ids : array-like
        int ``(batch, pos)``.
    attention_mask : array-like, optional
        ``(batch, pos)`` of 0/1; each row's real tokens must be contiguous (left or right
        padding). All ones when omitted.
    sink : str, int or sequence of int
        ``"first"``, ``"auto"``, positions (``"0,1"``), a token (``"[CLS]"``,
        ``"id:101"``), ``"learned"``, or a token spec with ``",learned"``; see
        :mod:`attncoda.capture.sinks`.
    tokenizer : optional
        For token sinks and the BOS id.
    block_size : int
        Queries per block in ``mode="attention"``: a layer holds at most ``batch x head x
        block_size x pos`` scores, and one with ``pos <= block_size`` is bit-identical to eager.
    record_rows : {"auto", "all", "none"} or int
        Which query rows to keep in full: ``"auto"`` every row of a document of at most 128
        tokens, else a seeded sample of 128; an int ``k`` the same with ``k``.
    seed : int
        Seeds the row sample (per document: ``(seed, document index)``).
    mode : {"auto", "attention", "outputs"}
        Routed attention function, eager ``output_attentions`` probabilities, or (``"auto"``)
        the first for models that route their attention through transformers'
        AttentionInterface and the second for the others.
    zeros : {"raise", "floor"}
        ``mode="outputs"`` only: what to do with a visible key of probability exactly 0.
    prepend_bos : bool
        Prepend the BOS id (tokenizer's, else the model config's) to every document.
    method : {"auto", "exact", "fast"}
        ``"exact"`` (the reference: eager's forward) computes every row; ``"fast"`` takes
        the statistics from a fused kernel's log-sum-exp (:mod:`attncoda.capture.kernels`),
        within float32 rounding of the exact path, and only the recorded rows in full.
        ``"auto"`` (the default) is ``"fast"`` wherever a kernel serves the model's device
        and dtype and its attention is routed, else ``"exact"``; ``Capture.method`` says
        which ran and ``Capture.forward`` which forward the later layers read
        (docs/design.md, "Which forward a capture follows"). The ``auto`` sink pass and
        ablations use the exact path.
    kernel : str
        ``method="fast"`` only: ``"auto"`` (the first kernel that runs where a layer runs,
        :func:`attncoda.capture.kernels.resolve_kernel`) or a kernel's name
        (:data:`attncoda.capture.kernels.registry.KERNELS`; :mod:`attncoda.capture.kernels`
        says what each does). ``Capture.kernel`` records what ran, per layer where the
        layers differ (:func:`attncoda.capture._pass.kernels_ran`).
    keep_outputs : bool
        Keep the logits (or last hidden state) in ``Capture.outputs``, and for causal
        language models the next-token log-likelihoods in ``Capture.token_logprob``.
    options : CaptureOptions, optional
        How a run captures (:class:`attncoda.capture.options.CaptureOptions`), handed down
        whole: its ``sink``, ``seed``, ``method`` and ``kernel`` are used, and those
        keywords must be left at their defaults.

    Returns
    -------
    Capture

    Raises
    ------
    AttncodaError
        Bad arguments, a model whose attention cannot be routed (``mode="attention"``), a
        zero probability under ``zeros="raise"``, sink specs that do not fit a document.
    """
    asked = CapturePlan(
        sink, seed, method, block_size, record_rows, tokenizer, _first_doc, kernel=kernel,
        mode=mode, zeros=zeros, keep_outputs=keep_outputs, prepend_bos=prepend_bos,
    )  # fmt: skip
    plan = _plan(model, asked if options is None else _from_options(asked, options))
    if kind_of(model) != "hf":  # a wrapper runs its own forward, recorded
        return capture_live(model, input_ids, attention_mask, plan)
    batch, plan = _batch(model, input_ids, attention_mask, plan)
    return _captured(model, batch, plan)


def _plan(model, asked: CapturePlan) -> CapturePlan:
    """The plan of one :func:`capture` call: what it ``asked`` (its keywords as given, the
    sink a spec, the mode and kernel as asked) checked against each other and the model,
    once."""
    if asked.mode not in MODES:
        raise AttncodaError(
            f"unknown mode {asked.mode!r}: use 'auto' (route when possible), 'attention' "
            f"(routed, exact) or 'outputs' (eager output_attentions)"
        )
    check_choice("zero policy", asked.zeros, ZEROS)
    method, kernel = asked.method, cast(str, asked.kernel)  # as asked: checked below
    check_choice("method", method, METHODS)
    check_block_size(asked.block_size)
    if kernel not in KERNELS:
        resolve_kernel(kernel, "cpu")  # the unknown-kernel message
    spec = parse_sink(asked.sink)
    record_plan([1], asked.record_rows, asked.seed, 0)  # validates record_rows
    name = type(model).__name__
    device = None
    resolved = "attention" if asked.mode == "auto" else asked.mode
    if kind_of(model) != "hf":
        method = "exact" if method == "auto" else method  # a wrapper's passes: its own
        _check_wrapped(name, method, kernel, resolved, asked.keep_outputs)
    else:
        device = input_device(model)
        if method == "auto":
            method = "fast" if takes_dtype(device, getattr(model, "dtype", None)) else "exact"
        if method == "fast":
            resolve_kernel(kernel, device.type)  # a kernel asked by name where it cannot run
            check_dtype(device, getattr(model, "dtype", None))
        if model.training:
            raise AttncodaError(
                f"{name} is in training mode: capture runs in eval mode only (call model.eval())"
            )
        if asked.mode == "auto" and not routable(model):
            resolved = "outputs"
        if spec.learned and resolved == "outputs":
            raise AttncodaError(
                f"sink {spec.text!r} needs the learned sink logits, which eager outputs do "
                f"not carry: capture {name} with mode='attention'"
            )
    return replace(
        asked, sink=spec, method=method,
        kernel=kernel if method == "fast" and device is not None else None, mode=resolved,
        auto_mode=asked.mode == "auto", auto_method=asked.method == "auto", device=device,
    )  # fmt: skip


def _from_options(asked: CapturePlan, options: CaptureOptions) -> CapturePlan:
    """``asked`` with the sink, seed, method and kernel of ``options``; a keyword of the same
    name given beside them (not the declaration's default) is refused, since the two could
    disagree."""
    names = ("sink", "seed", "method", "kernel")
    declared = {f.name: f.default for f in fields(options) if f.name in names}
    given = [f"{n}={getattr(asked, n)!r}" for n in names if getattr(asked, n) != declared[n]]
    if given:
        raise AttncodaError(
            f"options= already says the sink, seed, method and kernel: drop {', '.join(given)} "
            "or set it in the options"
        )
    return replace(asked, **{name: getattr(options, name) for name in names})


def _check_wrapped(name: str, method: str, kernel: str, mode: str, keep_outputs: bool) -> None:
    """Refuse what a TransformerBridge or nnsight model (``name``) cannot be captured with:
    a fast kernel other than the portable one, eager outputs, kept outputs."""
    if method == "fast" and kernel not in ("auto", PORTABLE):
        raise AttncodaError(
            f"kernel={kernel!r} serves Hugging Face models captured by attncoda's own "
            f"pass; a {name} is recorded through its wrapper, whose fast "
            f"path runs the {PORTABLE} kernel: use kernel={PORTABLE!r} or 'auto'"
        )
    if mode == "outputs":
        raise AttncodaError(
            f"mode='outputs' reads eager output_attentions of a Hugging Face model: capture "
            f"the {name} with mode='attention', or its Hugging Face model with mode='outputs'"
        )
    if keep_outputs:
        raise AttncodaError(
            f"keep_outputs=True is not available for a {name}: read the outputs of your own "
            f"call inside attncoda.recording, or capture its Hugging Face model"
        )


def _batch(model, input_ids, attention_mask, plan: CapturePlan) -> tuple[Batch, CapturePlan]:
    """The checked batch of a Hugging Face model as ``plan`` says (the BOS prepended, the
    sinks resolved, the rows to keep planned), and the plan with its mode settled by one
    short forward (:func:`routes_a_call`). Prior validation of ``plan`` is assumed."""
    ids, mask = check_batch(input_ids, attention_mask)
    docs = [ids[b][mask[b].bool()].numpy() for b in range(ids.shape[0])]
    bos = None
    if plan.prepend_bos:
        bos = bos_id(plan.tokenizer, model)
        docs = [np.concatenate([[bos], doc]).astype(np.int64) for doc in docs]
        ids, mask = pad(docs, 0, bool((mask[:, 0] == 0).any()))
    spec = plan.sink
    sinks = None if spec.kind == "auto" else resolve_sinks(spec, docs, plan.tokenizer)
    record = record_plan([len(doc) for doc in docs], plan.record_rows, plan.seed, plan.first_doc)
    # ids and mask stay on the CPU for the bookkeeping; each forward moves them to the
    # model's input device (forward_kwargs), the routing probe's included.
    batch = Batch(ids, mask, docs, sinks, record, bos)
    if plan.mode == "attention" and not routes_a_call(model, batch):
        if not plan.auto_mode:
            raise AttncodaError(unroutable_message(model))
        plan = replace(plan, mode="outputs")
    if plan.method == "fast" and plan.mode != "attention" and plan.auto_method:
        plan = replace(plan, method="exact", kernel=None)  # eager outputs: the exact reading
    if plan.method == "fast" and plan.mode != "attention":
        raise AttncodaError(
            f"method='fast' reads the routed attention; {type(model).__name__} is read with "
            f"mode={plan.mode!r}: use method='exact'"
        )
    return batch, plan


def _captured(model, batch: Batch, plan: CapturePlan) -> Capture:
    """The passes over ``batch`` (the ``sink="auto"`` pass first where its sinks wait for
    one) and their :class:`Capture`. Prior validation is assumed."""
    sinks = batch.sinks
    if sinks is None:
        first, _, _ = run_pass(model, batch, plan.sink_pass())
        received, count = first.received.numpy(), first.received_count.numpy()
        sinks = [
            auto_sinks(received[d, o : o + n], count[d, o : o + n])
            for d, (o, n) in enumerate(zip(batch.offsets.tolist(), batch.lengths, strict=True))
        ]
        batch = replace(batch, sinks=sinks)
    rec, out, floored = run_pass(model, batch, plan)
    virtual = int(any(rec.virtual))
    if virtual and not all(rec.virtual):
        raise AttncodaError(
            f"{type(model).__name__} has learned sink logits in some layers only: capture "
            f"needs them in every layer or in none"
        )
    if plan.sink.learned:
        sinks = [np.append(s, len(doc)) for s, doc in zip(sinks, batch.docs, strict=True)]
    about: dict[str, Any] = {
        "virtual_keys": virtual, "sink_spec": plan.sink.text, "mode": plan.mode,
        "zeros": plan.zeros, "model_class": type(model).__name__, "n_floored": floored,
        "bos_token_id": batch.bos, "block_size": plan.block_size, "seed": plan.seed,
        "method": plan.method, "kernel": kernels_ran(rec.ran) if plan.method == "fast" else None,
        "forward": forwards_ran(plan.method if plan.mode == "attention" else "exact", rec.ran),
        "read_dtype": rec.read_dtype,
    }  # fmt: skip
    documents = BatchDocuments(batch.docs, sinks, batch.record, batch.offsets)
    return assemble(rec, documents, about, out, plan.keep_outputs)


def capture_windows(  # params: the public entry point, each keyword one a caller sets
    model, windows: Sequence[Sequence[int] | np.ndarray], *, batch_size: int = 8,
    pad_token_id: int | None = None, padding_side: str = "right", progress: bool = False,
    **kwargs,
) -> Capture:  # fmt: skip
    """Capture a list of token windows in padded batches and concatenate the results.

    Parameters
    ----------
    model : transformers.PreTrainedModel, TransformerBridge or nnsight LanguageModel
    windows : sequence of sequence of int
        Token ids of each document, without padding (lists or 1-d integer arrays).
    batch_size : int
        Documents per forward pass.
    pad_token_id : int, optional
        Id written at padding positions (masked, so any id works); the tokenizer's or
        model config's pad id, else 0.
    padding_side : {"right", "left"}
    progress : bool
        Show progress over batches (:func:`attncoda._progress.steps`: a bar on a terminal,
        a line every 10 s elsewhere); ``False``: only inside a run that shows progress.
    **kwargs
        Passed to :func:`capture` (``sink``, ``tokenizer``, ``record_rows``, ...).

    Returns
    -------
    Capture
        Documents in the order of ``windows``; row samples are seeded by the global
        document index, so they do not depend on ``batch_size``.
    """
    if padding_side not in ("right", "left"):
        raise AttncodaError(f"unknown padding_side {padding_side!r}: use 'right' or 'left'")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise AttncodaError(f"batch_size must be a positive integer, got {batch_size!r}")
    if len(windows) == 0:
        raise AttncodaError("windows is empty: give at least one window of token ids")
    for index, window in enumerate(windows):
        if len(window) == 0:
            raise AttncodaError(f"window {index} is empty")
    if pad_token_id is None:
        config = live_model(model).config
        found = (getattr(s, "pad_token_id", None) for s in (kwargs.get("tokenizer"), config))
        pad_token_id = next((value for value in found if isinstance(value, int)), 0)
    from attncoda._progress import steps

    parts = []
    shown = steps(
        range(0, len(windows), batch_size),
        desc=f"capture {len(windows)} windows",
        unit="batch",
        force=True if progress else None,
    )
    for start in shown:
        chunk = [np.asarray(w, dtype=np.int64) for w in windows[start : start + batch_size]]
        ids, mask = pad(chunk, pad_token_id, padding_side == "left")
        parts.append(capture(model, ids, mask, _first_doc=start, **kwargs))
    return concatenate(parts)
