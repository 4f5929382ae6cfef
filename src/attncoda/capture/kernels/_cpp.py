"""The ``cpp`` kernel: one flash-style pass per layer on the CPU, its statistics riding the
output's rescaling (docs/design.md, "The fused CPU kernel").

The fast path needs, over each query's content keys ``C`` (the keys it sees, less the
sinks), the output ``o_C = E_q[v]``, the log-sum-exp ``lse_C`` and ``E_q[z]`` (``H(q) =
lse_C - E_q[z]``). The C++ source beside this module (``_cpp.cpp``) takes them in one pass
of a flash-style loop over key blocks: the score product, then per row the running maximum
``m``, ``l = sum exp(z - m)`` and ``t = sum exp(z - m) z``, both rescaled when ``m`` grows,
as the output is; its work is the work of a forward's attention and one multiply-add a
score. What it sees is described by a :class:`attncoda.capture.kernels.MaskShape` (each
document's run of real keys, causal rows, a sliding window) and each document's sink keys,
so no mask tensor is built or read, and key blocks outside a window are skipped. The sink
keys' scores, the float64 statistics and the output follow here (:func:`cpp_attention`), as
for the other kernels (:func:`attncoda.capture.stats.split_rows`). Every tensor the C++
reads is checked here first (:func:`_arguments`: shapes, dtypes, device, index ranges), so
a malformed mask or sink list is an :class:`AttncodaError` and never an out-of-bounds read;
the C++ checks the same again, cheaply, as a second line.

The source is built on first use through :func:`torch.utils.cpp_extension.load`, with
torch's own cache of extensions (``TORCH_EXTENSIONS_DIR``, by default under
``~/.cache/torch_extensions``), for the build :func:`vector_width` names (:data:`FLAGS`:
AVX-512, AVX2 and FMA, or ``default``, portable: ``ATEN_CPU_CAPABILITY`` capped by the
CPU); its exp is ATen's ``Vectorized<float>::exp`` and its products ATen's
``cpublas::brgemm``, both public interfaces of torch's C++ API. A build shows as progress
from when it starts (it takes 15 to 40 s), and a build lock a killed build left is
said and removed rather than waited on forever
(:mod:`attncoda.capture.kernels._cpp_host`). Where it cannot be built
(:func:`attncoda.capture.kernels._cpp_host.prerequisites`, read without torch: Linux
x86-64, torch 2.6 or later, a C++ compiler, ninja) ``"auto"`` takes the ``sdpa`` kernel
and ``kernel="cpp"`` is refused with the reason, before any build is tried; where a build
fails all the same, :func:`unavailable` says why, once, and the ``sdpa`` kernel serves.

Error bounds: the same IEEE float32 model as the ``sdpa`` kernel's
(:func:`attncoda.capture.kernels.fast_bounds`, docs/design.md "Error bounds"): float32 dot
products of ``d`` terms then the scaling, ``exp`` to one ulp (SLEEF's ``u10`` functions;
the ``default`` build's ``std::exp``, glibc's, is within one ulp too), a running maximum
with at most ``n`` rescalings of the partial sums, ``n``-term sums of positive terms, and
``t``, an ``n``-term sum of terms of size at most ``A`` rescaled alongside ``l``: within
the ``(4 m + d) u A`` the bound gives ``E_q[z]``.
"""

from __future__ import annotations

import functools
import math
import os
import sys

import torch

from attncoda._errors import AttncodaError

from ._cpp_host import (
    FLAGS,
    SOURCE,
    build_folder,
    clear_stale_lock,
    load_extension,
    ninja_folder,
    prerequisites,
    vector_width,
)
from ._masks import MaskShape

__all__ = [
    "FLAGS",
    "KV_BLOCK",
    "NAME",
    "Q_BLOCK",
    "SOURCE",
    "content_pass",
    "cpp_attention",
    "runs_here",
    "unavailable",
]

