"""``attncoda profile``: per-row and per-head statistics of one model on a corpus."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda.run.common import Captured, capture_corpus


@dataclass(frozen=True)
class ProfileResult:
    """What ``attncoda profile`` wrote.

    Attributes
    ----------
    out : Path
        The run folder.
    heads : pandas.DataFrame
        One row per (layer, head) (also in ``heads.parquet``).
    layers : pandas.DataFrame
        Per-layer means, as printed.
    files : tuple of Path
        rows.parquet, heads.parquet, manifest.json, profile.png.
    captured : Captured
        The capture itself (statistics only; no full rows recorded).
    """

    out: Path
    heads: Any
    layers: Any
    files: tuple[Path, ...]
    captured: Captured


def profile(
    spec: str,
    out: str | Path,
    *,
    text: str | None = None,
    sink: str = "first",
    max_tokens: int = 128,
    docs: int = 32,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = False,
    loaded: tuple | None = None,
    captured: Captured | None = None,
    **options: Any,
) -> ProfileResult:
    """Capture ``docs`` windows of the corpus and write the per-row and per-head tables.

    Writes ``rows.parquet`` (one row per document, layer, head and real query position),
    ``heads.parquet`` (per-head means over rows with content, and row counts),
    ``manifest.json`` and ``profile.png`` (layer × head heatmaps of sink mass and the exact
    entropy split) into ``out``. ``captured`` (e.g. :func:`attncoda.run.common.capture_file`
    of attention saved elsewhere) replaces the model run; ``options`` go to
    :func:`attncoda.run.common.capture_corpus` (``device``, ``dtype``, ``method``).
    """
    from attncoda.experiments.profile import head_summary, layer_summary
    from attncoda.report.figures_profile import profile_heatmap
    from attncoda.store import write_manifest, write_table

    # The profile tables hold per-row statistics only: no full rows are recorded.
    captured = captured or capture_corpus(
        spec,
        text=text,
        sink=sink,
        max_tokens=max_tokens,
        docs=docs,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        loaded=loaded,
        record_rows="none",
        **options,
    )
    out = Path(out)
    rows = captured.capture.to_frame()
    heads = head_summary(rows)
    files = (
        write_table(rows, out / "rows.parquet"),
        write_table(heads, out / "heads.parquet"),
        profile_heatmap(heads, out / "profile.png", model=spec, sink=sink),
        write_manifest(out, "profile", captured.config, model_info=captured.info.to_dict()),
    )
    return ProfileResult(
        out=out, heads=heads, layers=layer_summary(heads), files=files, captured=captured
    )
