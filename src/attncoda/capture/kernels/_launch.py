"""The fused kernel's launch, written once (docs/design.md, "GPU kernels before a GPU"): a
:class:`Launch` holds what one launch is made of, and :func:`launch_arguments` lists the
kernel's arguments from it, positions, strides, sizes and compile-time constants. The
launcher (:func:`attncoda.capture.kernels.triton_attention`) makes it of a layer's tensors;
the offline compile (``bench/_offline.py``) of tensors on the meta device, so that it
compiles what a launch on a GPU runs.
"""

from __future__ import annotations

import dataclasses

import torch

from ._configs import FP_FUSION, LaunchConfig, Variant
from ._masks import MaskShape
from ._sink_tiles import SinkGeometry, sink_tiles

__all__ = ["SINK_TILE", "Launch", "launch_arguments"]

#: Sink keys per gathered tile of the kernel's epilogue (the smallest ``tl.dot`` width).
SINK_TILE = 16


@dataclasses.dataclass(frozen=True, eq=False)
class Launch:
    """One launch of the fused kernel, whole (compared by identity: it holds its buffers).
    Making it allocates what the kernel reads or writes beyond the layer's tensors (the
    last five attributes) on the queries' device: meta tensors (dtypes, shapes and strides,
    no memory) in the offline compile.

    Attributes
    ----------
    query, key, value : torch.Tensor
        ``(batch, head, query_pos, head_dim)``; ``(batch, kv_head, key_pos, head_dim)``.
    shape, geometry : MaskShape, SinkGeometry
        The keys each query sees; where the sink keys are.
    scaling, softcap : float, float or None
        Score scale; Gemma 2's logit soft-cap.
    s_aux : torch.Tensor or None
        ``(head,)``: learned sink logits.
    variant, config : Variant, LaunchConfig
        The compile-time switches; the blocks, warps, stages and dot precision launched.
    interpreted : bool
        Under Triton's interpreter: products in float32, IEEE (its bfloat16 ``dot`` is not
        implemented).
    tiles : torch.Tensor
        int8 ``(batch, key tiles)``: :func:`sink_tiles` of ``geometry`` in blocks of
        ``config.block_n``.
    aux : torch.Tensor
        float32 ``(head,)``: ``s_aux``, or ``(1,)`` zeros without it.
    out : torch.Tensor
        ``(batch, head, query_pos, head_dim)`` in the queries' dtype: a view of a
        contiguous ``(batch, query_pos, head, head_dim)`` tensor.
    rows : dict
        float32 ``(batch, head, query_pos)``: ``lse``, ``ent`` and ``sum_z``.
    z_sink : torch.Tensor
        float32 ``(batch, head, query_pos, width)``: the sink keys' scores.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    shape: MaskShape
    geometry: SinkGeometry
    scaling: float
    softcap: float | None
    s_aux: torch.Tensor | None
    variant: Variant
    config: LaunchConfig
    interpreted: bool
    tiles: torch.Tensor = dataclasses.field(init=False, repr=False)
    aux: torch.Tensor = dataclasses.field(init=False, repr=False)
    out: torch.Tensor = dataclasses.field(init=False, repr=False)
    rows: dict[str, torch.Tensor] = dataclasses.field(init=False, repr=False)
    z_sink: torch.Tensor = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        b, h, q_len, d = self.query.shape
        device, f32 = self.query.device, torch.float32

        def empty(*size, dtype=f32):
            return torch.empty(size, dtype=dtype, device=device)

        aux = self.s_aux
        if aux is None:
            aux = torch.zeros(1, dtype=f32, device=device)
        made = {
            "tiles": sink_tiles(self.geometry, self.config.block_n),
            "aux": aux.to(device=device, dtype=f32).contiguous(),
            # The output leaves the kernel whole, in the model's dtype and in the layout the
            # model reads next, (batch, query_pos, head, head_dim); the kernel writes it
            # through the strides of its (batch, head, query_pos, head_dim) view.
            "out": empty(b, q_len, h, d, dtype=self.query.dtype).transpose(1, 2),
            "rows": {name: empty(b, h, q_len) for name in ("lse", "ent", "sum_z")},
            "z_sink": empty(b, h, q_len, self.geometry.columns.shape[1]),
        }
        for name, value in made.items():
            object.__setattr__(self, name, value)


def launch_arguments(launch: Launch) -> tuple[list, dict]:
    """The fused kernel's arguments for ``launch``: ``(positional, keywords)``.

    The positional arguments follow the kernel's parameters
    (:mod:`attncoda.capture.kernels._triton_jit`): its tensors, the strides of the queries,
    keys, values and output, the sizes and offsets, the scale and the soft-cap. The keywords
    are its compile-time constants (Triton's ``tl.constexpr``), by name, and the launch
    options (warps, stages, FMA contraction). Prior validation is assumed: the blocks are
    checked and the head dim is at most
    :data:`attncoda.capture.kernels._triton.MAX_HEAD_DIM`.
    """
    query, key, value, out = launch.query, launch.key, launch.value, launch.out
    shape, geometry, variant, config = launch.shape, launch.geometry, launch.variant, launch.config
    _, h, q_len, d = query.shape
    kv, k_len = key.shape[1], key.shape[2]
    block_d = max(16, 1 << (d - 1).bit_length())  # the head dim padded to a power of two
    positional = [
        query, key, value, geometry.columns, geometry.valid, geometry.is_sink,
        launch.tiles, shape.lo, shape.hi, geometry.prefix, launch.aux,
        out, launch.rows["lse"], launch.rows["ent"], launch.rows["sum_z"], launch.z_sink,
        *query.stride(), *key.stride(), *value.stride(), *out.stride(),
        h, h // kv, q_len, k_len, k_len - q_len, shape.window or 0,
        geometry.columns.shape[1], launch.tiles.shape[1], d,
        float(launch.scaling), float(launch.softcap or 1.0),
    ]  # fmt: skip
    keywords = {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_D": block_d,
        "CAUSAL": variant.causal,
        "HAS_WINDOW": variant.window,
        "HAS_SOFTCAP": variant.softcap,
        "AUX_CONTENT": variant.aux_content,
        "AUX_SINK": variant.aux_sink,
        "SPARSE_SINK": variant.sparse,
        "UPCAST": launch.interpreted or query.dtype == torch.float32,
        "PRECISION": "ieee" if launch.interpreted else config.precision,
        "EVEN_D": d == block_d,
        "BLOCK_S": SINK_TILE,
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "enable_fp_fusion": FP_FUSION,
    }
    return positional, keywords
