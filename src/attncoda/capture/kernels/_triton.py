"""The launcher of the ``triton`` kernel (:mod:`attncoda.capture.kernels.triton`): one fused
pass per layer, the ``@triton.jit`` source in :mod:`attncoda.capture.kernels._triton_jit`.

Per (batch, query head, query block) the kernel streams the key tiles the mask leaves,
as flash kernels do (the loop's stages are described in
:mod:`attncoda.capture.kernels._triton_jit`), and keeps, beside the running maximum ``m``
and ``l = sum_C 2**(u - m)`` of a flash-style loop over the *content* keys ``C`` (scores
``u = z log2 e`` in log2 units), three more accumulators (docs/design.md, "The fused
kernel"):

- ``a = sum_C 2**(u - m) (u - m)``, rescaled like ``l`` when ``m`` moves, so that
  ``H(q) = ln l - a ln 2 / l`` and ``lse_C = (m + log2 l) ln 2``;
- ``sum_C u`` and ``m_C = |C|`` (the visible content keys), for the sink balance;
- ``sum_C 2**(u - m) v``, the content output ``o_C = E_q[v]`` after division by ``l``.

The sink keys are not in the loop (its bounds start after each document's sink prefix;
other sink keys are masked in the tiles that hold them). The kernel's epilogue takes their
scores, writes them (``-inf`` where a query does not see them) and adds their values to the
output, which leaves the kernel whole in the model's dtype. The statistics follow in
float64 exactly as in :mod:`attncoda.capture.kernels._sdpa`:
``lse = logaddexp(lse_C, logsumexp(z_S))``, ``log(1 - s) = lse_C - lse`` (no subtraction
from 1) and ``H(p) = -sum_S p log p + (1 - s) (H(q) - log(1 - s))``, never divided by
``1 - s``.

Covered:

- grouped-query attention: key/value head ``head // group``, never an expanded copy (the
  heads of a group run as neighbouring programs, so their key tiles come from L2);
- causal rows, padding (one contiguous run of real keys per document) and sliding windows
  (``i - j < window``), key blocks outside them skipped;
- ``scaling``, Gemma 2's ``softcap`` (``tanh(z / c) c``, sink scores included) and GPT-OSS
  learned sinks ``s_aux``: a virtual key of logit ``s_aux[head]`` and no value, seen by every
  query, in ``C`` (it seeds the accumulators) or in ``S`` (``sink="learned"``: one more sink
  column);
- float32, bfloat16 and float16 inputs, any head dim up to 256 (padded to a power of two),
  every accumulator float32.

A mask the kernel cannot describe by these parameters or a head dim above 256 falls back to
the two-call SDPA path with a printed note (:func:`prepare`); so does a float64 input,
which the registry declines from the kernel's declared dtypes
(:func:`attncoda.capture.kernels.registry.declines`).

On CUDA the kernel is compiled by Triton; on the CPU it runs only under Triton's interpreter
(``TRITON_INTERPRET=1`` before the first call), which is how the test suite checks it.
Under the interpreter the score and value products are taken in float32 (its bfloat16
``dot`` is not implemented); bfloat16 and float16 products are exact in float32, so only the
summation order differs from the compiled kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.stats import ContentSummary, split_rows

from ._configs import LaunchConfig, Refused, Variant, architecture_of, launch_config
from ._launch import Launch, launch_arguments
from ._masks import MaskShape
from ._sink_tiles import SinkGeometry, sink_geometry
from ._triton_jit import compiled, interpreting

__all__ = [
    "MAX_HEAD_DIM",
    "KernelRefused",
    "Planned",
    "architecture",
    "launch_for",
    "plan_launch",
    "prepare",
    "triton_attention",
]

#: The largest head dim the kernel takes (a query block and its accumulator in registers).
MAX_HEAD_DIM = 256


def _blocks(head_dim: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)`` under the interpreter: 64 x 64 up to head dim 128, 64 x 32 at
    256 (no register file to fit; the CUDA blocks come from the launch table)."""
    return (64, 32) if head_dim > 128 else (64, 64)


class KernelRefused(AttncodaError):
    """The launch table refuses this (architecture, dtype, head dim): the two-call SDPA
    path serves it (:func:`prepare` says why)."""


#: torch dtypes by the launch table's names.
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def architecture(device) -> str | None:
    """The launch table's architecture for a CUDA ``device`` (None before sm_80)."""
    device = torch.device(device)
    capability = torch.cuda.get_device_capability(device)
    properties = torch.cuda.get_device_properties(device)
    return architecture_of(capability, getattr(properties, "shared_memory_per_block_optin", None))


