"""Triton's interpreter for the fused kernel's tests (``test_fused.py``).

Triton decorates its own language library (``tl.sum``, ``tl.max``, ...) when it is first
imported, interpreted or compiled as ``TRITON_INTERPRET`` says at that moment, and building
a transformers model imports it. So it is imported here, at collection, before any test
builds a model, with the variable set for that import only: no other test sees it, and each
fused test sets it again for its own duration. Nothing else in the suite runs Triton.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _import_triton_for_the_interpreter() -> None:
    if "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language  # noqa: F401
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


_import_triton_for_the_interpreter()
