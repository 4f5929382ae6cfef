"""The dtype recipe of a family's eager attention function (docs/design.md, "Exactness"),
seen by running it, no text of transformers' source read: the function transformers runs
for ``attn_implementation="eager"`` (its modeling module's ``eager_attention_forward``) is
called once per layer class and dtype on zero queries and keys of the layer's dtype (its own
parameters, a sink's, take part as they do), its softmax and matmul watched by a
:class:`~torch.overrides.TorchFunctionMode`. In a float32 layer the recipe changes nothing."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["RECIPES", "Recipe", "recipe"]


@dataclass(frozen=True)
class Recipe:
    """The dtype choices of a family's eager attention function (they matter only where the
    layer is not float32): ``upcast_softmax``, the softmax takes the scores to float32 and
    casts back (Llama, OPT, ...; not GPT-2, BERT); ``float32_scores``, the scores are a
    float32 matmul of upcast queries and keys (GPT-J, CodeGen)."""

    upcast_softmax: bool
    float32_scores: bool


#: What eager does where a family has no eager function of its own (transformers' usual).
_USUAL = Recipe(upcast_softmax=True, float32_scores=False)
RECIPES: dict[tuple[type, torch.dtype], Recipe] = {}


class _Watch(TorchFunctionMode):
    """The dtypes in and out of each softmax and matmul a function runs."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, torch.dtype, torch.dtype]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "").strip("_")
        if name in ("softmax", "matmul") and isinstance(out, torch.Tensor):
            self.seen.append((name, args[0].dtype, out.dtype))
        return out


def recipe(module, query, key) -> Recipe:
    """The recipe of ``module``'s family, found once per class and dtype (the module
    docstring) with probes of the layer's heads, head size and dtype (``query``, ``key``)."""
    cls, found = type(module), (type(module), query.dtype)
    if found not in RECIPES:
        eager = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        RECIPES[found] = _USUAL if eager is None else _watched(eager, module, query, key)
    return RECIPES[found]


def _watched(eager, module, query, key) -> Recipe:
    """What ``eager`` does on a zero probe of ``query``'s and ``key``'s heads and dtype."""
    probe = query.new_zeros((1, query.shape[1], 2, query.shape[-1]))
    keys = key.new_zeros((1, key.shape[1], 2, key.shape[-1]))
    own = query.dtype
    watch = _Watch()
    try:
        with torch.no_grad(), watch:
            eager(module, probe, keys, keys, None, scaling=1.0, dropout=0.0)
    except Exception:  # an eager function that needs more of the model than its layer
        return _USUAL
    up = any(n == "softmax" and i != o == torch.float32 for n, i, o in watch.seen)
    matmuls = [out for name, _, out in watch.seen if name == "matmul"]  # the scores' first
    return Recipe(up, float32_scores=own != torch.float32 and matmuls[:1] == [torch.float32])
