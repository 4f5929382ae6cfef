"""The train unit of a run: the train-tiny series collapse reads, and its training curves.

When no series is given, a run trains one into ``DIR/series/train-tiny`` (its settings:
``config["train"]``, :class:`attncoda.run.config.TrainSeries`). The unit's tables are the
curves of the series: ``train`` (loss and first-token attention per layer and checkpoint)
and, on Bigram-Backcopy, ``train_heads`` (attention on the BOS at trigger and non-trigger
queries, per head).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SERIES_FOLDER", "train_unit"]

#: Where a run trains its default series, under the run folder.
SERIES_FOLDER = Path("series") / "train-tiny"


def train_unit(config: Mapping[str, Any], root: str | Path) -> dict[str, pd.DataFrame]:
    """Train (or find trained) the run's series under ``root``; its tables by name."""
    import pandas as pd

    from attncoda.training.train import TrainConfig, train_tiny

    train = config["train"]
    train_config = TrainConfig(
        task=train["task"],
        steps=train["steps"],
        seed=config["seed"],
        size=train["size"],
        window=train["window"],
        batch_size=train["batch_size"],
        lr=train["lr"],
        corpus=config["corpus"]["text"],
    )
    result = train_tiny(Path(root) / SERIES_FOLDER, train_config, threads=1, progress=False)
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
