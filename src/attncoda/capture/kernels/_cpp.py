"""The ``cpp`` kernel: one fused pass per layer on the CPU, over the values ``[V | K]``.

The fast path needs, over each query's content keys, the output ``o_C = E_q[v]``, the
weighted key ``E_q[k]`` (for ``E_q[z] = scaling * query . E_q[k]``) and the log-sum-exp
``lse_C`` (docs/design.md, "The fast path"). The ``sdpa`` kernel gets them from two calls of
PyTorch's CPU flash attention, which computes every score twice, because that op refuses a
value width unlike the key's. This kernel computes each score once: its C++ source
(``_cpp.cpp``, beside this module) multiplies the probabilities by ``[V | K]``, a value
width of ``2 d`` at the key width ``d``. What follows the pass (the sink scores, the float64
statistics, the output) is :func:`attncoda.capture.kernels.sdpa_attention`'s, unchanged.

The source is compiled on first use with the C++ compiler found here
(:func:`attncoda.capture.kernels._cpp_host.compiler`: ``$CXX``, else ``c++``, ``g++`` or
``clang++``) for x86-64 with AVX2 and FMA, and linked against the ``libtorch_cpu`` of the
installed torch, whose BLAS ``sgemm_`` and SLEEF ``Sleef_expf8_u10``
it calls. The library is cached under the attncoda cache folder
(:func:`attncoda.models.load.cache_dir`, ``kernels/``), keyed by the source, the flags,
torch's version and library folder and the compiler, so a change of any rebuilds it; it is
written to a temporary name and renamed, so processes building at once do not collide.
Where it cannot be built (:func:`attncoda.capture.kernels._cpp_host.prerequisites`, read without
torch) ``"auto"`` takes the ``sdpa`` kernel and ``kernel="cpp"`` is refused with the reason;
where a build or load fails all the same, :func:`unavailable` says why, once, and the
``sdpa`` kernel serves.

Error bounds: the same IEEE float32 model as the ``sdpa`` kernel's, so the same bounds
(:func:`attncoda.capture.kernels.fast_bounds`, docs/design.md "Error bounds"): float32 dot
products of ``d`` terms then the scaling (sgemm's ``alpha``), ``exp`` to one ulp (SLEEF's
``u10`` functions have a maximum error of 1.0 ulp), a running maximum with at most ``n``
rescalings of the partial sums, ``n``-term sums of positive terms, one division and one log
per row, and the weighted key sum accumulated alongside the output.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from attncoda._errors import AttncodaError

from ._cpp_host import compiler, prerequisites, torch_library
from ._sdpa import record_layer as _record_layer

__all__ = ["FLAGS", "KV_BLOCK", "Q_BLOCK", "SOURCE", "content_pass", "record_layer", "unavailable"]

#: The C++ source of the pass.
SOURCE = Path(__file__).with_name("_cpp.cpp")
#: The compiler's flags: x86-64 with AVX2 and FMA (which :func:`prerequisites` checks the CPU
#: has), OpenMP for the threads (torch's own ``libgomp``, found through the rpath).
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-fPIC", "-shared", "-std=c++17")
#: Query positions per block (times the heads that share a key/value head: the rows of one
#: score product) and keys per block. Measured on one SmolLM2-shaped layer at L = 8192 on a
#: 2-core AMD EPYC: blocks of 64 to 256 positions took the same time within 10%.
Q_BLOCK, KV_BLOCK = 128, 512
_I64, _PTR = ctypes.c_int64, ctypes.c_void_p
_STRIDES = ctypes.c_int64 * 3


def _folder() -> Path:
    from attncoda.models.load import cache_dir

    return cache_dir() / "kernels"


def _build(compiler: str, torch_lib: Path) -> Path:
    """The compiled library, built here unless the cache holds it."""
    source = SOURCE.read_bytes()
    said = [" ".join(FLAGS), torch.__version__, str(torch_lib), compiler]
    key = hashlib.sha256(b"\0".join([source, *(part.encode() for part in said)])).hexdigest()[:16]
    folder = _folder()
    target = folder / f"cpp-attention-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=target.stem, suffix=".so.partial", dir=folder)
    os.close(handle)
    command = [
        compiler, *FLAGS, str(SOURCE), "-o", partial, f"-L{torch_lib}", "-ltorch_cpu",
        f"-Wl,-rpath,{torch_lib}",
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The loaded library, or why it cannot be had here (a clause)."""
    why = prerequisites()
    if why is not None:
        return why
    cxx, torch_lib = compiler(), torch_library()
    assert cxx is not None and torch_lib is not None  # prerequisites() checked both
    try:
        path = _build(cxx, torch_lib)
    except subprocess.CalledProcessError as error:
        said = (error.stderr or "").strip().splitlines()
        return f"{cxx} did not compile it ({said[-1] if said else error})"
    except OSError as error:
        return f"it could not be built in {_folder()} ({error})"
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:
        return f"the built library does not load ({error})"
    function = library.attncoda_attention
    function.argtypes = [
        *[_PTR] * 6, *[_I64] * 7, *[ctypes.POINTER(_I64)] * 4, ctypes.c_int, ctypes.c_float,
        _I64, _I64, ctypes.c_int,
    ]  # fmt: skip
    function.restype = None
    return library