#: The extension's name in torch's cache (its build, :func:`vector_width`, appended).
NAME = "attncoda_cpp"
#: Query positions per block (times the heads that share a key/value head: the rows of one
#: score product) and keys per block.
Q_BLOCK, KV_BLOCK = 128, 512


@functools.cache
def _library():
    """The built extension, or why it cannot be had here (a clause). Nothing is built where
    :func:`prerequisites` refuses (torch older than 2.6 included); a stale build lock is
    removed first (:func:`clear_stale_lock`)."""
    why = prerequisites()
    if why is not None:
        return why
    width = vector_width()
    name = f"{NAME}_{width}"
    folder = ninja_folder()
    path = os.environ.get("PATH", "")
    if folder is not None and folder not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([folder, path])
    try:
        where = build_folder(name)
        clear_stale_lock(where)
        return load_extension(name, width, where)
    except Exception as error:  # a compiler's or linker's message: said once, sdpa serves
        said = [line for line in str(error).splitlines() if "error" in line.lower()]
        return f"it did not build ({(said or [type(error).__name__])[0].strip()[:200]})"


def unavailable() -> str | None:
    """Why the pass cannot run here (a clause), or None once it is built and loaded.

    The first call builds it when torch's cache of extensions does not hold it (15 to 40 s).
    """
    library = _library()
    return library if isinstance(library, str) else None


@functools.cache
def _say(why: str) -> None:
    print(f"note: the cpp kernel cannot run here: {why}; the sdpa kernel serves", file=sys.stderr)


def _loaded():
    """The built extension; an error that says why where it cannot be had here."""
    library = _library()
    if isinstance(library, str):
        raise AttncodaError(f"kernel='cpp' cannot run here: {library}; use kernel='sdpa'")
    return library


