"""Fitting the frozen flip-rate predictor: each model's sink features and measured flip rates
(``attncoda predictor fit``; applying a predictor is the predictor experiment's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import Reading, settings_from
from attncoda.run.config import Rows

__all__ = [
    "fit_and_freeze",
    "fit_tool",
    "freeze_predictor",
    "measured_row",
    "model_rows",
    "predictor_row_of",
    "predictor_rows",
]


def model_rows(
    spec: str,
    *,
    name: str | None = None,
    rows: Mapping[str, Any] | None = None,
    text: str | None = None,
    options: CaptureOptions | None = None,
    loaded: tuple | None = None,
) -> Any:
    """The recorded rows of every head of ``spec`` (:class:`Rows` windows, ``rows``
    overriding its defaults), labelled ``name`` (default: the spec), with the model's
    identity (weights hash, ``train-tiny`` recipe), loaded and captured as ``options`` say.
    ``loaded``: the model already loaded, ``(model, tokenizer, info)``. The capture shows
    its progress inside an ``attncoda._progress.shown()`` block."""
    return _read_rows(spec, name=name, rows=rows, text=text, options=options, loaded=loaded)[0]


def measured_row(spec: str, **kwargs: Any) -> dict[str, Any]:
    """The predictor's row of ``spec`` (:func:`predictor_row_of`) with the protocol of what
    its rows read (the windows read, their length as read, the corpus by name and sha256:
    a Bigram-Backcopy checkpoint's task sequences as they are) and how they were measured
    (sink, seed, metrics, tie tolerance); ``kwargs`` as for :func:`model_rows`."""
    rows, read = _read_rows(spec, **kwargs)
    options = kwargs.get("options") or CaptureOptions()
    return predictor_row_of(rows, read=read, sink=options.sink, seed=options.seed)


def _read_rows(
    spec: str,
    *,
    name: str | None = None,
    rows: Mapping[str, Any] | None = None,
    text: str | None = None,
    options: CaptureOptions | None = None,
    loaded: tuple | None = None,
) -> tuple[Any, Reading | None]:
    """:func:`model_rows` and what its capture read (:class:`Reading`)."""
    from dataclasses import replace

    from attncoda.models.load import load_model
    from attncoda.run.captured import capture_corpus, head_rows
    from attncoda.run.loaded import identity_of

    options = options or CaptureOptions()
    windows = settings_from(Rows, rows)
    if loaded is None:
        loaded = load_model(spec, dtype=options.dtype, **options.placement())
    captured = capture_corpus(
        spec,
        text=text,
        options=options,
        max_tokens=windows.max_tokens,
        docs=windows.docs,
        loaded=loaded,
    )
    found = replace(head_rows(captured), identity=identity_of(loaded))
    found = found if name is None else replace(found, model=name)
    return found, captured.reading


def predictor_row_of(
    rows: Any, *, read: Reading | None = None, sink: str = "first", seed: int = 0
) -> dict[str, Any]:
    """The predictor's row of one model's recorded rows: its sink features and the flip rate
    of each metric (the flips experiment's metrics and tie tolerance, one bootstrap
    resample: the interval is not used). With ``read`` (what the rows read), the row
    records its ``protocol``, with ``sink`` and ``seed``."""
    from attncoda.experiments.contract import experiment
    from attncoda.experiments.flips import flips
    from attncoda.experiments.predictor import predictor_row, protocol_of

    settings = settings_from(experiment("flips").settings)
    result = flips(rows, settings.metrics, n_boot=1, seed=seed, tol=settings.tol)
    protocol = None
    if read is not None:
        protocol = protocol_of(
            windows=read.windows,
            window_tokens=read.window_tokens,
            corpus=read.corpus,
            corpus_sha256=read.corpus_sha256,
            sink=sink,
            seed=seed,
            metrics=settings.metrics,
            tol=settings.tol,
        )
    return predictor_row(rows, result, protocol=protocol)


def predictor_rows(specs: Sequence[str], **kwargs: Any) -> list[dict[str, Any]]:
    """The predictor's training (or test) rows of ``specs``, each with the protocol it was
    read with (:func:`measured_row`); ``kwargs`` go to :func:`model_rows`."""
    return [measured_row(spec, **kwargs) for spec in specs]


def freeze_predictor(predictor: Any, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``predictor`` (:class:`attncoda.experiments.predictor.Predictor`) to the JSON
    file ``path``, atomically. A frozen predictor is not rewritten by accident: an existing
    file is an error unless ``overwrite=True``."""
    from attncoda.store import atomic_write_json

    target = Path(path)
    if target.exists() and not overwrite:
        raise AttncodaError(
            f"{str(target)!r} already exists: a frozen predictor is not overwritten; "
            "choose a new path or pass overwrite=True"
        )
    return atomic_write_json(target, predictor.to_dict())


def fit_and_freeze(
    rows: list[dict[str, Any]],
    path: str | Path,
    *,
    overwrite: bool = False,
    alpha: float | None = None,
) -> Any:
    """Fit the flip-rate predictor on ``rows`` (CV+ at miscoverage ``alpha``, default
    :data:`attncoda.experiments.predictor.DEFAULT_ALPHA`) and write it, frozen, to ``path``."""
    from attncoda.experiments.predictor import DEFAULT_ALPHA, fit_predictor

    predictor = fit_predictor(rows, alpha=DEFAULT_ALPHA if alpha is None else alpha)
    freeze_predictor(predictor, path, overwrite=overwrite)
    return predictor


def fit_tool(
    models: Sequence[str],
    settings: Mapping[str, Any],
    *,
    rows: Mapping[str, Any],
    text: str | None,
    out: str | None,
    options: CaptureOptions,
) -> str:
    """``attncoda predictor fit``: fit on ``models`` (their rows read at the ``rows``
    windows of ``text`` with ``options``) and write the frozen predictor to ``out``, with
    the predictor's :class:`attncoda.experiments.predictor.FitSettings` ``settings``.
    Returns the lines the command prints: what it fitted on, the interval's leave-one-run-out
    RMSE beside the constant baseline's, and each feature's training range."""
    from attncoda.experiments.predictor import FitSettings
    from attncoda.run.reproduce import check_models

    chosen = settings_from(FitSettings, settings)
    if not out:
        raise AttncodaError("predictor fit needs --out: the JSON file to write the predictor to")
    check_models(models)
    found = predictor_rows(models, rows=rows, text=text, options=options)
    predictor = fit_and_freeze(found, out, overwrite=chosen.overwrite, alpha=chosen.alpha)
    runs = dict.fromkeys(predictor.training_runs)
    lines = [
        f"fitted on {', '.join(r['model'] for r in found)}; wrote {out}",
        f"  CV+ over {len(runs)} runs ({', '.join(runs)}), alpha {predictor.alpha:g}; "
        f"leave-one-run-out RMSE {predictor.interval.rmse:.4f}, constant baseline "
        f"{predictor.baseline.interval.rmse:.4f}",
    ]
    for name, (low, high) in zip(predictor.features, predictor.training_range, strict=True):
        lines.append(f"  {name}: training range [{low:.4g}, {high:.4g}]")
    return "\n".join(lines)
