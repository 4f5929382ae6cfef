"""The fused kernel compiled for a CUDA target without a GPU (docs/design.md, "GPU kernels
before a GPU"): what ``bench/gpu_compile.py`` and ``tests/capture/kernels/test_gpu_compile.py``
compile with.

:func:`compile_offline` compiles one launch for a target on any machine (Triton's
``GPUTarget``, the ptxas inside the triton wheel) and reads its shared memory, registers
and spills. The compile takes the kernel's own launch path (``warmup``, on a stand-in
driver for the target) with the arguments the launcher makes
(:func:`attncoda.capture.kernels._launch.launch_arguments`) for a Llama-3-8B-shaped layer
whose tensors are on the meta device (:func:`llama_launch`), so it specialises as a launch
on a GPU would.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["compile_offline", "compiled_kernels", "llama_launch", "warm"]

_PTXAS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def _ptxas_report(ptx: str, arch: str, fp_fusion: bool = True) -> tuple[int, int]:
    """``(registers, spill bytes)``: ptxas from the triton wheel, ``-v``, on ``ptx``."""
    from triton.backends.nvidia import compiler

    capability = int(arch.removeprefix("sm_"))
    try:
        tool = compiler.get_ptxas(capability)
    except TypeError:  # Triton releases whose get_ptxas takes no architecture
        tool = compiler.get_ptxas()
    gpu = f"sm_{capability}a" if capability >= 90 else arch
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        command = [tool.path, "-v", f"--gpu-name={gpu}", str(source), "-o", str(source) + ".o"]
        if not fp_fusion:
            command.insert(1, "--fmad=false")
        log = subprocess.run(command, check=True, capture_output=True, text=True).stderr
    spills = _PTXAS.search(log)
    registers = _REGISTERS.search(log)
    stores, loads = (int(spills.group(1)), int(spills.group(2))) if spills else (0, 0)
    return (int(registers.group(1)) if registers else -1), stores + loads


def _kernel():
    """The fused kernel, decorated for compilation (not the interpreter)."""
    from attncoda.capture.kernels._triton_jit import compiled

    return compiled(False)[1]


class _OfflineDriver:
    """Triton's active driver for a CUDA target without a device: the kernel's own
    launch path (its argument binder, specialisation and cache) compiles without a GPU."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, 32)
        # A cache slot of its own per target, never a real device index.
        self.device = 10_000 + capability

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


def llama_launch(
    dtype: str,
    head_dim: int,
    variant,
    config,
    q_len: int = 4096,
    heads: int = 32,
    kv_heads: int = 8,
    n_sink: int = 1,
):
    """A launch of ``variant`` in ``config`` as the launcher makes it, on the meta device
    (dtypes, shapes and strides, no memory: aligned pointers): queries, keys and values as
    transformers hands them over, ``(batch, head, position, head_dim)`` views of
    ``(batch, position, head, head_dim)``, one document of ``q_len`` keys with ``n_sink``
    sink keys. The window, the soft-cap and the learned sinks' logits are left at the
    launcher's values without them (the kernel does not specialise on any of them; the
    variant's switches are compile-time)."""
    import torch

    from attncoda.capture.kernels._launch import Launch
    from attncoda.capture.kernels._masks import MaskShape
    from attncoda.capture.kernels._sink_tiles import SinkGeometry

    def meta(*size, dtype=torch.int32):
        return torch.empty(size, dtype=dtype, device="meta")

    data = getattr(torch, dtype)
    query = meta(1, q_len, heads, head_dim, dtype=data).transpose(1, 2)
    key = meta(1, q_len, kv_heads, head_dim, dtype=data).transpose(1, 2)
    value = meta(1, q_len, kv_heads, head_dim, dtype=data).transpose(1, 2)
    shape = MaskShape(meta(1), meta(1), variant.causal, None)
    geometry = SinkGeometry(
        columns=meta(1, n_sink), valid=meta(1, n_sink, dtype=torch.int8), prefix=meta(1),
        sparse=variant.sparse, is_sink=meta(1, q_len, dtype=torch.int8),
    )  # fmt: skip
    return Launch(
        query, key, value, shape, geometry, scaling=head_dim**-0.5, softcap=None, s_aux=None,
        variant=variant, config=config, interpreted=False,
    )  # fmt: skip


def warm(arch: str, launch):
    """Compile ``launch`` (:func:`llama_launch`) for ``arch`` through the kernel's own launch
    path (``warmup``), on :class:`_OfflineDriver`: the ``CompiledKernel``, from the kernel's
    cache when the launch specialises as an earlier one did."""
    import triton

    from attncoda.capture.kernels._launch import launch_arguments

    kernel = _kernel()
    positional, keywords = launch_arguments(launch)
    capability = int(arch.removeprefix("sm_"))
    drivers = triton.runtime.driver
    # What was active before (None until a driver is first asked for: on a machine
    # without a GPU, asking would fail), restored after.
    previous = getattr(drivers, "_active", None)
    drivers.set_active(_OfflineDriver(capability))
    try:
        return kernel.warmup(*positional, grid=(1,), **keywords)
    finally:
        if hasattr(drivers, "_active"):
            drivers._active = previous
        else:
            drivers.reset_active()


def compiled_kernels(arch: str) -> int:
    """How many compiled kernels the fused kernel's cache holds for ``arch`` (offline)."""
    kernel = _kernel()
    slot = _OfflineDriver(int(arch.removeprefix("sm_"))).device
    return len(kernel.device_caches[slot][0]) if slot in kernel.device_caches else 0


def compile_offline(arch: str, launch) -> dict:
    """Compile the fused kernel for ``arch`` without a GPU and measure it.

    Parameters
    ----------
    arch : str
        ``"sm_80"``, ``"sm_86"``, ``"sm_89"`` or ``"sm_90"``.
    launch : attncoda.capture.kernels._launch.Launch
        Its dtype, head dim, variant and launch configuration: :func:`llama_launch`.

    Returns
    -------
    dict
        ``shared_bytes`` (the kernel's shared memory per block), ``registers`` per thread,
        ``spill_bytes`` (spill stores plus spill loads, per thread, from ptxas ``-v``),
        ``seconds`` (the compile) and ``ttir`` (Triton's IR of it, for inspection).
    """
    started = time.perf_counter()
    binary = warm(arch, launch)
    seconds = time.perf_counter() - started
    registers, spills = _ptxas_report(binary.asm["ptx"], arch)
    return {
        "shared_bytes": int(binary.metadata.shared),
        "registers": registers,
        "spill_bytes": spills,
        "seconds": seconds,
        "ttir": binary.asm["ttir"],
    }
