"""What the ``cpp`` kernel needs of the machine that builds it, read without importing
torch: Linux x86-64, torch :data:`TORCH_FLOOR` or later, a C++ compiler and ninja, which
``torch.utils.cpp_extension`` builds with (:func:`prerequisites`); and which of its builds
the CPU takes (:func:`vector_width`: ATen's ``ATEN_CPU_CAPABILITY``, capped by the CPU's
flags). docs/design.md, "The fused CPU kernel". Both the declaration
(:mod:`attncoda.capture.kernels.cpp`) and the loader (:mod:`attncoda.capture.kernels._cpp`)
read it.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import sysconfig
from importlib import metadata
from pathlib import Path

__all__ = [
    "AVX2_FLAGS",
    "AVX512_FLAGS",
    "CAPABILITIES",
    "TORCH_FLOOR",
    "compiler",
    "cpu_capability",
    "ninja_folder",
    "prerequisites",
    "torch_version",
    "vector_width",
]

#: The oldest torch the kernel is built and tested on: its float32 ``cpublas::brgemm``
#: (``const float*`` operands, ``is_vnni = false``) arrived with CPU FlexAttention in 2.6.
#: Below it the kernel is unavailable before any build is tried, and ``"auto"`` takes
#: ``sdpa``.
TORCH_FLOOR = (2, 6)
#: ATen's ``ATEN_CPU_CAPABILITY`` values on x86-64, narrowest first: the builds there are.
CAPABILITIES = ("default", "avx2", "avx512")
#: The CPU flags of the AVX2 build (``-mavx2 -mfma -mf16c``).
AVX2_FLAGS = ("avx2", "fma", "f16c")
#: And those of the AVX-512 build.
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


def compiler() -> str | None:
    """The C++ compiler that builds the pass: ``$CXX``, else ``c++`` on the path (what
    ``torch.utils.cpp_extension`` calls); None when there is none."""
    return shutil.which(os.environ.get("CXX") or "c++")


def ninja_folder() -> str | None:
    """The folder of a ``ninja`` to build with: the one on the path, else the one beside
    this Python's scripts (where the ``ninja`` package, in attncoda's ``hf`` extra, puts
    it); None when there is neither."""
    found = shutil.which("ninja")
    if found is not None:
        return str(Path(found).parent)
    folder = Path(sysconfig.get_path("scripts"))
    return str(folder) if (folder / "ninja").is_file() else None


@functools.cache
def torch_version() -> str | None:
    """The installed torch's version as its distribution records it (``"2.6.0+cpu"``),
    read once per process without importing torch; None when torch is not installed."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string (``"2.6.0a0+git1234"`` is ``(2, 6)``); a
    pre-release of the floor counts as the floor (nightlies carry the API)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (0, 0)


@functools.cache
def _cpu_flags() -> frozenset[str] | None:
    """The first CPU's flags in ``/proc/cpuinfo`` (read once per process), or None."""
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    line = next((line for line in info.splitlines() if line.startswith("flags")), "flags:")
    return frozenset(line.split(":", 1)[1].split())


def cpu_capability() -> str:
    """The widest build of :data:`CAPABILITIES` the CPU runs: ``"avx512"`` where it has
    AVX-512 (F, BW, VL, DQ), ``"avx2"`` where it has AVX2, FMA and F16C, else
    ``"default"`` (also where its flags cannot be read)."""
    flags = _cpu_flags() or frozenset()
    if all(flag in flags for flag in AVX512_FLAGS):
        return "avx512"
    return "avx2" if all(flag in flags for flag in AVX2_FLAGS) else "default"


def vector_width() -> str:
    """The build the pass takes here, one of :data:`CAPABILITIES`: ``ATEN_CPU_CAPABILITY``
    where it names one of them, as ATen reads it (lowercase; ATen ignores any other value,
    and so does this), capped by what the CPU has (:func:`cpu_capability`). Each build
    lives apart in torch's cache (``attncoda_cpp_<build>``)."""
    best = cpu_capability()
    asked = os.environ.get("ATEN_CPU_CAPABILITY")
    if asked not in CAPABILITIES:
        return best
    return min(asked, best, key=CAPABILITIES.index)


def prerequisites() -> str | None:
    """Why the pass cannot be built here (a clause), read without importing torch: it is
    built on Linux x86-64, against torch :data:`TORCH_FLOOR` or later, by a C++ compiler
    and ninja. None when all hold (the build itself may still fail:
    :func:`attncoda.capture.kernels._cpp.unavailable`)."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"it is built on Linux x86-64, not {platform.system()} {platform.machine()}"
    version = torch_version()
    floor = ".".join(map(str, TORCH_FLOOR))
    if version is not None and _release(version) < TORCH_FLOOR:
        return (
            f"it calls ATen's float32 brgemm, which torch {floor} brought and torch "
            f"{version} lacks (upgrade torch to {floor} or later)"
        )
    if compiler() is None:
        return "it is compiled on first use and no C++ compiler was found (set CXX to one)"
    if ninja_folder() is None:
        return "it is built with ninja, which is not installed (pip install ninja)"
    return None