#: The dtypes of the layer's tensors the pass takes (each copied to float32).
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
#: The dtypes of index tensors it takes (each copied to int64).
_INTEGERS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _check_layer(query, key, value) -> None:
    """Refuse a layer the pass would misread: 4-d CPU tensors in a dtype of
    :data:`_FLOATS`, keys and values of one shape, the query's batch and head dim, heads
    that share the key/value heads evenly, no more queries than keys, nothing empty."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4:
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor)
            raise AttncodaError(
                f"kernel='cpp' takes {name} as a 4-d tensor (batch, head, position, "
                f"head_dim); got {got}: pass the layer's {name} as the attention function "
                "receives it"
            )
        if tensor.device.type != "cpu":
            raise AttncodaError(
                f"kernel='cpp' runs on the cpu; got {name} on {tensor.device}: use "
                "kernel='auto', or move the layer to the cpu"
            )
        if tensor.dtype not in _FLOATS:
            raise AttncodaError(
                f"kernel='cpp' takes float32, bfloat16 or float16 tensors; got {name} in "
                f"{tensor.dtype}: use kernel='sdpa'"
            )
        if tensor.numel() == 0:
            raise AttncodaError(
                f"kernel='cpp' takes non-empty tensors; got {name} of shape "
                f"{tuple(tensor.shape)}: leave empty layers out"
            )
    b, h, q_len, d = query.shape
    _, kv, k_len, _ = key.shape
    if tuple(value.shape) != tuple(key.shape) or key.shape[0] != b or key.shape[3] != d:
        raise AttncodaError(
            f"kernel='cpp' takes keys and values of shape (batch, kv_head, key_pos, "
            f"head_dim) with the query's batch and head_dim; got query {tuple(query.shape)}, "
            f"key {tuple(key.shape)} and value {tuple(value.shape)}: pass the layer's own, "
            "unexpanded"
        )
    if h % kv:
        raise AttncodaError(
            f"{h} query heads do not share {kv} key/value heads evenly: each key/value head "
            "must serve the same number of query heads"
        )
    if q_len > k_len:
        raise AttncodaError(
            f"kernel='cpp' aligns the queries with the last keys; got {q_len} queries and "
            f"{k_len} keys: pass every key the queries see (a cache's keys included)"
        )


def _index(name: str, tensor, sizes: tuple[int | None, ...], low: int, high: int):
    """``tensor`` as the pass reads it: int64, contiguous, on the CPU, of ``sizes`` (None:
    any size), each value in ``[low, high]``; refused otherwise, naming it as ``name``."""
    found = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else None
    if (
        found is None
        or len(found) != len(sizes)
        or any(size is not None and size != got for size, got in zip(sizes, found, strict=True))
    ):
        shape = ", ".join("any" if size is None else str(size) for size in sizes)
        shape = f"({shape},)" if len(sizes) == 1 else f"({shape})"
        got = found if found is not None else type(tensor).__name__
        raise AttncodaError(
            f"kernel='cpp' takes {name} of shape {shape}; got {got}: give one row per "
            "document of the batch"
        )
    if tensor.dtype not in _INTEGERS or tensor.device.type != "cpu":
        raise AttncodaError(
            f"kernel='cpp' takes {name} as integers on the cpu; got {tensor.dtype} on "
            f"{tensor.device}: build it from the layer's mask on the cpu"
        )
    values = tensor.to(torch.int64).contiguous()
    if values.numel() and (int(values.min()) < low or int(values.max()) > high):
        bad = values[(values < low) | (values > high)][0]
        raise AttncodaError(
            f"kernel='cpp' takes {name} in [{low}, {high}]; got {int(bad)}: give key "
            "positions of the layer's keys"
        )
    return values


def _runs(query, key, value, shape: MaskShape) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer checked (:func:`_check_layer`) and its mask's shape: each document's run
    of real keys ``0 <= lo <= hi <= key_pos`` as int64 ``(batch,)`` tensors, and a sliding
    window of at least one key, or none."""
    _check_layer(query, key, value)
    b, k_len = query.shape[0], key.shape[2]
    lo = _index("MaskShape.lo", shape.lo, (b,), 0, k_len)
    hi = _index("MaskShape.hi", shape.hi, (b,), 0, k_len)
    if bool((lo > hi).any()):
        doc = int((lo > hi).nonzero()[0, 0])
        raise AttncodaError(
            f"kernel='cpp' takes runs of keys with lo <= hi; document {doc} has lo "
            f"{int(lo[doc])} and hi {int(hi[doc])}: give each document's first real key "
            "and one past its last"
        )
    window = shape.window
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise AttncodaError(
            f"kernel='cpp' takes a sliding window of a whole number of keys; got {window!r}: "
            "pass an int, or None for no window"
        )
    if window is not None and window < 1:
        raise AttncodaError(
            f"kernel='cpp' takes a sliding window of at least one key; got {window}: pass "
            "None for no window"
        )
    return lo, hi


