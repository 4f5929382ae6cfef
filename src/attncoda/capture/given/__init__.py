"""Attention that comes from elsewhere: captures from probabilities the caller already has.

What it holds: :func:`from_attentions` (per-layer tensors or a TransformerLens cache),
:func:`read_attentions` (an attention file: ``.npz``, ``.pt``, ``.safetensors``) and the
eager ``output_attentions`` path of ``mode="outputs"`` (:func:`read_outputs`,
:func:`eager_attention`).

What it may import: :mod:`attncoda.capture._result`, :mod:`attncoda.capture._forward`,
:mod:`attncoda.capture.stats`, :mod:`attncoda.capture.names`, :mod:`attncoda._errors`,
numpy and torch.
"""

from __future__ import annotations

from ._attention_file import read_attentions
from ._given import KINDS, from_attentions
from ._inputs import transformer_lens_layers
from ._outputs import eager_attention, read_outputs

__all__ = [
    "KINDS",
    "eager_attention",
    "from_attentions",
    "read_attentions",
    "read_outputs",
    "transformer_lens_layers",
]
