"""The public entry point: run a model over token windows and keep per-row statistics.

``mode="attention"`` routes every layer through the registered ``"attncoda"`` attention
function (exact, bounded memory). ``mode="outputs"`` runs eager with
``output_attentions=True`` and reads the returned probabilities, for architectures that do
not use transformers' AttentionInterface (e.g. MPNet, Bloom); exact zeros then need
a policy (``zeros="raise"`` or ``"floor"``) because the statistics take logs.
``mode="auto"`` (the default) routes a model that can be routed and reads the others'
eager outputs; ``Capture.mode`` records which was used.

Here are the arguments' checks, the sinks and the row plan, and the result's facts; the
pass itself is :func:`attncoda.capture._pass.run_pass`, and a TransformerBridge or nnsight
model is run by :func:`attncoda.capture.live.capture_live`.

The pieces live beside this module and are served here too: :class:`Capture`,
:func:`assemble` and :func:`capture_frame` (:mod:`attncoda.capture._result`), the batch and
forward helpers (:mod:`attncoda.capture._forward`) and :func:`record_plan`
(:mod:`attncoda.capture.stats`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError, check_choice
from attncoda.capture._forward import (
    bos_id,
    check_batch,
    first_position,
    forward,
    forward_kwargs,
    pad,
    position_ids,
)
from attncoda.capture._pass import forwards_ran, kernels_ran, routes_a_call, run_pass
from attncoda.capture._result import Capture, assemble, capture_frame, concatenate
from attncoda.capture.kernels.registry import KERNELS, PORTABLE, check_dtype, resolve_kernel
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

#: The one forward pass (:func:`attncoda.capture.forward`), under its former name.
_forward = forward


def capture(
    model,
    input_ids,
    attention_mask=None,
    *,
    sink="first",
    tokenizer=None,
    block_size: int = 512,
    record_rows="auto",
    seed: int = 0,
    mode: str = "auto",
    zeros: str = "raise",
    prepend_bos: bool = False,
    method: str = "exact",
    kernel: str = "auto",
    keep_outputs: bool = False,
    options: CaptureOptions | None = None,
    _first_doc: int = 0,
) -> Capture:
    """Run ``model`` over a padded batch and capture per-row attention statistics.

    Parameters
    ----------
    model : transformers.PreTrainedModel, TransformerBridge or nnsight LanguageModel
        In eval mode. A wrapper is run as its users run it (the bridge's ``forward``, an
        nnsight ``trace``) inside :func:`attncoda.capture.live.recording`; it takes
        right-padded batches, ``mode`` ``"auto"`` or ``"attention"`` and no
        ``keep_outputs``.
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
        Queries per block in ``mode="attention"``; layers hold at most
        ``batch x head x block_size x pos`` scores. Layers with ``pos <= block_size`` are
        bit-identical to eager.
    record_rows : {"auto", "all", "none"} or int
        Which query rows to keep in full: ``"auto"`` keeps every row of a document with at
        most 128 tokens and a seeded sample of 128 otherwise; an int ``k`` does the same
        with ``k``.
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
    method : {"exact", "fast"}
        ``"exact"`` (the reference) computes every row; ``"fast"`` takes the statistics from
        a fused kernel's log-sum-exp (:mod:`attncoda.capture.kernels`), within float32
        rounding of the exact path, and only the recorded rows in full. The ``auto`` sink
        pass and ablations use the exact path.
    kernel : str
        ``method="fast"`` only: one of :data:`attncoda.capture.kernels.registry.KERNELS`.
        ``sdpa`` calls PyTorch's fused attention twice per layer (softcapped and
        learned-sink layers then take the exact path); ``triton`` runs the one-pass kernel
        of :mod:`attncoda.capture.kernels.triton` (CUDA, or the CPU under
        ``TRITON_INTERPRET=1``); ``"auto"`` is ``triton`` on CUDA when triton imports and
        ``sdpa`` otherwise (:func:`attncoda.capture.kernels.resolve_kernel`).
        ``Capture.kernel`` records what ran, per layer where the layers differ
        (:func:`attncoda.capture._pass.kernels_ran`).
    keep_outputs : bool
        Keep the logits (or last hidden state) in ``Capture.outputs``, and for causal
        language models the next-token log-likelihoods in ``Capture.token_logprob``.
    options : CaptureOptions, optional
        How a run captures, built and checked once
        (:class:`attncoda.capture.options.CaptureOptions`) and handed down whole: its
        ``sink``, ``seed``, ``method`` and ``kernel`` are used, and those keywords must be
        left at their defaults.

    Returns
    -------
    Capture

    Raises
    ------
    AttncodaError
        Bad arguments, a model whose attention cannot be routed (``mode="attention"``), a
        zero probability under ``zeros="raise"``, sink specs that do not fit a document.
    """
    if options is not None:
        sink, seed, method, kernel = _from_options(options, sink, seed, method, kernel)
    if mode not in MODES:
        raise AttncodaError(
            f"unknown mode {mode!r}: use 'auto' (route when possible), 'attention' (routed, "
            f"exact) or 'outputs' (eager output_attentions)"
        )
    check_choice("zero policy", zeros, ZEROS)
    check_choice("method", method, METHODS)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise AttncodaError(f"block_size must be a positive integer, got {block_size!r}")
    if kernel not in KERNELS:
        resolve_kernel(kernel, "cpu")  # the unknown-kernel message
    if kind_of(model) != "hf":
        if method == "fast" and kernel not in ("auto", PORTABLE):
            raise AttncodaError(
                f"kernel={kernel!r} serves Hugging Face models captured by attncoda's own "
                f"pass; a {type(model).__name__} is recorded through its wrapper, whose fast "
                f"path runs the {PORTABLE} kernel: use kernel={PORTABLE!r} or 'auto'"
            )
        return capture_live(
            model,
            input_ids,
            attention_mask,
            sink=sink,
            tokenizer=tokenizer,
            block_size=block_size,
            record_rows=record_rows,
            seed=seed,
            mode=mode,
            prepend_bos=prepend_bos,
            method=method,
            keep_outputs=keep_outputs,
            first_doc=_first_doc,
        )
    device = input_device(model)
    if method == "fast":
        resolve_kernel(kernel, device.type)  # a kernel asked by name where it cannot run
        check_dtype(device, getattr(model, "dtype", None))
    if model.training:
        raise AttncodaError(
            f"{type(model).__name__} is in training mode: capture runs in eval mode only "
            f"(call model.eval())"
        )
    spec = parse_sink(sink)
    asked_auto = mode == "auto"
    if asked_auto:
        mode = "attention" if routable(model) else "outputs"
    if spec.learned and mode == "outputs":
        raise AttncodaError(
            f"sink {spec.text!r} needs the learned sink logits, which eager outputs do not "
            f"carry: capture {type(model).__name__} with mode='attention'"
        )
    ids, mask = check_batch(input_ids, attention_mask)
    docs = [ids[b][mask[b].bool()].numpy() for b in range(ids.shape[0])]
    bos = None
    if prepend_bos:
        bos = bos_id(tokenizer, model)
        docs = [np.concatenate([[bos], doc]).astype(np.int64) for doc in docs]
        ids, mask = pad(docs, 0, bool((mask[:, 0] == 0).any()))
    sinks = None if spec.kind == "auto" else resolve_sinks(spec, docs, tokenizer)
    if mode == "attention" and not routes_a_call(model, ids, mask, block_size):
        if not asked_auto:
            raise AttncodaError(unroutable_message(model))
        mode = "outputs"
    if method == "fast" and mode != "attention":
        raise AttncodaError(
            f"method='fast' reads the routed attention; {type(model).__name__} is read with "
            f"mode={mode!r}: use method='exact'"
        )
    lengths = [len(doc) for doc in docs]
    record = record_plan(lengths, record_rows, seed, _first_doc)
    # ids and mask stay on the CPU for the bookkeeping; each forward moves them to the
    # model's input device (forward_kwargs), the routing probe's included.
    offsets = mask.argmax(-1)
    if sinks is None:
        first, _, _ = run_pass(
            model, ids, mask, None, [r[:0] for r in record], mode, zeros, block_size, spec.learned
        )
        received, count = first.received.numpy(), first.received_count.numpy()
        sinks = [
            auto_sinks(received[d, o : o + n], count[d, o : o + n])
            for d, (o, n) in enumerate(zip(offsets.tolist(), lengths, strict=True))
        ]
    rec, out, floored = run_pass(
        model,
        ids,
        mask,
        sinks,
        record,
        mode,
        zeros,
        block_size,
        spec.learned,
        method,
        logits=keep_outputs,
        kernel=kernel if method == "fast" else None,
    )
    virtual = int(any(rec.virtual))
    if virtual and not all(rec.virtual):
        raise AttncodaError(
            f"{type(model).__name__} has learned sink logits in some layers only: capture "
            f"needs them in every layer or in none"
        )
    if spec.learned:
        sinks = [np.append(s, len(doc)) for s, doc in zip(sinks, docs, strict=True)]
    about: dict[str, Any] = {
        "virtual_keys": virtual,
        "sink_spec": spec.text,
        "mode": mode,
        "zeros": zeros,
        "model_class": type(model).__name__,
        "n_floored": floored,
        "bos_token_id": bos,
        "block_size": block_size,
        "seed": seed,
        "method": method,
        "kernel": kernels_ran(rec.ran) if method == "fast" else None,
        "forward": forwards_ran(method if mode == "attention" else "exact", rec.ran),
        "read_dtype": rec.read_dtype,
    }
    return assemble(rec, out, docs, sinks, record, offsets, keep_outputs, about)


def _from_options(
    options: CaptureOptions, sink: Any, seed: int, method: str, kernel: str
) -> tuple[Any, int, str, str]:
    """The sink, seed, method and kernel of ``options``; a keyword of the same name given
    beside it (not its default) is refused, since the two could disagree."""
    given = [
        f"{name}={value!r}"
        for name, value, default in (
            ("sink", sink, "first"),
            ("seed", seed, 0),
            ("method", method, "exact"),
            ("kernel", kernel, "auto"),
        )
        if value != default
    ]
    if given:
        raise AttncodaError(
            f"options= already says the sink, seed, method and kernel: drop {', '.join(given)} "
            "or set it in the options"
        )
    return options.sink, options.seed, options.method, options.kernel


def capture_windows(
    model,
    windows: Sequence[Sequence[int] | np.ndarray],
    *,
    batch_size: int = 8,
    pad_token_id: int | None = None,
    padding_side: str = "right",
    progress: bool = False,
    **kwargs,
) -> Capture:
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
