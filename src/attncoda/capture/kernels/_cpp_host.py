"""What the ``cpp`` kernel needs of the machine that builds it, and its build, without
importing torch until a build: Linux x86-64, torch :data:`TORCH_FLOOR` or later, a C++
compiler and ninja, which ``torch.utils.cpp_extension`` builds with (:func:`prerequisites`);
which of its builds the CPU takes (:func:`vector_width`: ATen's ``ATEN_CPU_CAPABILITY``,
capped by the CPU's flags) and its compiler flags (:data:`FLAGS`); the build itself, shown
as progress (:func:`load_extension`), after a stale build lock is removed
(:func:`clear_stale_lock`). docs/design.md, "The fused CPU kernel". Both the declaration
(:mod:`attncoda.capture.kernels.cpp`) and the loader (:mod:`attncoda.capture.kernels._cpp`)
read it.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import sys
import sysconfig
import time
from importlib import metadata
from pathlib import Path

from attncoda._progress import Meter

__all__ = [
    "AVX2_FLAGS",
    "AVX512_FLAGS",
    "BUILD_TIMEOUT",
    "CAPABILITIES",
    "FLAGS",
    "SOURCE",
    "TORCH_FLOOR",
    "build_folder",
    "clear_stale_lock",
    "compiler",
    "cpu_capability",
    "load_extension",
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
#: The C++ source of the pass.
SOURCE = Path(__file__).with_name("_cpp.cpp")
#: The compiler's flags by build (:func:`vector_width`): ATen's vector types are compiled
#: for the CPU capability named (``Vectorized<float>`` of 16 or 8 floats in AVX-512 or AVX2
#: registers; for ``default``, ATen's generic ``Vectorized<float>``, 8 floats in an array,
#: and no ``-m`` flag, so it runs on any x86-64), and OpenMP for ATen's ``parallel_for``,
#: whose loop is compiled into the extension (it runs in torch's own OpenMP runtime, which
#: torch has loaded). The products are oneDNN's in every build (``cpublas::brgemm`` picks
#: its instructions at run time).
FLAGS = {
    "default": ("-O3", "-fopenmp", "-DCPU_CAPABILITY=DEFAULT", "-DCPU_CAPABILITY_DEFAULT"),
    "avx2": (
        "-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY=AVX2",
        "-DCPU_CAPABILITY_AVX2",
    ),
    "avx512": (
        "-O3", "-fopenmp", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma",
        "-mf16c", "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512",
    ),
}  # fmt: skip
#: Seconds a build may take. A build takes 15 to 40 s on two cores; a build lock (the
#: ``lock`` file torch's builder holds in the extension's folder) older than ten is one a
#: killed build left behind, which torch would wait on forever.
BUILD_TIMEOUT = 600.0


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


def build_folder(name: str) -> Path:
    """The folder torch's builder builds extension ``name`` in (under
    ``TORCH_EXTENSIONS_DIR``, else torch's default root), made if missing: where its
    ``lock`` and its library are. The load is given this very folder."""
    from torch.utils import cpp_extension

    return Path(cpp_extension._get_build_directory(name, verbose=False))


def clear_stale_lock(folder: Path, timeout: float = BUILD_TIMEOUT) -> bool:
    """Wait for the build lock in ``folder`` while another process may hold it, and remove
    it once it is older than ``timeout`` seconds: a build killed midway left it, and
    torch's builder would wait on it forever. Said in one line on stderr. True when a stale
    lock was removed; False when there was none, its holder released it, or another process
    removed or replaced it first."""
    lock = folder / "lock"
    while True:
        try:
            found = lock.stat()
        except FileNotFoundError:
            return False
        age = time.time() - found.st_mtime
        if age >= timeout:
            break
        time.sleep(min(1.0, timeout - age))
    try:  # the very lock judged stale, not one another process took since (same file)
        if (lock.stat().st_ino, lock.stat().st_mtime) != (found.st_ino, found.st_mtime):
            return False
        lock.unlink()
    except FileNotFoundError:  # another process removed it first
        return False
    print(
        f"note: the cpp kernel's build lock {lock} is {age:.0f} s old, older than the "
        f"{timeout:.0f} s a build may take (a killed build left it): removed, rebuilding",
        file=sys.stderr,
        flush=True,
    )
    return True


def _is_built(name: str, folder: Path) -> bool:
    """Whether extension ``name`` is built in ``folder``: its library is there, no older
    than the source (else loading it builds it)."""
    built = folder / f"{name}.so"
    return built.is_file() and built.stat().st_mtime >= SOURCE.stat().st_mtime


def load_extension(name: str, width: str, folder: Path):
    """Extension ``name`` of build ``width``, built in ``folder`` where it must be. A build
    is silent for 15 to 40 s, so it shows as progress (:class:`attncoda._progress.
    Meter`: a line when it starts and one when it is done, or a bar on a terminal)."""
    from torch.utils import cpp_extension

    def load():
        return cpp_extension.load(
            name=name,
            sources=[str(SOURCE)],
            extra_cflags=list(FLAGS[width]),
            extra_ldflags=["-fopenmp"],
            build_directory=str(folder),
            verbose=False,
        )

    if _is_built(name, folder):
        return load()
    desc = f"cpp kernel: building its {width} build (15 to 40 s) in {folder}"
    with Meter(desc=desc, unit="build", total=1, every=0) as meter:
        meter.update(0)
        library = load()
        meter.update(1)
    return library
