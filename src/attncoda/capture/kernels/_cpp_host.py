"""What the ``cpp`` kernel needs of the machine that builds it, read without importing
torch: Linux x86-64 with AVX2 and FMA, a C++ compiler, the installed torch's
``libtorch_cpu.so`` (docs/design.md, "The fused CPU kernel"). Both the declaration
(:mod:`attncoda.capture.kernels.cpp`) and the loader (:mod:`attncoda.capture.kernels._cpp`)
read it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import shutil
from pathlib import Path

__all__ = ["CPU_FLAGS", "compiler", "prerequisites", "torch_library"]

#: The CPU flags the compiled pass uses (``-mavx2 -mfma``).
CPU_FLAGS = ("avx2", "fma")


def compiler() -> str | None:
    """The C++ compiler that builds the pass: ``$CXX``, else ``c++``, ``g++`` or
    ``clang++`` on the path; None when there is none."""
    explicit = os.environ.get("CXX")
    if explicit:
        return shutil.which(explicit)
    found = (shutil.which(name) for name in ("c++", "g++", "clang++"))
    return next((path for path in found if path), None)


def torch_library() -> Path | None:
    """The folder of the installed torch's ``libtorch_cpu.so``, found without importing
    torch; None when it is not there."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "lib"
    return folder if (folder / "libtorch_cpu.so").exists() else None


@functools.cache
def _cpu_flags() -> frozenset[str] | None:
    """The first CPU's flags in ``/proc/cpuinfo`` (read once per process), or None."""
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    line = next((line for line in info.splitlines() if line.startswith("flags")), "flags:")
    return frozenset(line.split(":", 1)[1].split())


def prerequisites() -> str | None:
    """Why the pass cannot be built here (a clause), read without importing torch: it is
    built on Linux x86-64 with AVX2 and FMA, by a C++ compiler, against the installed
    torch's ``libtorch_cpu.so``. None when all hold (the build itself may still fail:
    :func:`attncoda.capture.kernels._cpp.unavailable`)."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"it is built on Linux x86-64, not {platform.system()} {platform.machine()}"
    flags = _cpu_flags()
    if flags is None:
        return "it reads the CPU's flags from /proc/cpuinfo, which cannot be read here"
    missing = [flag for flag in CPU_FLAGS if flag not in flags]
    if missing:
        lacks = " and ".join(flag.upper() for flag in missing)
        needs = " and ".join(flag.upper() for flag in CPU_FLAGS)
        return f"it needs {needs}, and this CPU lacks {lacks}"
    if compiler() is None:
        return "it is compiled on first use and no C++ compiler was found (set CXX to one)"
    if torch_library() is None:
        return "it links against torch's libtorch_cpu.so, which is not installed here"
    return None
