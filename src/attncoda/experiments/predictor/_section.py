"""The report section of the frozen predictor: each model's prediction beside the constant
baseline's, with intervals, widths, absolute errors, interval scores and verdicts.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import Any

from attncoda.experiments.predictor._figure import draw
from attncoda.experiments.predictor._verdict import EDGE, VERDICTS, standing, verdict_text
from attncoda.experiments.view import (
    NA,
    Context,
    figure_or_note,
    fmt_num,
    fmt_pct,
    groups,
    is_missing,
    note,
    paper_vs_measured,
    table,
)

__all__ = ["predictor_section"]


def predictor_section(ctx: Context) -> str:
    """The shipped frozen predictor on each model: its prediction or abstention, the
    constant baseline's prediction, the measured rate, and both verdicts.

    Only held-out models read with the predictor's fitted protocol test it: the counts of
    confirmed, abstained and failed are over those alone
    (:func:`attncoda.experiments.predictor.standing`). A training model (matched by weights,
    near copy, ``train-tiny`` recipe or name), a checkpoint of a run that gave training
    models (interpolated, or the same run) and a row read with another protocol are listed
    apart, their verdicts no test. Beside each verdict stand the interval's width, the
    point's absolute error and the interval score, for the predictor and the baseline: a
    count of confirmations alone rewards wide intervals. A verdict its row states to be
    decided within rounding (``verdict_edge``, ``baseline_edge``) is shown "on the edge" and
    counted apart, so that no count depends on the last bits.
    """
    rows = ctx.tables.predictor
    convention = (
        "keep vs drop flip rate, mean over the row metrics (predicted and measured), "
        f"sink = {ctx.sink}; {_interval_named(rows)}"
    )
    labelled = [(label, r) for label, g in groups(rows) for r in g.to_dict("records")]
    stood = [standing(r) for _, r in labelled]
    return (
        paper_vs_measured(convention, _claims([r for _, r in labelled], stood))
        + _models_table(rows, labelled, stood, convention)
        + note(_HOW_TO_READ)
        + figure_or_note(
            lambda: draw({"predictor": rows}),
            alt="Predicted and baseline flip-rate intervals and the measured flip rate per model",
            caption="The frozen predictor's interval and point (blue) and the constant "
            "baseline's (grey) beside the measured flip rate (red), per model (a model whose "
            "verdict is no test is labelled as such).",
            convention=convention,
        )
    )


def _claims(records: list[dict[str, Any]], stood: list[tuple[bool, str]]) -> list[tuple]:
    """The verdicts of both predictors on the held-out models read on protocol (their
    :func:`~attncoda.experiments.predictor.standing` ``stood``), their mean interval
    scores, and how many rows were no test, and why, as claims."""
    counted = [r for r, (yes, _) in zip(records, stood, strict=True) if yes]
    held = _tally(counted, "verdict", "verdict_edge", VERDICTS)
    base_held = _tally(counted, "baseline_verdict", "baseline_edge", ("confirmed", "failed"))
    kinds = [r.get("relation") if "counted" in r else None for r in records]
    n_trained = sum(k == "training" for k in kinds)
    n_run = sum(k in ("interpolated", "same run") for k in kinds)
    n_off = sum(not yes and said.startswith(("off protocol", "read before")) for yes, said in stood)
    return [
        (
            "Verdicts of the frozen predictor on held-out models (unseen by content, of no "
            "run that gave a training model), read with its fitted protocol",
            "1 confirmation, 1 abstention, 1 failure",
            f"{held} over {len(counted)} held-out model(s)",
        ),
        (
            "Verdicts of the constant baseline (the training models' mean rate, same "
            "interval method) on the same models",
            "—",
            f"{base_held} over {len(counted)} held-out model(s)",
        ),
        (
            "Mean interval score on the held-out models the predictor did not abstain on, "
            "predictor vs baseline (lower is better)",
            "—",
            _mean_scores(counted),
        ),
        (
            "Training models of the predictor among this run's models",
            "—",
            f"{n_trained} (no test: listed apart, never counted as confirmations)",
        ),
        (
            "Checkpoints of runs that gave training models (interpolated or same run)",
            "—",
            f"{n_run} (no test: listed apart, never counted)",
        ),
        (
            "Rows read with another protocol than the predictor's",
            "—",
            f"{n_off} (off protocol: no test, never counted)",
        ),
    ]


def _models_table(rows: Any, labelled: list, stood: list, convention: str) -> str:
    """The table of every model (``labelled`` records of ``rows``, each with its standing
    ``stood``): features, what it read, the measured rate, both predictions with their
    scores and verdicts, its standing and the reason of an abstention."""
    features = [
        c for c in rows.columns if c.startswith("feature_") and not c.endswith("_rounding")
    ]
    body = []
    for (label, r), (yes, said) in zip(labelled, stood, strict=True):
        body.append(
            (
                label + ("" if yes else " *"),
                *(fmt_num(r[c], 4) for c in features),
                _read(r),
                fmt_pct(r["measured"]),
                *_scores(r, ""),
                _verdict(r.get("verdict"), yes, r.get("verdict_edge")),
                *_scores(r, "baseline_"),
                _verdict(r.get("baseline_verdict"), yes, r.get("baseline_edge")),
                said,
                "" if is_missing(r["reason"]) else str(r["reason"]),
            )
        )
    return table(
        "The shipped frozen predictor and the constant baseline per model (* = no test: "
        "a training model, a checkpoint of a training run, or a row read off the fitted "
        "protocol)",
        convention,
        ("model", *(c.removeprefix("feature_").replace("_", " ") for c in features), *_COLUMNS),
        body,
    )


#: The table's columns after the model and its features.
_COLUMNS = (
    "read with", "measured", "predicted [interval]", "width", "abs error", "interval score",
    "verdict", "baseline [interval]", "baseline width", "baseline abs error",
    "baseline interval score", "baseline verdict", "standing", "reason",
)  # fmt: skip
_HOW_TO_READ = (
    "confirmed: the measured flip rate lies inside the predicted interval; failed: it lies"
    " outside; abstained: the model lies outside the predictor's training support (its "
    "leverage above every training model's, or a feature outside its training range, "
    "beyond the features' float32 rounding; a training model matched by its weights never "
    "abstains). The baseline predicts the training models' mean rate everywhere, with an "
    "interval made the same way. Width = high − low; abs error = |measured − point|; "
    "interval score (Gneiting and Raftery 2007, eq. 43) = width + (2/α) × the distance by "
    "which the interval misses the measured rate: lower is better, and a wide interval "
    "that confirms scores worse than a narrow one that confirms. A verdict counts only on "
    "a held-out model read with the predictor's fitted protocol (what its rows read: "
    "corpus, windows and their length, and the sink, seed, metrics and tie tolerance). A "
    "model is a training model when its weights hash, its weights sketch (a near copy: the"
    " same weights in another dtype), its train-tiny recipe or its name matches one of the"
    " predictor's training models'; a checkpoint of a run that gave training models is "
    "interpolated, or the same run, never held out. On the edge: the measured rate lies "
    "within its float32 rounding (its flip rates' fragile triplets) plus twice the end's "
    "(the features' rounding through the fit; for the baseline, the rounding of the "
    "training models' rates its ends are) of an end of the interval, or the abstention "
    "within rounding of its threshold: the verdict is decided by the last bits, may go "
    "either way on another machine, and is counted apart."
)


def _interval_named(rows: Any) -> str:
    """The interval's method and its n, as the table records them."""
    if "interval_method" not in rows.columns or rows.empty:
        return "interval: the predictor file's"
    r = rows.iloc[0]
    return (
        f"interval: {r['interval_method']}, alpha = {fmt_num(r['alpha'], 2)}, "
        f"n = {int(r['n_training_models'])} training models of {int(r['n_training_runs'])} "
        "runs"
    )


