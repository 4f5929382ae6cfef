"""The train unit of a run that retrains its series, and what retraining changed.

A run reads the shipped Bigram-Backcopy checkpoints by default (:mod:`attncoda.models.shipped`).
With the ``train`` setting ``retrain`` (``reproduce --retrain``) it trains its series into
``DIR/series/train-tiny`` instead (its settings: the run config's ``train``,
:class:`attncoda.run.series.TrainSeries`). The unit's tables are the curves of the series:
``train`` (loss and first-token attention per layer and checkpoint) and, on Bigram-Backcopy,
``train_heads`` (attention on the BOS at trigger and non-trigger queries, per head).

When the run also applies the predictor, the train unit trains the unseen runs of
:data:`attncoda.models.shipped.UNSEEN` into ``DIR/series/unseen/<name>``: models the shipped
predictor never saw (by name, weights, recipe or seed), to whose last checkpoints the run
applies it. :func:`retrain_table` then sets what the retrained series and runs gave beside
what the shipped checkpoints give: training is not bit-identical across CPU vendors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from attncoda.run.config import RunConfig
from attncoda.run.series import SERIES_FOLDER, UNSEEN_FOLDER

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["retrain_table", "train_unit"]


def train_unit(config: RunConfig, root: str | Path) -> dict[str, pd.DataFrame]:
    """Train (or find trained) the run's series under ``root``; its tables by name."""
    import pandas as pd

    from attncoda.training.train import TrainConfig, train_tiny

    train, series = config.train, config.series
    assert train is not None and series is not None  # planned for a series the run trains
    train_config = TrainConfig(
        task=train.task,
        steps=train.steps,
        seed=config.options.seed,
        size=train.size,
        window=train.window,
        batch_size=train.batch_size,
        lr=train.lr,
        corpus=config.corpus.text,
    )
    result = train_tiny(Path(root) / SERIES_FOLDER, train_config, threads=1, progress=False)
    for run in series.unseen or ():
        train_tiny(
            Path(root) / UNSEEN_FOLDER / run.name,
            TrainConfig(**run.recipe),
            threads=1,
            progress=False,
        )
    rows = []
    for step, tr, va, att in zip(
        result.steps, result.train_loss, result.val_loss, result.first_token_attention, strict=True
    ):
        for layer, value in enumerate(att):
            rows.append(
                {
                    "step": int(step),
                    "train_loss": float(tr),
                    "val_loss": float(va),
                    "layer": layer,
                    "first_token_attention": float(value),
                }
            )
    heads = [
        {
            "step": int(step),
            "layer": layer,
            "head": head,
            "bos_attention_trigger": float(t),
            "bos_attention_non_trigger": float(n),
        }
        for step, trig, rest in zip(
            result.steps,
            result.bos_attention_trigger,
            result.bos_attention_non_trigger,
            strict=True,
        )
        for layer, (lt, ln) in enumerate(zip(trig, rest, strict=True))
        for head, (t, n) in enumerate(zip(lt, ln, strict=True))
    ]
    tables = {"train": pd.DataFrame(rows)}
    if heads:  # Bigram-Backcopy: active (trigger) versus dormant (non-trigger) heads
        tables["train_heads"] = pd.DataFrame(heads)
    return tables


def retrain_table(tables: Mapping[str, pd.DataFrame | None]) -> pd.DataFrame:
    """What retraining on this machine changed, beside the shipped checkpoints' figures.

    Parameters
    ----------
    tables : mapping
        The run's ``collapse`` and ``predictor`` tables (either may be None).

    Returns
    -------
    pandas.DataFrame
        One row per quantity: ``quantity`` (``"collapse sink share"`` of the series, first to
        last checkpoint, model level; ``"flip rate"`` of each unseen run's last checkpoint,
        the predictor's target), ``model``, ``shipped`` (what the shipped checkpoints gave in
        the reference run: :func:`attncoda.models.shipped.manifest`'s ``measured``),
        ``retrained`` (this run) and ``change`` (retrained minus shipped). Fractions, not
        percent.
    """
    import pandas as pd

    from attncoda.models.shipped import SERIES, UNSEEN, manifest

    measured = manifest().get("measured", {})
    rows = []
    collapse = tables.get("collapse")
    if collapse is not None and not collapse.empty:
        model = collapse.query("pair_kind == 'first_last' and level == 'model'")
        if not model.empty:
            rows.append(
                (
                    "collapse sink share",
                    SERIES,
                    measured.get("collapse_sink_share"),
                    float(model["sink_share"].iloc[0]),
                )
            )
    predictor = tables.get("predictor")
    if predictor is not None and not predictor.empty:
        shipped_rates = measured.get("flip_rate", {})
        for name in UNSEEN:
            found = predictor[predictor["model"] == name]
            if not found.empty:
                rows.append(
                    ("flip rate", name, shipped_rates.get(name), float(found["measured"].iloc[0]))
                )
    frame = pd.DataFrame(rows, columns=["quantity", "model", "shipped", "retrained"])
    frame["shipped"] = frame["shipped"].astype(float)
    frame["change"] = frame["retrained"] - frame["shipped"]
    return frame
