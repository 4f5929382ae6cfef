"""One capture pass of a Hugging Face model over a padded batch, and what served it.

:func:`run_pass` runs a :class:`attncoda.capture._plan.Batch` as its
:class:`attncoda.capture._plan.CapturePlan` says (one :class:`attncoda.capture.stats.PassPlan`,
fixed) into a :class:`attncoda.capture.stats.Recorder`, routed through the registered ``"attncoda"``
attention function (``mode="attention"``) or read from eager ``output_attentions``
(``mode="outputs"``); :func:`routes_a_call` tells whether a model's forward reaches the
attention function at all; :func:`kernels_ran` names the kernels of a ``method="fast"``
pass for ``Capture.kernel``.
"""

from __future__ import annotations

import torch

from attncoda.capture._forward import forward
from attncoda.capture._plan import Batch, CapturePlan
from attncoda.capture.given import read_outputs
from attncoda.capture.kernels.registry import NAMES, choose
from attncoda.capture.routing import routed
from attncoda.capture.stats import PassPlan, Recorder

__all__ = ["forwards_ran", "kernels_ran", "routes_a_call", "run_pass"]

_CALLS_ROUTED: dict[type, bool] = {}


def run_pass(model, batch: Batch, plan: CapturePlan):
    """One forward pass of ``batch`` as ``plan`` says; returns (recorder, model output,
    n_floored). Prior validation is assumed.

    A batch without sinks is the ``sink="auto"`` pass: its recorder sums the attention each
    key receives (:meth:`attncoda.capture.stats.Recorder.add_block`).
    """
    real = batch.mask.bool()
    offsets = real.long().argmax(-1)
    record_padded = [
        torch.as_tensor(r) + int(o) for r, o in zip(batch.record, offsets.tolist(), strict=True)
    ]
    sink_mask = None
    if batch.sinks is not None:
        sink_mask = torch.zeros_like(real)
        for doc, (pos, off) in enumerate(zip(batch.sinks, offsets.tolist(), strict=True)):
            sink_mask[doc, torch.as_tensor(pos) + off] = True
        # Where the kernels read it, on the layers' device (once, not once per layer).
        sink_mask = sink_mask.to(plan.device)
    kernels = choose(plan.kernel) if plan.method == "fast" else None  # the name, checked once
    passing = PassPlan(
        real.cpu(), offsets.cpu(), sink_mask, record_padded, plan.block_size,
        learned=plan.sink.learned, method=plan.method, kernels=kernels, pinned=plan.pinned,
    )  # fmt: skip
    rec = Recorder(passing)
    if plan.mode == "attention":
        with routed(model, rec):
            out = forward(model, batch.ids, batch.mask, logits=plan.keep_outputs)
        rec.settle()
        return rec, out, 0
    out, floored = read_outputs(
        model, batch.ids, batch.mask, rec, plan.zeros, logits=plan.keep_outputs
    )
    return rec, out, floored


def routes_a_call(model, batch: Batch) -> bool:
    """Whether a forward pass of one short document reaches the attention function.

    Some classes pass transformers' source heuristic yet compute attention themselves;
    one forward of a few tokens (the batch's first row's last two) tells (cached per class).
    """
    cls = type(model)
    if cls not in _CALLS_ROUTED:
        real = torch.ones(1, 2, dtype=torch.bool)
        probe = Recorder(PassPlan(real, torch.zeros(1, dtype=torch.long), None, [], 2))
        ids, mask = batch.ids, batch.mask
        with routed(model, probe):
            forward(model, ids[:1, -2:], torch.ones_like(mask[:1, -2:]))
        _CALLS_ROUTED[cls] = bool(probe.stats)
    return _CALLS_ROUTED[cls]


def kernels_ran(ran: dict[int, str]) -> str | None:
    """What served ``method="fast"``, from the recorder's per-layer record: the kernel's
    name when one kernel served every layer; otherwise the kernel of most layers (ties to
    the one ``"auto"`` prefers first) and the others by layer, e.g. ``triton; sdpa on
    layers 3, 7`` (``exact`` for a layer the fast kernels do not cover)."""
    if not ran:
        return None
    return _by_layer(ran, lambda name: name == NAMES[0])


def forwards_ran(method: str, ran: dict[int, str]) -> str:
    """The attention implementation whose output each layer handed on (``Capture.forward``):
    ``"eager"`` for the exact path (eager's op sequence) and for the layers the fast kernels
    do not cover, ``"fast:<kernel>"`` for a fast kernel's own output, grouped by layer as
    :func:`kernels_ran` does (``"fast:cpp; eager on layer 3"``)."""
    if method != "fast" or not ran:
        return "eager"
    named = {layer: "eager" if k == "exact" else f"fast:{k}" for layer, k in ran.items()}
    return _by_layer(named, lambda name: name != "eager")


def _by_layer(named: dict[int, str], preferred) -> str:
    """``named`` (layer -> name) in words: the name of most layers (ties to ``preferred``)
    first, then each other name with its layers (``"sdpa on layers 3, 7"``)."""
    by_name: dict[str, list[int]] = {}
    for layer, name in sorted(named.items()):
        by_name.setdefault(name, []).append(layer)
    main = max(by_name, key=lambda name: (len(by_name[name]), preferred(name)))
    others = [
        f"{name} on layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}"
        for name, layers in by_name.items()
        if name != main
    ]
    return "; ".join([main, *others])
