"""What the ``cpp`` kernel needs of the machine that builds it, read without importing
torch: Linux x86-64 with AVX2, FMA and F16C, torch :data:`TORCH_FLOOR` or later, a C++
compiler and ninja, which ``torch.utils.cpp_extension`` builds with (docs/design.md, "The
fused CPU kernel"). Both the
declaration (:mod:`attncoda.capture.kernels.cpp`) and the loader
(:mod:`attncoda.capture.kernels._cpp`) read it.
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
    "CPU_FLAGS",
    "TORCH_FLOOR",
    "compiler",
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

#: The CPU flags the built pass needs (``-mavx2 -mfma -mf16c``).
CPU_FLAGS = ("avx2", "fma", "f16c")
#: And those of its AVX-512 build, taken where the CPU has them all.
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


def vector_width() -> str:
    """``"avx512"`` where the CPU has AVX-512 (F, BW, VL, DQ), else ``"avx2"``: the build the
    pass takes here (a build of each lives apart in torch's cache)."""
    flags = _cpu_flags() or frozenset()
    return "avx512" if all(flag in flags for flag in AVX512_FLAGS) else "avx2"


def prerequisites() -> str | None:
    """Why the pass cannot be built here (a clause), read without importing torch: it is
    built on Linux x86-64 with AVX2, FMA and F16C, against torch :data:`TORCH_FLOOR` or
    later, by a C++ compiler and ninja. None when all hold (the build itself may still
    fail: :func:`attncoda.capture.kernels._cpp.unavailable`)."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"it is built on Linux x86-64, not {platform.system()} {platform.machine()}"
    version = torch_version()
    floor = ".".join(map(str, TORCH_FLOOR))
    if version is not None and _release(version) < TORCH_FLOOR:
        return (
            f"it calls ATen's float32 brgemm, which torch {floor} brought and torch "
            f"{version} lacks (upgrade torch to {floor} or later)"
        )
    flags = _cpu_flags()
    if flags is None:
        return "it reads the CPU's flags from /proc/cpuinfo, which cannot be read here"
    missing = [flag for flag in CPU_FLAGS if flag not in flags]
    if missing:
        lacks = " and ".join(flag.upper() for flag in missing)
        needs = ", ".join(flag.upper() for flag in CPU_FLAGS)
        return f"it needs {needs}, and this CPU lacks {lacks}"
    if compiler() is None:
        return "it is compiled on first use and no C++ compiler was found (set CXX to one)"
    if ninja_folder() is None:
        return "it is built with ninja, which is not installed (pip install ninja)"
    return None
