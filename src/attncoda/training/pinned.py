"""Training pinned to the same bits on one machine: the environment and its worker process.

PyTorch picks CPU kernels at run time, and each choice can change the rounding of a training
run from step 0 (the weight initialisation) on. :func:`run_pinned` therefore trains in a
worker process whose environment fixes every choice before torch is imported
(:data:`PINNED_ENV`), whatever the caller's process or environment holds, so that a machine
repeats a run bit for bit at any thread count and whatever its caller runs (a killed run
resumes to the same tables). It does not make two CPU vendors agree: an Intel Xeon and an
AMD EPYC part from step 1 (measured), which is why attncoda ships its training checkpoints
(docs/design.md, "Shipped checkpoints"). The choices fixed:

- **ATen's capability dispatch** (``ATEN_CPU_CAPABILITY=default``): the ``default`` kernels
  are compiled once for baseline x86-64, so every CPU runs the same instructions in the same
  order; the AVX2 and AVX-512 kernels differ in vector width (so in summation order), in
  their ``exp``/``log`` approximations and in the random normal fill of the initialisation.
- **MKL's kernel branch** (``MKL_CBWR=COMPATIBLE``): matrix products go through MKL, which
  dispatches by CPU. ``COMPATIBLE`` is MKL's branch for Intel and non-Intel processors alike
  (SSE2 without the vendor-dependent ``rcpps``/``rsqrtps``). The Intel branches
  (``AVX2``, ``AVX512``) do not pin anything on an AMD CPU: MKL falls back to its automatic
  branch there.
- **oneDNN**: switched off (``torch.backends.mkldnn``), and capped at SSE4.1 in case
  (``ONEDNN_MAX_CPU_ISA``); its kernels are generated for the CPU at hand.
- **Threads**: one intra-op and one inter-op thread (``torch.set_num_threads(1)``,
  ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, no dynamic adjustment). Parallel reductions
  split their sums by thread count, so only a fixed count is reproducible, and one thread
  is the count every machine has.
- Deterministic algorithms on, float32 matrix products at full precision.

The worker checks the pinning took hold (ATen reports the ``DEFAULT`` capability, MKL the
``COMPATIBLE`` branch) before it trains, and refuses otherwise. It is started on the first
training run of a process and kept for the next ones (the import of torch is paid once); it
ends with its parent. The data pipeline (numpy's generator, integer and comparison work,
sequential cumulative sums) does no CPU-dispatched float arithmetic.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from attncoda._errors import AttncodaError

__all__ = ["PINNED_ENV", "check_pinned", "is_pinned", "pin_torch", "run_pinned"]

#: The environment the training worker runs in, over the caller's.
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "MKL_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "DNNL_MAX_CPU_ISA": "SSE41",
}

# MKL's CNR constants (mkl_cbwr.h): the branch query and the COMPATIBLE branch.
_MKL_CBWR_BRANCH = 1
_MKL_CBWR_COMPATIBLE = 3

_LOCK = threading.Lock()
_WORKER: subprocess.Popen[bytes] | None = None


def _mkl_branch() -> int | None:
    """MKL's current CNR branch, or None where torch's BLAS is no MKL that says."""
    import ctypes

    import torch

    if not torch.backends.mkl.is_available():
        return None
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype = ctypes.c_int
    return int(get(ctypes.c_int(_MKL_CBWR_BRANCH)))


def is_pinned() -> bool:
    """Whether this process runs ATen's ``default`` kernels and MKL's ``COMPATIBLE`` branch."""
    import torch

    torch.ones(2, 2) @ torch.ones(2, 2)  # MKL reads MKL_CBWR at its first call
    return (
        torch.backends.cpu.get_cpu_capability() == "DEFAULT"
        and _mkl_branch() == _MKL_CBWR_COMPATIBLE
    )


def check_pinned() -> None:
    """Refuse to train unless :func:`is_pinned` (the worker's own check)."""
    import torch

    if not is_pinned():
        raise AttncodaError(
            f"training needs ATen's default kernels and MKL's COMPATIBLE branch, got "
            f"{torch.backends.cpu.get_cpu_capability()!r} and MKL branch {_mkl_branch()!r}; "
            f"use a torch build with MKL for bit-identical training"
        )


def pin_torch() -> None:
    """The in-process settings of the pinned worker: one thread, no oneDNN, deterministic
    algorithms, full-precision float32 matrix products."""
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False  # type: ignore[assignment]
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")


def run_pinned(job: Any, report: Callable[[int, float], None] | None) -> Any:
    """Run ``job(report)`` (a :class:`attncoda.training.train.TrainJob`) in the pinned worker.

    Parameters
    ----------
    job : attncoda.training.train.TrainJob
        Everything the training needs (picklable).
    report : callable or None
        Called in this process with ``(steps done, running training loss in nats)`` after
        each optimiser step.

    Returns
    -------
    TrainResult
        What the worker returned; an exception it raised is raised here.
    """
    global _WORKER
    with _LOCK:
        worker = _WORKER
        if worker is None or worker.poll() is not None:
            worker = _WORKER = _start_worker()
        assert worker.stdin is not None and worker.stdout is not None
        try:
            _send(worker.stdin, (job, report is not None))
            while True:
                kind, *payload = _receive(worker.stdout, worker)
                if kind == "step" and report is not None:
                    report(*payload)
                elif kind in ("result", "error"):
                    break
        except BaseException:
            # A worker left mid-run (an interrupt here) is ended; the next run starts one.
            _stop(worker)
            _WORKER = None
            raise
    if kind == "error":
        raise payload[0]
    return payload[0]


@atexit.register
def _end_worker() -> None:
    """Close the worker's input at exit: it ends its loop and is waited for."""
    worker = _WORKER
    if worker is not None and worker.poll() is None:
        assert worker.stdin is not None
        worker.stdin.close()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()


def _start_worker() -> subprocess.Popen[bytes]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, **PINNED_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    return subprocess.Popen(
        [sys.executable, "-m", "attncoda.training.pinned"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    for stream in (worker.stdin, worker.stdout):
        if stream is not None:
            stream.close()
    worker.kill()
    worker.wait()


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read(stream: IO[bytes], n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def _receive(stream: IO[bytes], worker: subprocess.Popen[bytes] | None = None) -> Any:
    head = _read(stream, 8)
    body = None if head is None else _read(stream, struct.unpack("<Q", head)[0])
    if body is None:
        if worker is None:
            raise EOFError
        raise RuntimeError(
            f"the pinned training worker ended without a result (exit code {worker.wait()})"
        )
    return pickle.loads(body)


def _serve() -> None:
    """The worker: read jobs from stdin, answer on the original stdout, until stdin closes."""
    # Whatever prints to stdout (a library's message) must not corrupt the answers.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    pin_torch()
    while True:
        try:
            job, wants_steps = _receive(requests)
        except EOFError:
            return

        def report(step: int, loss: float) -> None:
            _send(answers, ("step", step, loss))

        try:
            check_pinned()
            # A job is callable (attncoda.training.train.TrainJob): unpickling it imports
            # its module, so this module needs no import of the training code above it.
            result = job(report if wants_steps else None)
        except Exception as error:  # noqa: BLE001 - sent to the caller, raised there
            try:
                pickle.dumps(error)
                answer: Any = error
            except Exception:  # noqa: BLE001 - an exception that does not pickle
                answer = RuntimeError("".join(traceback.format_exception(error)))
            _send(answers, ("error", answer))
            continue
        _send(answers, ("result", result))


if __name__ == "__main__":
    _serve()
