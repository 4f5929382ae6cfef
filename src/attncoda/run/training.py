"""Runs of the training-dynamics experiments: entropy collapse over a checkpoint series and
channel-aware head pruning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.run.common import corpus_windows


def run_collapse(
    series: str,
    out: str | Path,
    *,
    text: str | None = None,
    sink: str = "first",
    max_tokens: int = 128,
    docs: int = 32,
    progress: bool = False,
) -> Any:
    """Entropy per checkpoint and the exact sink/content split of its changes.

    The windows are cut with the first checkpoint's tokenizer and fed as token ids to every
    checkpoint (the series must share a tokenizer). Writes ``collapse.parquet``,
    ``collapse_checkpoints.parquet``, ``collapse.json``, ``collapse.png`` and
    ``manifest.json`` into ``out``.
    """
    from attncoda.experiments.collapse import collapse, write_collapse
    from attncoda.models.load import load_model
    from attncoda.models.series import parse_series
    from attncoda.report.figures_training import collapse_figure
    from attncoda.store import write_manifest

    points = parse_series(series)
    _, tokenizer, _ = load_model(points[0].spec)
    if tokenizer is None:
        raise AttncodaError(f"checkpoint {points[0].spec!r} has no tokenizer to cut windows")
    windows, corpus_facts = corpus_windows(tokenizer, text=text, max_tokens=max_tokens, docs=docs)
    result = collapse(
        points, [w.input_ids for w in windows], sink=sink, progress=progress, model=series
    )
    out = Path(out)
    write_collapse(result, out)
    collapse_figure(result.table, out / "collapse.png", model=series, sink=str(sink))
    config = {
        "series": series,
        "checkpoints": [p.spec for p in points],
        "sink": sink,
        "corpus": corpus_facts,
        "docs": docs,
        "max_tokens": max_tokens,
    }
    write_manifest(out, "collapse", config)
    return result


def run_prune(
    spec: str,
    out: str | Path,
    *,
    channels: tuple[str, ...],
    orders: tuple[str, ...],
    ablations: tuple[str, ...],
    ks: tuple[int, ...],
    text: str | None = None,
    sink: str = "first",
    max_tokens: int = 128,
    n_profile: int = 16,
    n_eval: int = 16,
    seed: int = 0,
    progress: bool = False,
    loaded: tuple | None = None,
) -> Any:
    """Prune heads by each channel and measure held-out perplexity.

    Heads are ranked on the first ``n_profile`` windows and perplexity is measured on the
    last ``n_eval`` windows of the corpus (disjoint). Writes ``prune.parquet``,
    ``prune_heads.parquet``, ``prune.json``, ``prune.png`` and ``manifest.json``.
    """
    from attncoda.experiments.prune import prune, split_windows, write_prune
    from attncoda.models.load import load_model
    from attncoda.report.figures_training import prune_figure
    from attncoda.store import write_manifest

    model, tokenizer, info = loaded if loaded is not None else load_model(spec)
    if not info.causal:
        raise AttncodaError(
            f"prune measures perplexity, which needs a causal language model; {spec!r} is "
            f"{info.architecture}"
        )
    windows, corpus_facts = corpus_windows(
        tokenizer, text=text, max_tokens=max_tokens, docs=n_profile + n_eval
    )
    profile_windows, eval_windows = split_windows(windows, n_profile, n_eval)
    result = prune(
        model,
        tokenizer,
        profile_windows,
        eval_windows,
        channels=channels,
        orders=orders,
        ablations=ablations,
        ks=ks,
        sink=sink,
        seed=seed,
        model_name=spec,
        progress=progress,
    )
    out = Path(out)
    write_prune(result, out)
    prune_figure(result.table, out / "prune.png", model=spec)
    config = {
        "model": spec,
        "channels": list(channels),
        "orders": list(orders),
        "ablations": list(ablations),
        "ks": list(ks),
        "sink": sink,
        "corpus": corpus_facts,
        "n_profile": n_profile,
        "n_eval": n_eval,
        "max_tokens": max_tokens,
        "seed": seed,
    }
    write_manifest(out, "prune", config, model_info=info.to_dict())
    return result
