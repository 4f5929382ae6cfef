"""One call of the routed attention function on one layer: :class:`LayerCall`.

Built once per call by :func:`attncoda.capture.routing.attncoda_attention` and handed whole
to the fast path (:func:`attncoda.capture.kernels.record_layer`, then a kernel's
``record_layer``) and to the exact path. Free of torch at import, like the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from attncoda.capture.stats import Recorder

__all__ = ["LayerCall"]


@dataclass(frozen=True)
class LayerCall:
    """One layer's call of the attention function, as transformers made it.

    Attributes
    ----------
    recorder : Recorder or None
        The recorder of the pass (None: nothing is recorded, e.g. an ablation alone).
    layer : int
        The layer's index in ``recorder`` (call order within the pass); -1 without one.
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
    """

    recorder: Recorder | None
    layer: int
    module: torch.nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attention_mask: torch.Tensor | None
    scaling: float
    kwargs: Mapping[str, Any]

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
