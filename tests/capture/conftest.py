"""Triton's interpreter, for the tests that ask for it (the ``interpreter`` fixture).

Triton decorates its own language library (``tl.sum``, ``tl.max``, ...) when it is first
imported, compiled or interpreted as ``TRITON_INTERPRET`` says at that moment, and an
interpreted kernel cannot call a compiled library function. So the interpreter is not set
for the whole process (a compiled kernel, ``pytest -m gpu``, and the offline compiles of
``test_gpu_compile.py`` need the compiled library): the fixture sets ``TRITON_INTERPRET=1``
for one test and puts interpreted twins of the library's functions in place, then restores
both.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def interpreter(monkeypatch):
    """``TRITON_INTERPRET=1`` for one test, with ``triton.language``'s jit functions
    interpreted (whatever mode triton was first imported in)."""
    pytest.importorskip("triton")
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    for name, value in list(vars(tl).items()):
        if isinstance(value, JITFunction):
            monkeypatch.setattr(tl, name, InterpretedFunction(value.fn))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