def unavailable() -> str | None:
    """Why the pass cannot run here (a clause), or None once its library is loaded.

    The first call builds the library when the cache does not hold it (a second or two).
    """
    library = _library()
    return library if isinstance(library, str) else None


@functools.cache
def _say(why: str) -> None:
    print(f"note: the cpp kernel cannot run here: {why}; the sdpa kernel serves", file=sys.stderr)


def _strides(tensor: torch.Tensor | None) -> ctypes.Array:
    if tensor is None:
        return _STRIDES(0, 0, 0)
    return _STRIDES(*(0 if size == 1 else stride for size, stride in
                      zip(tensor.shape[:3], tensor.stride()[:3], strict=True)))  # fmt: skip


def _last_contiguous(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.stride(-1) == 1 else tensor.contiguous()


def content_pass(query, key, value, mask, causal, scale):
    """``(o_C, E_q[k], lse_C)`` from one pass over the values ``[V | K]``.

    Parameters
    ----------
    query : torch.Tensor
        float32 ``(batch, head, query_pos, head_dim)``.
    key, value : torch.Tensor
        float32 ``(batch, kv_head, key_pos, head_dim)`` and ``(..., value_dim)``, unexpanded
        under grouped-query attention (head ``i`` reads key/value head ``i // group``).
    mask : torch.Tensor or None
        An additive float32 mask broadcastable to ``(batch, head, query_pos, key_pos)``
        (``-inf`` on the keys a query does not see), or None.
    causal : bool
        Query ``i`` sees keys ``0 .. i + key_pos - query_pos`` (on top of ``mask``).
    scale : float
        The score scale.

    Returns
    -------
    tuple of torch.Tensor
        ``E_q[v]`` ``(batch, head, query_pos, value_dim)``, ``E_q[k]``
        ``(..., head_dim)`` and ``lse_C`` ``(batch, head, query_pos)`` in nats, float32. A
        row that sees no key gets zeros and ``-inf``.
    """
    library = _library()
    if isinstance(library, str):
        raise AttncodaError(f"kernel='cpp' cannot run here: {library}; use kernel='sdpa'")
    for name, tensor in (("query", query), ("key", key), ("value", value), ("mask", mask)):
        if tensor is not None and tensor.dtype != torch.float32:
            raise AttncodaError(
                f"kernel='cpp' takes float32 tensors; got {name} in {tensor.dtype}: convert "
                "it with .float()"
            )
    b, h, q_len, d = query.shape
    kv, k_len = key.shape[1], key.shape[2]
    if h % kv:
        raise AttncodaError(
            f"{h} query heads do not share {kv} key/value heads evenly: each key/value head "
            "must serve the same number of query heads"
        )
    query, key = _last_contiguous(query), _last_contiguous(key)
    values = torch.cat([value, key], dim=-1)
    width = values.shape[-1]
    if mask is not None:
        mask = _last_contiguous(mask).expand(b, h, q_len, k_len)
    out = query.new_empty((b, h, q_len, width))
    lse = query.new_empty((b, h, q_len))
    library.attncoda_attention(
        query.data_ptr(), key.data_ptr(), values.data_ptr(),
        None if mask is None else mask.data_ptr(), out.data_ptr(), lse.data_ptr(),
        b, h, kv, q_len, k_len, d, width,
        _strides(query), _strides(key), _strides(values), _strides(mask),
        int(causal), scale, Q_BLOCK, KV_BLOCK, torch.get_num_threads(),
    )  # fmt: skip
    dv = value.shape[-1]
    return out[..., :dv], out[..., dv:], lse


#: The pass takes grouped keys and values (head ``i`` against key/value head ``i // group``).
content_pass.grouped = True  # type: ignore[attr-defined]


def record_layer(call):
    """The fast path of one routed layer's call through this kernel's pass
    (:func:`attncoda.capture.kernels._sdpa.record_layer` with its ``content_pass``);
    None, after a note printed once per process, where the pass cannot run."""
    why = unavailable()
    if why is not None:
        _say(why)
        return None
    return _record_layer(call, content_pass=content_pass)