def _scores(r: dict[str, Any], prefix: str) -> tuple[str, str, str, str]:
    """``point [low, high]``, width, absolute error and interval score of the predictor
    (``prefix`` "") or the baseline (``"baseline_"``); ``abstained`` / n/a when none."""
    point = r.get(f"{prefix}predicted")
    if is_missing(point) or (not prefix and bool(r.get("abstained"))):
        return ("abstained" if not prefix else NA, NA, NA, NA)
    return (
        f"{fmt_pct(point)} [{fmt_pct(r[f'{prefix}predicted_low'])}, "
        f"{fmt_pct(r[f'{prefix}predicted_high'])}]",
        fmt_pct(r.get(f"{prefix}width")),
        fmt_pct(r.get(f"{prefix}abs_error")),
        fmt_num(r.get(f"{prefix}interval_score")),
    )


def _verdict(value: Any, counted: bool, edge: Any = None) -> str:
    """A verdict as the table shows it: ``(on the edge)`` after one decided within rounding,
    ``(no test)`` after one that does not count (an off-protocol verdict says so itself)."""
    if value is None or is_missing(value):
        return NA
    said = verdict_text(value, edge)
    if counted or str(value).startswith("off protocol"):
        return said
    return f"{said} (no test)"


def _tally(records: list[dict[str, Any]], column: str, edge: str, verdicts: tuple) -> str:
    """The verdicts of ``column`` counted, those on their edge (``edge``) apart:
    ``1 confirmed, 1 abstained, 0 failed, 1 on the edge``."""
    firm, on_edge = [], 0
    for r in records:
        flag = r.get(edge)
        if flag is not None and not is_missing(flag) and bool(flag):
            on_edge += 1
        else:
            firm.append(str(r.get(column, NA)))
    said = ", ".join(f"{firm.count(v)} {v}" for v in verdicts)
    return said + (f", {on_edge} {EDGE}" if on_edge else "")


def _mean_scores(counted: list[dict[str, Any]]) -> str:
    """The mean interval scores of the predictor and the baseline over the held-out models
    the predictor did not abstain on."""
    both = [
        r
        for r in counted
        if not is_missing(r.get("interval_score"))
        and not is_missing(r.get("baseline_interval_score"))
    ]
    if not both:
        return "no held-out model with a prediction from both"
    mine = sum(float(r["interval_score"]) for r in both) / len(both)
    theirs = sum(float(r["baseline_interval_score"]) for r in both) / len(both)
    return f"{fmt_num(mine)} vs {fmt_num(theirs)} over {len(both)} held-out model(s)"


def _read(r: dict[str, Any]) -> str:
    """What a row read: ``16 × 128 tokens``; ``n/a`` for given attention."""
    windows, tokens = r.get("read_windows"), r.get("read_window_tokens")
    if windows is None or tokens is None or is_missing(windows) or is_missing(tokens):
        return NA
    corpus = r.get("read_corpus")
    where = "" if corpus is None or is_missing(corpus) else f" of {corpus}"
    return f"{int(windows)} × {int(tokens)} tokens{where}"
