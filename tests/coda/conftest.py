"""Fixtures of the coda tests: the array backend (numpy, torch CPU) and the float dtype.

Every numeric test takes ``backend`` and ``dtype``, builds its inputs with ``backend.array``
and checks every output with ``backend.assert_like`` (type, dtype and device of the input).
The fixtures are session-scoped so that Hypothesis tests may use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


@dataclass(frozen=True)
class Backend:
    """Builds arrays of one library and checks that outputs stay in it."""

    name: str

    def array(self, x: Any, dtype: str) -> Any:
        """``x`` as an array of this backend with ``dtype`` (a fresh copy)."""
        a = np.array(x, dtype=np.dtype(dtype))
        return a if self.name == "numpy" else torch.as_tensor(a)

    def numpy(self, x: Any) -> np.ndarray:
        """A host numpy copy of an output (dtype kept)."""
        if isinstance(x, torch.Tensor):
            return x.detach().cpu().numpy().copy()
        return np.array(x)

    def assert_like(self, out: Any, like: Any) -> None:
        """``out`` has the array type, dtype and device of ``like``."""
        if self.name == "torch":
            assert isinstance(out, torch.Tensor), f"expected a torch.Tensor, got {type(out)}"
            assert out.dtype == like.dtype, f"dtype {out.dtype} != input dtype {like.dtype}"
            assert out.device == like.device, f"device {out.device} != {like.device}"
        else:
            # numpy reductions of a single row give a numpy scalar (np.float64 / np.float32),
            # which still carries the dtype; anything else must be an ndarray.
            assert isinstance(out, (np.ndarray, np.generic)), f"got {type(out)}"
            if isinstance(out, np.generic):
                assert np.ndim(out) == 0
            assert out.dtype == like.dtype, f"dtype {out.dtype} != input dtype {like.dtype}"


NUMPY = Backend("numpy")
TORCH = Backend("torch")


@pytest.fixture(scope="session", params=[NUMPY, TORCH], ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    """The array library under test: numpy, or torch on CPU (``torch.as_tensor``)."""
    return request.param


@pytest.fixture(scope="session", params=["float64", "float32"])
def dtype(request: pytest.FixtureRequest) -> str:
    """The floating dtype under test."""
    return request.param


@pytest.fixture(scope="session")
def tol(dtype: str) -> float:
    """Absolute/relative tolerance of the identities: 1e-10 (float64), 1e-4 (float32)."""
    return TOLERANCE[dtype]
