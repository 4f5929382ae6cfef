"""Direct calls of the experiments that read a model's capture of their own windows: the
capture made here, with the method, kernel, sink and seed the call gives, then the
experiment, which captures nothing itself (docs/design.md, "The experiment contract").

In a run the runner makes these captures with the run's options
(:func:`attncoda.run.captured.capture_ids`); these are for a model loaded by hand:

- :func:`prune_model`: :func:`attncoda.experiments.prune.prune` on a model, its profiling
  windows captured first;
- :func:`checkpoint_stats`: one checkpoint's statistics on a series' windows
  (:func:`attncoda.experiments.collapse.capture_stats` of its capture).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attncoda._errors import AttncodaError

__all__ = ["checkpoint_stats", "prune_model"]


def _capture(model: Any, tokenizer: Any, windows: list[Any], **how: Any) -> Any:
    """Statistics of every row of ``windows`` (no full rows), captured ``how`` the call says
    (its ``sink``, ``seed``, ``method``, ``kernel`` and ``batch_size``)."""
    from attncoda.capture import capture_windows

    return capture_windows(model, windows, tokenizer=tokenizer, record_rows="none", **how)


def prune_model(  # params: a direct call's keywords, each documented below
    model: Any,
    tokenizer: Any,
    profile_windows: Sequence[Any],
    eval_windows: Sequence[Any],
    *,
    capture: Any = None,
    method: str = "auto",
    kernel: str = "auto",
    sink: str | int | Sequence[int] = "first",
    seed: int = 0,
    batch_size: int = 8,
    **settings: Any,
) -> Any:
    """:func:`attncoda.experiments.prune.prune` of ``model``, its profiling statistics a
    capture of ``profile_windows`` made here by ``method`` and ``kernel`` (with ``sink`` and
    ``seed``), or the ``capture`` given.

    Parameters
    ----------
    model, tokenizer, profile_windows, eval_windows
        As for :func:`attncoda.experiments.prune.prune`.
    capture : Capture, optional
        The capture of ``profile_windows`` by ``model``, made elsewhere; then ``method``
        and ``kernel`` must be left as they are.
    method : {"auto", "exact", "fast"}
        The capture method (:func:`attncoda.capture_windows`).
    kernel : str
        The fast method's kernel (a name of :data:`attncoda.capture.KERNELS`); anything
        but ``"auto"`` needs ``method="fast"``.
    sink, seed, batch_size, **settings
        As for :func:`attncoda.experiments.prune.prune`.

    Returns
    -------
    attncoda.experiments.prune.PruneResult
    """
    from attncoda.experiments.prune import check_windows, prune

    if capture is None:
        ids = check_windows(profile_windows, "profile_windows")
        how = {"sink": sink, "seed": seed, "method": method, "kernel": kernel}
        capture = _capture(model, tokenizer, ids, batch_size=batch_size, **how)
    elif (method, kernel) != ("auto", "auto"):
        raise AttncodaError(
            f"method={method!r} and kernel={kernel!r} say how prune captures, but a capture "
            f"is given (made by its own method, {capture.method!r}): drop method= and kernel="
        )
    return prune(
        model,
        tokenizer,
        profile_windows,
        eval_windows,
        capture=capture,
        sink=sink,
        seed=seed,
        batch_size=batch_size,
        **settings,
    )


def checkpoint_stats(  # params: a direct call's keywords, each documented below
    model: Any,
    tokenizer: Any,
    windows_ids: Sequence[Sequence[int]] | Sequence[Any],
    point: Any,
    *,
    sink: str | int | Sequence[int] = "first",
    batch_size: int = 8,
    method: str = "auto",
    kernel: str = "auto",
    seed: int = 0,
) -> Any:
    """One checkpoint's row statistics on the series' windows, captured here.

    Parameters
    ----------
    model, tokenizer
        The checkpoint, loaded.
    windows_ids : sequence of sequence of int
        The series' token windows (the same for every checkpoint).
    point : SeriesPoint
        Which checkpoint this is (its ``step`` and ``label`` are recorded).
    sink : str, int or sequence of int
        Sink spec (``"first"``: the first real token); it must give the same sink keys at
        every checkpoint (``"auto"`` usually does not).
    batch_size : int
        Windows per forward pass.
    method : {"auto", "exact", "fast"}
        The capture method (:func:`attncoda.capture_windows`).
    kernel : str
        The fast method's kernel (a name of :data:`attncoda.capture.KERNELS`); anything
        but ``"auto"`` needs ``method="fast"``.
    seed : int
        The capture's seed.

    Returns
    -------
    attncoda.experiments.collapse.CheckpointStats
    """
    from attncoda.experiments.collapse import capture_stats, check_windows

    windows = check_windows(windows_ids)
    vocab = getattr(model.config.get_text_config(), "vocab_size", None)
    top = max(int(w.max()) for w in windows)
    if isinstance(vocab, int) and top >= vocab:
        raise AttncodaError(
            f"checkpoint {point.label} has a vocabulary of {vocab} tokens, but the windows hold "
            f"token id {top}: make the windows with this series' tokenizer"
        )
    how = {"sink": sink, "seed": seed, "method": method, "kernel": kernel}
    return capture_stats(_capture(model, tokenizer, windows, batch_size=batch_size, **how), point)
