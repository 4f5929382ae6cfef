"""Head ablation and head gates, applied inside the routed ``"attncoda"`` attention function.

Because the edit happens in the attention function itself (after the weighted sum of values,
before the heads are merged and projected), it works for every architecture that
:func:`attncoda.capture.routing.routed` can route, whatever its output projection is
called (``o_proj``, ``dense``, ``c_proj``, ``out_proj``, ...).

Modes, for a head ``h`` of layer ``l`` and a query row with visible keys ``V``:

``zero``
    The head's output is 0 (the same as zeroing its slice of the output projection's input).
``uniform``
    The row gives weight ``1/|V|`` to each visible key: the output is the mean of the value
    vectors over ``V`` (padding keys excluded; a causal row averages keys ``0..i``).
``sink``
    All the weight goes to the sink key, the first real token of the document (the first key
    that any query of the document may see, so left padding is skipped): the output is that
    token's value vector.

Head gates (Michel et al., 2019, "Are Sixteen Heads Really Better than One?") multiply each
head's output by a scalar ``xi_{l,h}``; with ``xi = 1`` and ``requires_grad`` the gradient
``dL/dxi`` is the head-importance signal.

Layers are numbered in call order within each forward pass of the model (the numbering of
:class:`attncoda.capture.stats.Recorder`, hence of every capture table): a forward
pre-hook on the model resets the count, so call the model itself, not one of its submodules.
Row statistics recorded in the same forward pass describe the attention scores before the
edit.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.routing import EditPlan, edited, layer_edit, route_of

__all__ = [
    "MODES",
    "ablate",
    "head_counts",
    "head_gates",
    "head_labels",
    "layer_edit",
    "parse_heads",
]

#: Ablation modes, see the module docstring.
MODES = ("zero", "uniform", "sink")

_HEAD = re.compile(r"^\s*(\d+)\s*\.\s*(\d+)\s*$")


def head_counts(model) -> tuple[int, int]:
    config = model.config.get_text_config()
    values = []
    for name in ("num_hidden_layers", "num_attention_heads"):
        value = getattr(config, name, None)
        if isinstance(value, bool) or not isinstance(value, int):
            raise AttncodaError(
                f"cannot read {name} from the config of {type(model).__name__}: ablation needs "
                f"the number of layers and heads"
            )
        values.append(value)
    return values[0], values[1]


def parse_heads(spec: str) -> dict[int, list[int]]:
    """Parse ``"L.H"`` head labels: ``"3.1,4.2,3.5"`` -> ``{3: [1, 5], 4: [2]}``.

    Parameters
    ----------
    spec : str
        Comma-separated ``layer.head`` pairs (0-based); ``""`` for none.

    Returns
    -------
    dict of int to list of int
        Layers in increasing order, each with its sorted heads.

    Raises
    ------
    AttncodaError
        For an item that is not ``layer.head``.
    """
    plan: dict[int, set[int]] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        match = _HEAD.fullmatch(item)
        if match is None:
            raise AttncodaError(
                f"cannot read head {item.strip()!r}: write heads as 'layer.head', e.g. '3.1,4.2'"
            )
        plan.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return {layer: sorted(heads) for layer, heads in sorted(plan.items())}


def head_labels(heads: Mapping[int, Sequence[int]] | Sequence[tuple[int, int]]) -> str:
    """The ``"L.H"`` labels of heads, comma-separated, in the given order.

    Parameters
    ----------
    heads : mapping of layer to heads, or sequence of (layer, head)

    Returns
    -------
    str
        e.g. ``"3.1,3.5,4.2"``; ``""`` for no heads.
    """
    pairs = (
        [(layer, head) for layer, hs in heads.items() for head in hs]
        if isinstance(heads, Mapping)
        else list(heads)
    )
    return ",".join(f"{int(layer)}.{int(head)}" for layer, head in pairs)


def _check_heads(heads: object, n_layers: int, n_heads: int, name: str) -> dict[int, torch.Tensor]:
    if not isinstance(heads, Mapping):
        raise AttncodaError(
            f"heads must map a layer to its heads, e.g. {{3: [1, 5]}}, got {type(heads).__name__}"
        )
    out: dict[int, torch.Tensor] = {}
    for layer, chosen in heads.items():
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
            raise AttncodaError(
                f"layer {layer!r} is out of range: {name} has {n_layers} layers (0..{n_layers - 1})"
            )
        picked = set()
        for head in chosen:
            if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n_heads:
                raise AttncodaError(
                    f"head {head!r} of layer {layer} is out of range: {name} has {n_heads} heads "
                    f"per layer (0..{n_heads - 1})"
                )
            picked.add(head)
        if picked:
            out[layer] = torch.tensor(sorted(picked), dtype=torch.long)
    return out


@contextlib.contextmanager
def _activate(model, plan: EditPlan) -> Iterator[None]:
    """Route ``model`` with ``plan`` (inside routed() or capture(): keeping their recorder),
    counting its layers per forward pass."""

    def reset(module, args):
        plan.calls = 0

    handle = model.register_forward_pre_hook(reset)
    try:
        with edited(model, plan):
            yield
    finally:
        handle.remove()


def _outer(model) -> EditPlan | None:
    """The edit of an enclosing context (None: none)."""
    return getattr(route_of(model), "edit", None)


@contextlib.contextmanager
def ablate(model, heads: Mapping[int, Sequence[int]], mode: str = "zero") -> Iterator[None]:
    """Ablate attention heads in every forward pass of ``model`` inside the block.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model whose attention :func:`attncoda.capture.routing.routed` can route (in eval
        mode). It is routed for the duration of the block (unless it already is).
    heads : mapping of int to sequence of int
        ``{layer: [head, ...]}``, 0-based, layers in forward call order; ``{}`` ablates
        nothing (the forward pass is then bit-identical to eager).
    mode : {"zero", "uniform", "sink"}
        What replaces each ablated head's output ``(batch, query_pos, head_dim)``; see the
        module docstring.

    Raises
    ------
    AttncodaError
        For an unknown mode, a layer or head out of range, or a model that cannot be routed.
        Inside the block: a forward pass with more attention calls than layers (a submodule
        called directly, or cross-attention).

    Notes
    -----
    Contexts nest: an inner :func:`ablate` replaces the outer ablation and keeps the gates of
    an enclosing :func:`head_gates`.

    Examples
    --------
    >>> with ablate(model, {3: [1, 5]}, "zero"):  # doctest: +SKIP
    ...     logits = model(input_ids=ids).logits
    """
    if mode not in MODES:
        raise AttncodaError(f"unknown ablation mode {mode!r}: use 'zero', 'uniform' or 'sink'")
    n_layers, n_heads = head_counts(model)
    name = type(model).__name__
    chosen = _check_heads(heads, n_layers, n_heads, name)
    outer = _outer(model)
    gates = outer.gates if outer is not None else None
    with _activate(model, EditPlan(name, n_layers, n_heads, mode, chosen, gates)):
        yield


@contextlib.contextmanager
def head_gates(model, gates: torch.Tensor) -> Iterator[None]:
    """Multiply each head's output by a gate ``xi`` in every forward pass inside the block.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        As for :func:`ablate`.
    gates : torch.Tensor
        ``(layer, head)``, or ``(batch, layer, head)`` for one gate per document of the batch
        (so one backward pass gives each document's ``dL_d/dxi``). Ones leave the outputs
        unchanged (``x * 1.0 == x``); pass ``requires_grad=True`` ones for gradient
        importance (gradients need the forward pass outside ``torch.no_grad``).

    Raises
    ------
    AttncodaError
        For gates of another shape than ``(layer, head)`` or ``(batch, layer, head)``.
    """
    n_layers, n_heads = head_counts(model)
    name = type(model).__name__
    if not isinstance(gates, torch.Tensor) or gates.ndim not in (2, 3):
        shape = tuple(gates.shape) if isinstance(gates, torch.Tensor) else type(gates).__name__
        raise AttncodaError(
            f"gates must be a tensor of shape (layer, head) or (batch, layer, head) = (..., "
            f"{n_layers}, {n_heads}) for {name}, got {shape}"
        )
    if tuple(gates.shape[-2:]) != (n_layers, n_heads):
        raise AttncodaError(
            f"gates must be a tensor of shape (layer, head) or (batch, layer, head) = (..., "
            f"{n_layers}, {n_heads}) for {name}, got {tuple(gates.shape)}"
        )
    batched = gates if gates.ndim == 3 else gates[None]
    outer = _outer(model)
    mode, heads = (outer.mode, outer.heads) if outer is not None else (None, {})
    with _activate(model, EditPlan(name, n_layers, n_heads, mode, heads, batched)):
        yield
