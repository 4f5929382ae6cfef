"""The fused kernel compiled for a CUDA target without a GPU (docs/design.md, "GPU kernels
before a GPU"): what ``bench/gpu_compile.py`` and ``tests/capture/kernels/test_gpu_compile.py``
compile with.

:func:`compile_offline` compiles one entry of the launch table for a target on any machine
(Triton's ``GPUTarget``, the ptxas inside the triton wheel) and reads its shared memory,
registers and spills.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

from attncoda.capture.kernels._configs import FP_FUSION, LaunchConfig, constants

__all__ = ["compile_offline", "compiled_kernels", "example_arguments", "warm"]

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


def example_arguments(
    dtype: str,
    head_dim: int,
    q_len: int = 4096,
    heads: int = 32,
    kv_heads: int = 8,
    n_sink: int = 1,
) -> list:
    """Positional arguments of a launch as the launcher makes them, tensors as dtypes
    (Triton's ``MockTensor``: aligned pointers): queries, keys and values as transformers
    hands them over, ``(batch, head, position, head_dim)`` views of
    ``(batch, position, head, head_dim)``; the output the same, in the inputs' dtype; the
    per-row outputs contiguous float32."""
    import torch

    types = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    data = types[dtype]
    f32, i32, i8 = torch.float32, torch.int32, torch.int8
    q_strides = (q_len * heads * head_dim, head_dim, heads * head_dim, 1)
    kv_strides = (q_len * kv_heads * head_dim, head_dim, kv_heads * head_dim, 1)
    out_strides = q_strides  # written in the model's (batch, position, head, head_dim)
    return [
        data, data, data, i32, i8, i8, i8, i32, i32, i32, f32,
        data, f32, f32, f32, f32,
        *q_strides, *kv_strides, *kv_strides, *out_strides,
        heads, heads // kv_heads, q_len, q_len, 0, 0, n_sink, -(-q_len // 64), head_dim,
        head_dim**-0.5, 1.0,
    ]  # fmt: skip


def warm(arch: str, arguments: list, constexprs: dict, config: LaunchConfig):
    """Compile the kernel for ``arch`` through its own launch path (``warmup``), on
    :class:`_OfflineDriver`: the ``CompiledKernel``, from the kernel's cache when these
    arguments specialise as an earlier call's did."""
    import triton

    kernel = _kernel()
    capability = int(arch.removeprefix("sm_"))
    drivers = triton.runtime.driver
    # What was active before (None until a driver is first asked for: on a machine
    # without a GPU, asking would fail), restored after.
    previous = getattr(drivers, "_active", None)
    drivers.set_active(_OfflineDriver(capability))
    try:
        return kernel.warmup(
            *arguments,
            grid=(1,),
            **constexprs,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            enable_fp_fusion=FP_FUSION,
        )
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


def compile_offline(arch: str, dtype: str, head_dim: int, flags, config: LaunchConfig) -> dict:
    """Compile the fused kernel for ``arch`` without a GPU and measure it.

    The compile takes the kernel's own launch path (:func:`warm`) on the arguments of a
    Llama-3-8B-shaped layer (:func:`example_arguments`), so it specialises as a launch on
    a GPU would.

    Parameters
    ----------
    arch : str
        ``"sm_80"``, ``"sm_86"``, ``"sm_89"`` or ``"sm_90"``.
    dtype : str
        ``"float32"``, ``"bfloat16"`` or ``"float16"``.
    head_dim : int
        Up to 256.
    flags : iterable of str
        A subset of :data:`FLAGS`.
    config : LaunchConfig

    Returns
    -------
    dict
        ``shared_bytes`` (the kernel's shared memory per block), ``registers`` per thread,
        ``spill_bytes`` (spill stores plus spill loads, per thread, from ptxas ``-v``),
        ``seconds`` (the compile) and ``ttir`` (Triton's IR of it, for inspection).
    """
    started = time.perf_counter()
    binary = warm(
        arch,
        example_arguments(dtype, head_dim),
        constants(dtype, head_dim, flags, config),
        config,
    )
    seconds = time.perf_counter() - started
    registers, spills = _ptxas_report(binary.asm["ptx"], arch)
    return {
        "shared_bytes": int(binary.metadata.shared),
        "registers": registers,
        "spill_bytes": spills,
        "seconds": seconds,
        "ttir": binary.asm["ttir"],
    }
