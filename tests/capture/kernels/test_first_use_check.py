"""The self-checking default (docs/design.md, "GPU kernels before a GPU"): the first time
``kernel="auto"`` meets a configuration it runs the fused kernel on a small random problem
against a float64 reference; a raising compile, ``OutOfResources`` or a wrong output sends
the configuration to the two-call SDPA path with one printed line, and the statistics are
the SDPA path's. ``kernel="triton"`` (forced) still raises.

On the CPU the check runs the kernel under Triton's interpreter: the tests let ``auto``
take the fused kernel on the CPU (its declared ``auto_devices``) and inject each failure.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
pytest.importorskip("transformers")

from triton.compiler.errors import CompilationError  # noqa: E402
from triton.runtime.errors import OutOfResources  # noqa: E402

from attncoda.capture import capture  # noqa: E402
from attncoda.capture._pass import kernels_ran  # noqa: E402
from attncoda.capture.kernels import _check, _triton, registry  # noqa: E402
from tiny_models import tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


@pytest.fixture
def auto_on_the_cpu(interpreter, monkeypatch):
    """``auto`` takes (and checks) the fused kernel on the CPU, interpreted; a fresh record
    of checked configurations. The CPU stands in for CUDA, so the chain after ``triton`` is
    CUDA's: the ``cpp`` kernel, which serves the CPU only, is taken out of it."""
    monkeypatch.setattr(registry.lookup("triton"), "auto_devices", ("cuda", "cpu"))
    monkeypatch.setattr(registry.lookup("cpp"), "dtypes", {})
    monkeypatch.setattr(_check, "_CHECKED", {})


@pytest.fixture(scope="module")
def model():
    return tiny("llama", torch.float32, positions=64)


def _ids():
    return np.random.default_rng(0).integers(3, 90, size=(2, 24))


def _fast(model, kernel):
    return capture(model, _ids(), record_rows=0, method="fast", kernel=kernel, block_size=16)


def test_a_configuration_that_passes_runs_the_fused_kernel(auto_on_the_cpu, model, capsys):
    got = _fast(model, "auto")
    assert got.kernel == "triton"
    assert "note:" not in capsys.readouterr().err
    (passed,) = _check.checked_configurations().values()
    assert passed is None


class _Raising:
    """A kernel whose launch raises ``error`` (a compile error, out of resources, ...)."""

    def __init__(self, error):
        self.error = error

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise self.error

        return launch


def _compile_error():
    return CompilationError(None, None, "injected: the kernel does not compile")


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(_compile_error, id="compile"),
        pytest.param(lambda: OutOfResources(262144, 232448, "shared memory"), id="resources"),
        pytest.param(lambda: RuntimeError("CUDA error: an illegal memory access"), id="launch"),
        pytest.param(None, id="wrong-output"),
    ],
)
def test_a_failing_check_falls_back_to_sdpa_with_one_line(
    auto_on_the_cpu, model, capsys, monkeypatch, failure
):
    sdpa = _fast(model, "sdpa")
    capsys.readouterr()
    if failure is None:
        real = _check.triton_attention

        def wrong(*args, **kwargs):
            out, stats = real(*args, **kwargs)
            return out, {**stats, "entropy": stats["entropy"] + 1e-3}

        monkeypatch.setattr(_check, "triton_attention", wrong)
    else:
        error = failure()
        monkeypatch.setattr(_triton, "compiled", lambda interpret: (triton, _Raising(error)))
    got = _fast(model, "auto")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(lines) == 1, err  # two layers of one configuration: one check, one line
    assert re.search(r"failed its first-use check on cpu, float32, head dim \d+, causal:", lines[0])
    assert "two-call SDPA path for the rest of this process" in lines[0]
    assert got.kernel == "sdpa"
    for name in FLOATS:
        np.testing.assert_array_equal(getattr(got, name), getattr(sdpa, name))
    # The configuration stays on SDPA without a second check or line.
    again = _fast(model, "auto")
    assert again.kernel == "sdpa" and "note:" not in capsys.readouterr().err


def test_a_forced_triton_kernel_still_raises(interpreter, model, monkeypatch):
    error = OutOfResources(262144, 232448, "shared memory")
    monkeypatch.setattr(_triton, "compiled", lambda interpret: (triton, _Raising(error)))
    with pytest.raises(OutOfResources):
        _fast(model, "triton")


def test_what_ran_is_said_per_layer_where_it_differs():
    assert kernels_ran({0: "triton", 1: "triton"}) == "triton"
    assert kernels_ran({0: "triton", 1: "sdpa", 2: "triton"}) == "triton; sdpa on layer 1"
    assert kernels_ran({0: "sdpa", 1: "exact", 2: "exact", 3: "sdpa", 4: "sdpa"}) == (
        "sdpa; exact on layers 1, 2"
    )
    assert kernels_ran({}) is None


def test_blocks_and_the_grid_are_checked_before_a_launch():
    from attncoda._errors import AttncodaError
    from attncoda.capture.kernels import MaskShape, triton_attention

    def call(length, **blocks):
        q = torch.zeros((1, 1, length, 1))
        shape = MaskShape(
            torch.zeros(1, dtype=torch.int32), torch.full((1,), length, dtype=torch.int32),
            True, None,
        )  # fmt: skip
        sink = torch.zeros((1, length), dtype=torch.bool)
        return triton_attention(q, q, q, scaling=1.0, sink=sink, shape=shape, **blocks)

    for bad in (24, 8, 512, True):
        with pytest.raises(AttncodaError, match=r"block_m must be a power of two from 16 to 256"):
            call(4, block_m=bad)
    # 65,536 query blocks of 16: one more than grid axis 1 takes (checked, never launched).
    with pytest.raises(AttncodaError, match=r"CUDA allows up to 2\*\*31 - 1 and 65,535"):
        call(16 * 65_536, block_m=16)
