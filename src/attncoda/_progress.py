"""Progress inside long work: a tqdm bar on a terminal, a line every ten seconds elsewhere.

Loops that can run for long (capture per batch of windows, training per step, the flip
count per block of triplets, prune's evaluations, a model's join and dequantisation) iterate
through :func:`steps`. It shows nothing unless progress is asked for: by ``force=True`` (a
function's own ``progress=True``), or for the work inside a :func:`shown` block, which the
runner opens around each unit of a run that shows progress. On a terminal (stderr a TTY)
that is a transient tqdm bar below the run's unit bar; otherwise (a log file, CI, a
notebook's captured stderr) one line ``desc: done/total unit (seconds)`` about every
``every`` seconds, and one at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["EVERY", "Meter", "between_steps", "shown", "showing", "steps"]

_T = TypeVar("_T")

_SHOWN: ContextVar[bool] = ContextVar("attncoda_progress", default=False)

#: Seconds between two lines of progress when stderr is not a terminal.
EVERY = 10.0

#: What this process does between two steps of long work (:func:`between_steps`).
_BETWEEN: list[Callable[[], None]] = []


def between_steps(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every step of :func:`steps` and every
    :meth:`Meter.update` in this process, shown or not: a worker of the local pool follows
    its share of the cores there, in the thread that computes
    (:mod:`attncoda.run.pool`)."""
    _BETWEEN.append(callback)


def _stepped() -> None:
    for callback in _BETWEEN:
        callback()


@contextmanager
def shown(enabled: bool = True) -> Iterator[None]:
    """Show the progress of :func:`steps` inside this block (or not, ``enabled=False``)."""
    token = _SHOWN.set(bool(enabled))
    try:
        yield
    finally:
        _SHOWN.reset(token)


def showing() -> bool:
    """Whether progress is shown here (inside a :func:`shown` block that enables it)."""
    return _SHOWN.get()


class Meter:
    """How far one piece of work has got, shown as :func:`steps` shows it; for work that
    reports through a callback (training reports each step): ``update(done)`` with the
    steps done so far, ``close()`` at the end. Shows nothing when not ``enabled``."""

    def __init__(
        self,
        *,
        desc: str,
        unit: str,
        total: int | None = None,
        enabled: bool = True,
        every: float | None = None,
        stream: Any = None,
    ) -> None:
        self.desc, self.unit, self.total = desc, unit, total
        self.every = EVERY if every is None else every
        self.enabled = enabled
        self.out = sys.stderr if stream is None else stream
        self.done = 0
        self.bar: Any = None
        self.start = self.last = time.monotonic()
        self.postfix = ""
        if enabled and getattr(self.out, "isatty", lambda: False)():
            try:
                from tqdm.auto import tqdm
            except ImportError:  # the core install has no tqdm: lines then
                pass
            else:
                self.bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=self.out)

    def update(self, done: int, postfix: str = "") -> None:
        """``done`` steps are done (a running figure, such as the loss, in ``postfix``)."""
        _stepped()
        if not self.enabled:
            return
        step, self.done, self.postfix = done - self.done, done, postfix
        if self.bar is not None:
            self.bar.update(step)
            if postfix:
                self.bar.set_postfix_str(postfix, refresh=False)
            return
        now = time.monotonic()
        if now - self.last >= self.every and (self.total is None or done < self.total):
            self._line(now, "")
            self.last = now

    def close(self) -> None:
        """The work is over: the bar goes, or a last line when any line was written."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        elif self.done and (self.last != self.start or self.every == 0):
            self._line(time.monotonic(), ", done")

    def _line(self, now: float, end: str) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        extra = f", {self.postfix}" if self.postfix else ""
        print(
            f"{self.desc}: {self.done}{of} {self.unit}{end} ({now - self.start:.0f} s{extra})",
            file=self.out,
            flush=True,
        )

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def steps(
    iterable: Iterable[_T],
    *,
    desc: str,
    unit: str,
    total: int | None = None,
    force: bool | None = None,
) -> Iterator[_T]:
    """Iterate ``iterable``, showing how far it has got.

    Parameters
    ----------
    iterable : iterable
        The work, one item per step.
    desc : str
        What the work is (``"capture smollm2"``).
    unit : str
        What one step is (``"batch"``, ``"step"``, ``"eval"``).
    total : int, optional
        The number of steps (default ``len(iterable)`` where it has one).
    force : bool, optional
        ``True`` shows progress, ``False`` hides it; ``None`` (the default) follows the
        enclosing :func:`shown` block. Lines go to ``sys.stderr``, every :data:`EVERY`
        seconds when it is no terminal.

    Yields
    ------
    The items of ``iterable``.
    """
    enabled = showing() if force is None else force
    if not enabled:
        for item in iterable:
            yield item
            _stepped()
        return
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Meter(desc=desc, unit=unit, total=total) as meter:
        for done, item in enumerate(iterable, 1):
            yield item
            meter.update(done)