def launch_for(
    device, dtype: torch.dtype, head_dim: int, heavy: bool = False
) -> LaunchConfig | Refused:
    """The launch configuration of a layer on ``device`` in ``dtype`` at ``head_dim``, of a
    heavy variant or not (:attr:`attncoda.capture.kernels._configs.Variant.heavy`).

    On CUDA the launch table's entry for the device's architecture
    (:func:`attncoda.capture.kernels.launch_config`), a :class:`Refused` before sm_80; under
    the interpreter (the CPU) the blocks of :func:`_blocks`, one stage, IEEE products.
    """
    device = torch.device(device)
    if device.type != "cuda":
        block_m, block_n = _blocks(head_dim)
        return LaunchConfig(block_m, block_n, 4, 1, "ieee")
    arch = architecture(device)
    if arch is None:
        major, minor = torch.cuda.get_device_capability(device)
        return Refused(f"compute capability {major}.{minor} (configured from sm_80 on)")
    return launch_config(arch, _DTYPE_NAMES[dtype], head_dim, heavy)


def _checked_block(size: int, name: str) -> int:
    """``size`` if it is a power of two from 16 to 256; otherwise an AttncodaError."""
    if (
        isinstance(size, bool)
        or not isinstance(size, int)
        or size < 16
        or size > 256
        or (size & (size - 1))
    ):
        raise AttncodaError(
            f"{name} must be a power of two from 16 to 256 (a Triton block), got {size!r}"
        )
    return size


@dataclasses.dataclass(frozen=True)
class Planned:
    """A layer's launch of the fused kernel, decided once (:func:`plan_launch`).

    Attributes
    ----------
    geometry : SinkGeometry
        Where the sink keys are.
    variant : Variant
        The compile-time switches of the layer's mask, scores and sinks.
    config : LaunchConfig
        The blocks, warps, stages and dot precision of the launch table's entry.
    """

    geometry: SinkGeometry
    variant: Variant
    config: LaunchConfig


def plan_launch(query, shape: MaskShape, geometry: SinkGeometry, softcap, s_aux, learned: bool):
    """The :class:`Planned` launch of a layer (its variant, and :func:`launch_for` of its
    device, dtype and head dim), or the launch table's :class:`Refused`."""
    aux = s_aux is not None
    variant = Variant(
        causal=shape.causal, window=shape.window is not None, softcap=softcap is not None,
        aux_content=aux and not learned, aux_sink=aux and learned, sparse=geometry.sparse,
    )  # fmt: skip
    config = launch_for(query.device, query.dtype, query.shape[-1], variant.heavy)
    return config if isinstance(config, Refused) else Planned(geometry, variant, config)


