"""The one exception class of attncoda."""

from __future__ import annotations

__all__ = ["AttncodaError"]


class AttncodaError(ValueError):
    """Raised for every input attncoda refuses.

    Each message names the offending value and says what to do instead. It is a
    :class:`ValueError`, so code that already catches ``ValueError`` keeps working.
    """
