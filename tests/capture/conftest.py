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
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    class Scoped(interp.InterpretedFunction):
        """An interpreted library function that undoes its patches of ``triton.language``
        when it returns (Triton's own leaves them, harmless only when every kernel of the
        process is interpreted)."""

        def __call__(self, *args, **kwargs):
            scope = interp._patch_lang(self.fn)
            try:
                return self.rewrite()(*args, **kwargs)
            finally:
                scope.restore()

    for name, value in list(vars(tl).items()):
        if isinstance(value, JITFunction):
            monkeypatch.setattr(tl, name, Scoped(value.fn))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
