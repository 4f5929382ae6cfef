"""The train unit of a run: the train-tiny series collapse reads, and its training curves.

When no series is given, a run trains one into ``DIR/series/train-tiny`` (its settings:
``config["train"]``, :class:`attncoda.run.config.TrainSeries`). The unit's tables are the
curves of the series: ``train`` (loss and first-token attention per layer and checkpoint)
and, on Bigram-Backcopy, ``train_heads`` (attention on the BOS at trigger and non-trigger
queries, per head).

When the run also applies the predictor, the train unit trains the Bigram-Backcopy runs of
:data:`UNSEEN_SERIES` into ``DIR/series/unseen/<name>``: models the shipped predictor never
saw (by name, weights or recipe), to whose last checkpoints the run applies it, so that its
report tests the predictor on genuinely unseen models.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SERIES_FOLDER", "UNSEEN_FOLDER", "UNSEEN_SERIES", "train_unit", "unseen_points"]

#: Where a run trains its default series, under the run folder.
SERIES_FOLDER = Path("series") / "train-tiny"
#: Where a run trains the runs of :data:`UNSEEN_SERIES`, under the run folder.
UNSEEN_FOLDER = Path("series") / "unseen"
#: Bigram-Backcopy runs the shipped predictor never saw, chosen before any fit and never in
#: one: another seed, another trigger count, another size (TrainConfig fields besides
#: ``task``; the steps are at most the run's own series', so a short run stays short). None
#: shares a recipe with a training model of the shipped predictor
#: (``experiments/data/PROVENANCE.md``): its training runs are seeds 0 and 1 of the defaults.
UNSEEN_SERIES: dict[str, dict[str, Any]] = {
    "bigram-backcopy-seed2": {"seed": 2, "steps": 1000},
    "bigram-backcopy-triggers5": {"seed": 0, "triggers": 5, "steps": 1000},
    "bigram-backcopy-small": {"seed": 0, "size": "small", "steps": 500},
}


def unseen_points(steps: int) -> list[list[Any]]:
    """The run config's entries of :data:`UNSEEN_SERIES` for a series of ``steps`` steps:
    ``[name, last step, spec under the run folder, TrainConfig fields]`` each."""
    points = []
    for name, fields in UNSEEN_SERIES.items():
        recipe = {"task": "bigram-backcopy", **fields, "steps": min(fields["steps"], steps)}
        spec = f"run:{(UNSEEN_FOLDER / name).as_posix()}/step{recipe['steps']}"
        points.append([name, recipe["steps"], spec, recipe])
    return points


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
    for name, _, _, fields in (config.get("series") or {}).get("unseen", []):
        train_tiny(
            Path(root) / UNSEEN_FOLDER / name, TrainConfig(**fields), threads=1, progress=False
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