def triton_attention(  # params: a layer and the blocks a test sets # long: its docs
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    scaling: float,
    sink: torch.Tensor,
    shape: MaskShape,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    learned: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
    planned: Planned | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Attention output and compositional row statistics from one pass of the fused kernel.

    Parameters
    ----------
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``: float32, bfloat16 or float16, on CUDA (or on
        the CPU under ``TRITON_INTERPRET=1``).
    key, value : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention
        (head ``i`` reads key/value head ``i // (head // kv_head)``).
    scaling : float
        Score scale.
    sink : torch.Tensor
        bool ``(batch, key_pos)``: the sink token keys of each document.
    shape : MaskShape
        The keys each query sees (:func:`attncoda.capture.kernels.mask_shape`).
    softcap : float, optional
        Gemma 2's logit soft-cap ``c``: scores ``tanh(z / c) c``.
    s_aux : torch.Tensor, optional
        ``(head,)``: GPT-OSS learned sink logits, a virtual key every query sees.
    learned : bool
        Whether that virtual key is in the sink set ``S`` (``sink="learned"``); otherwise it
        is a content key.
    block_m, block_n : int, optional
        Queries and keys per block (powers of two from 16 to 256); by default the launch
        table's (:func:`launch_for`).
    planned : Planned, optional
        The layer's sink geometry, variant and launch configuration as decided once
        (:func:`prepare`); computed here otherwise.

    Returns
    -------
    output : torch.Tensor
        ``(batch, head, query_pos, head_dim)`` in the query's dtype: a view of a contiguous
        ``(batch, query_pos, head, head_dim)`` tensor, the layout the model reads next.
    stats : dict
        ``(batch, head, query_pos)`` tensors as :func:`attncoda.capture.kernels.sdpa_attention`
        returns them (:data:`attncoda.capture.kernels.FAST_STATISTICS`); ``n_keys`` counts the
        virtual key. Float statistics in float64, nats.

    Raises
    ------
    KernelRefused
        The launch table refuses the layer's (architecture, dtype, head dim).
    AttncodaError
        A head dim above 256, a block that is not a power of two from 16 to 256, or a grid
        beyond CUDA's limits (``batch * head`` above ``2**31 - 1`` on axis 0, query blocks
        above 65,535 on axis 1).
    """
    interpreted = interpreting()
    triton, kernel = compiled(interpreted)
    b, h, q_len, d = query.shape
    device = query.device
    if d > MAX_HEAD_DIM:
        raise AttncodaError(f"the fused kernel takes head dims up to {MAX_HEAD_DIM}; got {d}")
    if planned is None:
        geometry = sink_geometry(sink.to(device), shape)
        found = plan_launch(query, shape, geometry, softcap, s_aux, learned)
        if isinstance(found, Refused):
            raise KernelRefused(found.why)
        planned = found
    config = dataclasses.replace(
        planned.config,
        block_m=_checked_block(block_m or planned.config.block_m, "block_m"),
        block_n=_checked_block(block_n or planned.config.block_n, "block_n"),
    )
    # batch x heads on grid axis 0 (up to 2**31 - 1), query blocks on axis 1 (up to 65,535).
    q_blocks = triton.cdiv(q_len, config.block_m)
    if b * h > 2**31 - 1 or q_blocks > 65_535:
        raise AttncodaError(
            f"the fused kernel's grid is ({b * h}, {q_blocks}) for batch x heads {b} x {h} and "
            f"{q_len} queries in blocks of {config.block_m}: CUDA allows up to 2**31 - 1 and "
            f"65,535; use a larger block_m or kernel='sdpa'"
        )
    launch = Launch(
        query, key, value, shape, planned.geometry, scaling=scaling, softcap=softcap,
        s_aux=s_aux, variant=planned.variant, config=config, interpreted=interpreted,
    )  # fmt: skip
    positional, keywords = launch_arguments(launch)
    # Launched on the layer's own device (a layer on cuda:1 under a device map), not on
    # whichever device is current.
    guard = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with guard:
        kernel[(b * h, q_blocks)](*positional, **keywords)
    return launch.out, _statistics(launch, s_aux, learned)


def _statistics(launch: Launch, s_aux, learned: bool) -> dict[str, torch.Tensor]:
    """The float64 statistics of a finished launch, from what the kernel wrote (as on the
    two-call path: :func:`attncoda.capture.stats.split_rows`)."""
    f64 = torch.float64
    b, h, q_len, _ = launch.query.shape
    z_sink = launch.z_sink.to(f64)
    in_sink = torch.isfinite(z_sink)
    if s_aux is not None and learned:
        logit = launch.aux.to(f64)[None, :, None, None].expand(b, h, q_len, 1)
        z_sink = torch.cat([z_sink, logit], -1)
        in_sink = torch.cat([in_sink, torch.ones_like(in_sink[..., :1])], -1)
    k = in_sink.sum(-1)
    n = launch.shape.seen_keys(q_len, launch.key.shape[2]).to(launch.query.device)
    n = n[:, None, :] + int(s_aux is not None)
    _, _, stats = split_rows(
        z_sink,
        in_sink,
        k,
        n.expand(b, h, q_len),
        ContentSummary(*(launch.rows[name].to(f64) for name in ("lse", "ent", "sum_z"))),
    )
    return stats


def _not_covered(query, module) -> str | None:
    """Why a layer cannot take the fused kernel (None when it can): the reason said.
    Its dtypes are declared (:mod:`attncoda.capture.kernels.triton`) and checked by the
    registry before this."""
    if query.shape[-1] > MAX_HEAD_DIM:
        return f"head dim {query.shape[-1]} (above {MAX_HEAD_DIM})"
    if getattr(module, "reorder_and_upcast_attn", False):
        return "GPT-2's reorder_and_upcast_attn"
    return None


def prepare(call, check=None):
    """Whether the fused kernel serves a routed layer (:class:`attncoda.capture.kernels.
    LayerCall`), decided once: the call with its :class:`Planned` launch as ``launch``, or
    why not (said once per pass by the kernel's note): a mask without a :class:`MaskShape`
    or with a bias, a configuration the launch table refuses, or (``""``: it says so
    itself) one that fails the first-use ``check``. The two-call SDPA path then serves the
    layer, or the exact one for what that path does not cover.
    """
    query, shape = call.query, call.shape
    reason = _not_covered(query, call.module)
    if reason is not None:
        return reason
    if not call.mask[2]:
        return "masks that carry a bias"
    if shape is None:
        return "this mask (not causal, padding and sliding-window)"
    softcap = call.softcap
    planned = plan_launch(query, shape, call.geometry, softcap, call.s_aux, call.plan.learned)
    if isinstance(planned, Refused):
        return planned.why
    variant = planned.variant
    if check is not None and check(
        query.device, query.dtype, query.shape[-1], causal=shape.causal, window=shape.window,
        softcap=softcap, aux_content=variant.aux_content, aux_sink=variant.aux_sink,
        sparse=variant.sparse,
    ) is not None:  # fmt: skip
        return ""  # said once by the check; SDPA serves the configuration
    return dataclasses.replace(call, launch=planned)
