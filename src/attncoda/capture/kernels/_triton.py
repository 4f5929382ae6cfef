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
the two-call SDPA path with a printed note (:func:`record_layer`); so does a float64 input,
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
import sys

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.stats import split_rows

from ._configs import LaunchConfig, Refused, Variant, architecture_of, launch_config
from ._launch import Launch, launch_arguments
from ._masks import MaskShape, layer_shape
from ._record import record_rows, store
from ._sink_tiles import SinkGeometry, per_forward_geometry, sink_geometry
from ._triton_jit import compiled, interpreting

__all__ = [
    "MAX_HEAD_DIM",
    "KernelRefused",
    "architecture",
    "launch_for",
    "note",
    "record_layer",
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
    path serves it (:func:`record_layer` prints a note)."""


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


def triton_attention(
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
    geometry: SinkGeometry | None = None,
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
    geometry : SinkGeometry, optional
        :func:`sink_geometry` of ``sink`` and ``shape``, when the caller has it (one per
        forward pass); computed here otherwise.

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
    f64 = torch.float64
    b, h, q_len, d = query.shape
    k_len = key.shape[2]
    device = query.device
    if d > MAX_HEAD_DIM:
        raise AttncodaError(f"the fused kernel takes head dims up to {MAX_HEAD_DIM}; got {d}")
    if geometry is None:
        geometry = sink_geometry(sink.to(device), shape)
    variant = _variant(shape, softcap, s_aux, learned, geometry)
    config = launch_for(device, query.dtype, d, variant.heavy)
    if isinstance(config, Refused):
        raise KernelRefused(config.why)
    config = dataclasses.replace(
        config,
        block_m=_checked_block(block_m or config.block_m, "block_m"),
        block_n=_checked_block(block_n or config.block_n, "block_n"),
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
        query, key, value, shape, geometry, scaling=scaling, softcap=softcap, s_aux=s_aux,
        variant=variant, config=config, interpreted=interpreted,
    )  # fmt: skip
    positional, keywords = launch_arguments(launch)
    # Launched on the layer's own device (a layer on cuda:1 under a device map), not on
    # whichever device is current.
    guard = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with guard:
        kernel[(b * h, q_blocks)](*positional, **keywords)

    z_sink = launch.z_sink.to(f64)
    in_sink = torch.isfinite(z_sink)
    if s_aux is not None and learned:
        logit = launch.aux.to(f64)[None, :, None, None].expand(b, h, q_len, 1)
        z_sink = torch.cat([z_sink, logit], -1)
        in_sink = torch.cat([in_sink, torch.ones_like(in_sink[..., :1])], -1)
    k = in_sink.sum(-1)
    n = shape.seen_keys(q_len, k_len).to(device)[:, None, :] + int(s_aux is not None)
    _, _, stats = split_rows(
        z_sink,
        in_sink,
        k,
        n.expand(b, h, q_len),
        launch.rows["lse"].to(f64),
        launch.rows["ent"].to(f64),
        launch.rows["sum_z"].to(f64),
    )
    return launch.out, stats


def _variant(shape: MaskShape, softcap, s_aux, learned: bool, geometry: SinkGeometry) -> Variant:
    """The kernel variant of a layer: its mask's, scores' and sinks' compile-time switches."""
    aux = s_aux is not None
    return Variant(
        causal=shape.causal, window=shape.window is not None, softcap=softcap is not None,
        aux_content=aux and not learned, aux_sink=aux and learned, sparse=geometry.sparse,
    )  # fmt: skip


def note(recorder, reason: str) -> None:
    """Print, once per capture and reason, that a layer left the fused kernel."""
    said = recorder.fast_cache.setdefault("fused_notes", set())
    if reason not in said:
        said.add(reason)
        print(
            f"note: the fused Triton kernel does not cover {reason}: those layers take the "
            f"two-call SDPA path (the exact path where that does not apply)",
            file=sys.stderr,
        )


def _not_covered(query, module) -> str | None:
    """Why a layer cannot take the fused kernel (None when it can): the reason printed.
    Its dtypes are declared (:mod:`attncoda.capture.kernels.triton`) and checked by the
    registry before this."""
    if query.shape[-1] > MAX_HEAD_DIM:
        return f"head dim {query.shape[-1]} (above {MAX_HEAD_DIM})"
    if getattr(module, "reorder_and_upcast_attn", False):
        return "GPT-2's reorder_and_upcast_attn"
    return None


def record_layer(call, check=None):
    """The fused kernel on one routed layer's call (:class:`attncoda.capture.kernels.
    LayerCall`): statistics into its recorder; the output.

    Returns ``attn_output`` ``(batch, query_pos, head, head_dim)``, or None (after a printed
    note) when the layer's mask has no :class:`attncoda.capture.kernels.MaskShape` or carries
    a bias: the caller then takes the two-call SDPA path, or the exact one for what that path
    does not cover.
    """
    recorder, layer, module, query = call.recorder, call.layer, call.module, call.query
    key, value, attention_mask, scaling = call.key, call.value, call.attention_mask, call.scaling
    kwargs = call.kwargs
    reason = _not_covered(query, module)
    if reason is not None:
        note(recorder, reason)
        return None
    b, h, q_len, _ = query.shape
    k_len = key.shape[2]
    shape, ok = layer_shape(
        recorder, module, attention_mask, b, q_len, k_len, call.window, query.device
    )
    if not ok:
        note(recorder, "masks that carry a bias")
        return None
    if shape is None:
        note(recorder, "this mask (not causal, padding and sliding-window)")
        return None
    softcap, s_aux = kwargs.get("softcap"), kwargs.get("s_aux")
    geometry = per_forward_geometry(recorder, shape, query.device)
    variant = _variant(shape, softcap, s_aux, recorder.learned, geometry)
    config = launch_for(query.device, query.dtype, query.shape[-1], variant.heavy)
    if isinstance(config, Refused):
        note(recorder, config.why)
        return None
    if check is not None:
        why = check(
            query.device, query.dtype, query.shape[-1], causal=shape.causal,
            window=shape.window, softcap=softcap,
            aux_content=s_aux is not None and not recorder.learned,
            aux_sink=s_aux is not None and recorder.learned, sparse=geometry.sparse,
        )  # fmt: skip
        if why is not None:  # printed once by the check; SDPA serves the configuration
            return None
    try:
        out, stats = triton_attention(
            query,
            key,
            value,
            scaling=scaling,
            sink=recorder.sink,
            shape=shape,
            softcap=softcap,
            s_aux=s_aux,
            learned=recorder.learned,
            geometry=geometry,
        )
    except KernelRefused as refused:
        note(recorder, str(refused))
        return None
    store(recorder, layer, stats)
    record_rows(
        recorder, layer, query, key, scaling, shape.seen_by_doc(q_len, k_len), upcast=True,
        softcap=softcap, s_aux=s_aux,
    )  # fmt: skip
    return out.transpose(1, 2)
