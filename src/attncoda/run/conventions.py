"""Runs of the convention experiments: flips, cluster, safety map, flip-rate predictor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.inputs import HeadRows
from attncoda.experiments.predictor import apply_predictor, shipped_predictor
from attncoda.run.common import Captured, capture_corpus, head_rows

#: Distances from float32 rows are good to about 1e-7 relative: closer verdicts are ties.
CAPTURE_TOL = 1e-6


@dataclass(frozen=True)
class ModelRows:
    """One captured model and its recorded rows, ready for the experiments."""

    captured: Captured
    rows: HeadRows


def model_rows(
    spec: str,
    *,
    text: str | None = None,
    sink: str = "first",
    max_tokens: int = 128,
    docs: int = 16,
    seed: int = 0,
    progress: bool = False,
    loaded: tuple | None = None,
    **options: Any,
) -> ModelRows:
    """Capture ``docs`` windows of ``spec`` with every row recorded (up to 128 per window).

    ``options`` go to :func:`attncoda.run.common.capture_corpus` (``device``, ``dtype``,
    ``method``).
    """
    captured = capture_corpus(
        spec,
        text=text,
        sink=sink,
        max_tokens=max_tokens,
        docs=docs,
        seed=seed,
        progress=progress,
        loaded=loaded,
        **options,
    )
    return ModelRows(captured=captured, rows=head_rows(captured))


def run_flips(
    models: list[ModelRows],
    out: str | Path,
    *,
    metrics: tuple[str, ...] = ("cosine", "jsd", "entropy_gap", "hellinger", "tv"),
    n_boot: int = 1000,
    seed: int = 0,
    tol: float = CAPTURE_TOL,
) -> tuple[Any, Any, dict[str, Any]]:
    """Flip rates (keep vs drop) of every model; writes ``flips.parquet``,
    ``flips_by_layer.parquet``, ``flips.png`` and ``manifest.json``.

    Returns ``(table, by_layer, results)`` with ``results[model] = FlipsResult``.
    """
    import pandas as pd

    from attncoda.experiments.flips import flips
    from attncoda.report.figures_flips import plot_flip_rates
    from attncoda.store import write_table

    out = Path(out)
    results = {
        m.rows.model: flips(m.rows, metrics, n_boot=n_boot, seed=seed, tol=tol) for m in models
    }
    table = pd.concat([r.table for r in results.values()], ignore_index=True)
    by_layer = pd.concat([r.by_layer for r in results.values()], ignore_index=True)
    write_table(table, out / "flips.parquet")
    write_table(by_layer, out / "flips_by_layer.parquet")
    plot_flip_rates(table, out / "flips.png")
    _manifest(out, "flips", models, metrics=list(metrics), n_boot=n_boot, tol=tol)
    return table, by_layer, results


def run_cluster(model: ModelRows, out: str | Path, *, seed: int = 0, n_clusters: int = 4):
    """Clark et al.'s head clustering under four variants; writes ``cluster.parquet``,
    ``artifact.json``, ``cluster.png`` and ``manifest.json``."""
    from attncoda.experiments.cluster import cluster, write_cluster
    from attncoda.report.figures_cluster import cluster_figure

    out = Path(out)
    result = cluster(model.rows, seed=seed, n_clusters=n_clusters)
    write_cluster(result, out)
    cluster_figure(result, out / "cluster.png")
    _manifest(out, "cluster", [model], n_clusters=n_clusters)
    return result


def run_safety(
    models: list[ModelRows],
    out: str | Path,
    *,
    n_bins: int = 5,
    tol: float = CAPTURE_TOL,
    flips_results: dict[str, Any] | None = None,
    threshold: float | None = None,
):
    """Flip rate binned by sink share of d_A² and by sink-mass gap; writes
    ``safety.parquet``, ``safety_grid.parquet``, ``safety.png`` (``safety_<model>.png`` per
    model for several models) and ``manifest.json``; returns ``(table, grid, figures)``.
    A bin is safe when its flip rate's upper 95% bound is below ``threshold`` (default
    :data:`attncoda.experiments.safety.DEFAULT_SAFE_THRESHOLD`, 5%)."""
    import pandas as pd

    from attncoda.experiments.safety import DEFAULT_SAFE_THRESHOLD, safety_map
    from attncoda.report.figures_flips import plot_safety
    from attncoda.store import write_table
    from attncoda.store.runs import slug

    threshold = DEFAULT_SAFE_THRESHOLD if threshold is None else threshold

    out = Path(out)
    results = [
        safety_map(
            m.rows,
            n_bins=n_bins,
            tol=tol,
            flips_result=(flips_results or {}).get(m.rows.model),
            threshold=threshold,
        )
        for m in models
    ]
    table = pd.concat([r.table for r in results], ignore_index=True)
    grid = pd.concat([r.grid for r in results], ignore_index=True)
    write_table(table, out / "safety.parquet")
    write_table(grid, out / "safety_grid.parquet")
    names = list(dict.fromkeys(grid["model"]))
    # One figure per model: safety.png for one model, safety_<model>.png for several.
    figures = [
        plot_safety(
            grid[grid["model"] == name],
            out / ("safety.png" if len(names) == 1 else f"safety_{slug(name)}.png"),
        )
        for name in names
    ]
    _manifest(out, "safety", models, n_bins=n_bins, tol=tol, threshold=threshold)
    return table, grid, figures


def predictor_rows(models: list[ModelRows], *, n_boot: int = 0, tol: float = CAPTURE_TOL):
    """The predictor's training (or test) rows: sink features and measured flip rates."""
    from attncoda.experiments.flips import flips
    from attncoda.experiments.predictor import predictor_row

    rows = []
    for m in models:
        result = flips(m.rows, n_boot=max(n_boot, 1), tol=tol)
        rows.append(predictor_row(m.rows, result))
    return rows


def fit_and_freeze(rows: list[dict[str, Any]], path: str | Path, *, overwrite: bool = False):
    """Fit the flip-rate predictor on ``rows`` and write it, frozen, to ``path``."""
    from attncoda.experiments.predictor import fit_predictor

    if len(rows) < 2:
        raise AttncodaError(f"the predictor needs at least 2 training models; got {len(rows)}")
    predictor = fit_predictor(rows)
    freeze_predictor(predictor, path, overwrite=overwrite)
    return predictor


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


def _manifest(out: Path, command: str, models: list[ModelRows], **settings: Any) -> None:
    from attncoda.store import write_manifest

    configs = [m.captured.config for m in models]
    infos = [m.captured.info.to_dict() for m in models]
    write_manifest(out, command, {"models": configs, **settings}, model_info=infos)


__all__ = [
    "CAPTURE_TOL",
    "ModelRows",
    "apply_predictor",
    "fit_and_freeze",
    "freeze_predictor",
    "model_rows",
    "predictor_rows",
    "run_cluster",
    "run_flips",
    "run_safety",
    "shipped_predictor",
]