def _arguments(query, key, value, shape: MaskShape, sinks, scale: float) -> tuple:
    """The pass's arguments, each checked here, where a refusal can say what to do (the
    C++ checks them again, cheaply, as a second line): the layer's tensors in float32 with
    a last stride of 1 (a bfloat16 or float16 layer's statistics are float32 computations
    of its own queries and keys); the runs of keys (:func:`_runs`) and each document's
    distinct sink keys (``-1``: none), int64; the mask's flags and a finite scale."""
    lo, hi = _runs(query, key, value, shape)
    b, k_len = query.shape[0], key.shape[2]
    columns = _index("sinks", sinks, (b, None), -1, k_len - 1)
    ordered = columns.sort(dim=1).values
    if bool(((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any()):
        raise AttncodaError(
            f"kernel='cpp' takes each document's sink keys once; got {columns.tolist()}: "
            "list each sink key once, -1 for an unused column"
        )
    if not math.isfinite(float(scale)):
        raise AttncodaError(
            f"kernel='cpp' takes a finite score scale; got {scale}: pass the layer's scaling"
        )
    tensors = []
    for tensor in (query, key, value):
        tensor = tensor if tensor.dtype == torch.float32 else tensor.to(torch.float32)
        tensors.append(tensor if tensor.stride(-1) == 1 else tensor.contiguous())
    return (
        *tensors, lo, hi, columns, bool(shape.causal), shape.window or 0, float(scale),
        Q_BLOCK, KV_BLOCK,
    )  # fmt: skip


def content_pass(query, key, value, shape: MaskShape, sinks, scale: float):
    """``(o_C, lse_C, E_q[z])`` of every query over its content keys, in one pass (the
    pass alone, which :func:`cpp_attention` goes on from; what tests and benchmarks time).

    Parameters
    ----------
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``.
    key, value : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention
        (head ``i`` reads key/value head ``i // group``).
    shape : MaskShape
        The keys each query sees: ``lo <= j < hi``, causal, a sliding window.
    sinks : torch.Tensor
        ``(batch, width)``: each document's sink keys, left out (``-1``: none).
    scale : float
        The score scale.

    Returns
    -------
    tuple of torch.Tensor
        float32 ``(batch, head, query_pos, head_dim)``, ``(batch, head, query_pos)`` and
        ``(batch, head, query_pos)``: ``E_q[v]``, ``lse_C`` and ``E_q[z]`` in nats. A row
        that sees no content key gets zeros, ``-inf`` and 0.
    """
    library = _loaded()
    return tuple(library.content_pass(*_arguments(query, key, value, shape, sinks, scale)))


def cpp_attention(query, key, value, *, scaling: float, sink, shape: MaskShape):
    """Attention output and compositional row statistics from one pass of the kernel and
    its epilogue: each row's sink keys, statistics and output, in C++ and in the steps of
    :func:`attncoda.capture.stats.split_rows` (the one definition; float64 from the pass's
    float32 ``lse_C`` and ``E_q[z]``).

    Parameters
    ----------
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``: float32, bfloat16 or float16.
    key, value : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention.
    scaling : float
        Score scale.
    sink : torch.Tensor or SinkGeometry
        bool ``(batch, key_pos)``: the sink keys of each document; or where they fall in
        ``shape`` (:func:`attncoda.capture.kernels.sink_geometry`), when the caller has it
        (one per forward pass).
    shape : MaskShape
        The keys each query sees.

    Returns
    -------
    output : torch.Tensor
        ``(batch, head, query_pos, head_dim)`` in the query's dtype: a view of a contiguous
        ``(batch, query_pos, head, head_dim)`` tensor, the layout the model reads next.
    stats : dict
        ``(batch, head, query_pos)`` tensors as :func:`attncoda.capture.kernels.
        sdpa_attention` returns them (:data:`attncoda.capture.kernels.FAST_STATISTICS`):
        ``n_keys``, ``n_sink`` (int64) and the float statistics in float64, nats.
    """
    from ._sdpa import FAST_STATISTICS
    from ._sink_tiles import SinkGeometry, sink_geometry

    library = _loaded()
    geometry = sink
    if not isinstance(geometry, SinkGeometry):
        _runs(query, key, value, shape)  # what sink_geometry reads, checked first
        b, k_len = query.shape[0], key.shape[2]
        if (
            not isinstance(sink, torch.Tensor)
            or sink.dtype != torch.bool
            or tuple(sink.shape) != (b, k_len)
        ):
            got = (sink.dtype, tuple(sink.shape)) if isinstance(sink, torch.Tensor) else sink
            raise AttncodaError(
                f"kernel='cpp' takes sink as bool of shape ({b}, {k_len}); got {got}: mark "
                "each document's sink keys, one row per document"
            )
        geometry = sink_geometry(sink, shape)
    sinks = geometry.columns.masked_fill(geometry.valid == 0, -1)
    out, *stats = library.attention(*_arguments(query, key, value, shape, sinks, scaling))
    return out.to(query.dtype).transpose(1, 2), dict(zip(FAST_STATISTICS, stats, strict=True))


def runs_here() -> bool:
    """Whether the pass can run here (:func:`unavailable`); where it cannot, why is said
    once per process, and the ``sdpa`` kernel serves."""
    why = unavailable()
    if why is not None:
        _say(why)
    return why is None
