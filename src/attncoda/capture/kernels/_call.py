"""One call of the routed attention function on one layer: :class:`LayerCall`.

Built once per call by :func:`attncoda.capture.routing.attncoda_attention` and handed whole
to the fast path (:func:`attncoda.capture.kernels.registry.serve`, then the serving kernel's
``run``) and to the exact path. Free of torch at import, like the registry.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from attncoda.capture.stats import PassPlan

    from ._masks import MaskShape
    from ._sink_tiles import SinkGeometry

__all__ = ["LayerCall"]


@dataclass(frozen=True)
class LayerCall:
    """One layer's call of the attention function, as transformers made it, and what was
    decided of it once: its mask as read, the kernel that serves it, that kernel's choices.

    Attributes
    ----------
    plan : PassPlan or None
        What the pass needs to know (None: nothing is recorded, e.g. an ablation alone).
    layer : int
        The layer's index in the pass (call order); -1 without a plan.
    module : torch.nn.Module
        The attention layer.
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``.
    key, value : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention.
    attention_mask : torch.Tensor or None
        As the layer passed it: additive ``(batch, 1, query_pos, key_pos)`` (``eager_mask``)
        or boolean (:func:`attncoda.capture.kernels.boolean_mask`), or None where
        transformers skipped it (plain causal rows without padding, or no mask at all).
    scaling : float
        The score scale (``head_dim ** -0.5`` where the layer passed none).
    kwargs : Mapping
        The layer's other attention keywords (``softcap``, ``sliding_window``, ``s_aux``,
        and those the attention function ignores), checked by the attention function.
    masks : dict or None
        Where the pass keeps its masks as read (its accumulator's): each mask tensor is
        read once for all the layers that share it (None: read afresh).
    kernel, served : attncoda.capture.kernels.Kernel or None, str
        The kernel that serves the layer after those that declined it, and what served it
        as ``Capture.kernel`` says (:func:`attncoda.capture.kernels.registry.serve`).
    launch : object
        What that kernel's ``prepare`` decided of the layer (``triton``: its variant and
        launch configuration), or None.
    """

    plan: PassPlan | None
    layer: int
    module: torch.nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float
    kwargs: Mapping[str, Any]
    masks: dict | None = None
    kernel: Any = None
    served: str = "exact"
    launch: Any = None

    @property
    def softcap(self) -> float | None:
        """Gemma 2's logit soft-cap ``c`` (scores ``tanh(z / c) * c``), or None."""
        return self.kwargs.get("softcap")

    @property
    def window(self) -> int | None:
        """The layer's sliding window (keys a query sees, itself included), or None."""
        window = self.kwargs.get("sliding_window")
        return int(window) if isinstance(window, int) and window > 0 else None

    @property
    def s_aux(self) -> torch.Tensor | None:
        """GPT-OSS's learned sink logits, one per head (a virtual key), or None."""
        return self.kwargs.get("s_aux")

    @functools.cached_property
    def mask(self) -> tuple[torch.Tensor | None, bool, bool]:
        """``(visible, causal, ok)`` of the layer's mask (:func:`attncoda.capture.kernels.
        read_mask`; none: the layer's own ``is_causal``), read once per mask tensor in the
        pass: ``visible`` None for plain causal rows, ``ok`` False where an additive mask puts
        a bias on a visible key (the fast statistics do not model one)."""
        from ._masks import once, read_mask

        mask, q_len, k_len = self.attention_mask, self.query.shape[2], self.key.shape[2]
        if mask is None:
            return None, bool(getattr(self.module, "is_causal", False)), True
        return once(self.masks, ("read", id(mask)), mask, lambda: read_mask(mask, q_len, k_len))

    @functools.cached_property
    def shape(self) -> MaskShape | None:
        """The layer's :class:`attncoda.capture.kernels.MaskShape` (with its window), once per
        mask tensor and window in the pass; None where its mask has none or a bias."""
        from ._masks import mask_shape, once

        visible, causal, ok = self.mask
        (b, _, q_len, _), k_len, window = self.query.shape, self.key.shape[2], self.window

        def read():
            return mask_shape(visible, causal, b, q_len, k_len, window, self.query.device)

        key = ("shape", id(self.attention_mask), window, causal)
        return once(self.masks, key, self.attention_mask, read) if ok else None

    @functools.cached_property
    def geometry(self) -> SinkGeometry:
        """Where the plan's sink keys fall in :attr:`shape` (:func:`attncoda.capture.kernels.
        _sink_tiles.sink_geometry`), once per shape in the pass."""
        from ._masks import once
        from ._sink_tiles import sink_geometry

        shape = self.shape

        def read():
            return sink_geometry(self.plan.sink.to(self.query.device), shape)

        return once(self.masks, ("geometry", id(shape)), shape, read)
