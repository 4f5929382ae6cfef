"""The recorded reference run: the one source of every result the README and the site state.

``docs/results/reference/`` holds a small copy of one ``make demo`` run: its
``manifest.json`` (the config, the packages, the CPU, the date and the wall time) and its
``tables/``. From them:

- :func:`headline` is the README's results table (between ``<!-- attncoda:headline -->``
  and ``<!-- /attncoda:headline -->``); ``python docs/hooks/results.py`` writes it there;
- :func:`page` is the site's results page: a line ``<!-- attncoda:results -->`` of a page
  becomes every table of the run and its figures (mkdocs hook, ``on_page_markdown``);
- :func:`value` gives one figure by key. A figure in prose is followed by
  ``<!-- ref KEY -->``; ``tests/test_results.py`` checks every such figure, and the
  README's table, against the run at the digits shown.

Percentages are of fractions in the tables; nats are the tables' own.
"""

from __future__ import annotations

import base64
import io
import json
import re
import sys
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "results" / "reference"
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- attncoda:results -->$", re.M)
HEADLINE = re.compile(r"(<!-- attncoda:headline -->\n)(.*?)(<!-- /attncoda:headline -->)", re.S)
#: How models are named in prose, in the demo's order.
NAMES = {"smollm2": "SmolLM2", "gemma3": "Gemma 3", "minilm": "MiniLM"}
SERIES = "bigram-backcopy"
METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")


@lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    """The reference run's manifest."""
    return json.loads((REFERENCE / "manifest.json").read_text(encoding="utf-8"))


@cache
def table(name: str) -> Any:
    """Table ``name`` of the reference run (a pandas DataFrame)."""
    import pandas as pd

    return pd.read_parquet(REFERENCE / "tables" / f"{name}.parquet")


# --------------------------------------------------------------------------- the figures


def pct(x: float, digits: int = 1) -> str:
    """A fraction as a percentage: ``pct(0.7944) == "79.4%"``."""
    return f"{100 * x:.{digits}f}%"


def times(x: float) -> str:
    """A perplexity ratio as the report writes it: ``×1.72``, ``×460``, ``×4.4·10⁷``."""
    if x >= 1000:
        exponent = len(str(int(x))) - 1
        sup = str(exponent).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
        return f"×{x / 10**exponent:.1f}·10{sup}"
    return f"×{x:.3g}" if x >= 100 else f"×{x:.2f}" if x < 10 else f"×{x:.1f}"


def flip_rates(model: str) -> Any:
    """The flips rows of ``model``, by metric."""
    flips = table("flips")
    return flips[flips["model"] == model].set_index("metric")


def collapse_row(level: str = "model") -> Any:
    """The first-to-last change of the shipped series at ``level`` (one row)."""
    found = table("collapse")
    rows = found.query(f"pair_kind == 'first_last' and level == '{level}'")
    return rows.iloc[0]


def rho(model: str, variant: str) -> float:
    """Spearman rho of MDS axis 1 with head sink mass, of ``variant``."""
    found = table("cluster_summary")
    row = found[(found["model"] == model) & (found["variant"] == variant)]
    return float(row["spearman_axis1_vs_sink_mass"].iloc[0])


def rand(model: str, a: str = "keep", b: str = "drop") -> float:
    """Adjusted Rand index of the k-means clusters of two variants."""
    found = table("cluster_agreement")
    row = found[(found["model"] == model) & (found["variant_a"] == a) & (found["variant_b"] == b)]
    return float(row["adjusted_rand"].iloc[0])


def predictor_rows() -> Any:
    """The predictor table, one row per (model, revision)."""
    return table("predictor")


def counted() -> Any:
    """The predictor's counted verdicts: held-out models read on protocol."""
    rows = predictor_rows()
    return rows[rows["counted"]]


def prune_row(model: str, channel: str, order: str, k: int) -> Any:
    found = table("prune")
    rows = found[
        (found["model"] == model)
        & (found["channel"] == channel)
        & (found["order"] == order)
        & (found["k"] == k)
        & (found["ablation"] == "zero")
    ]
    return rows.iloc[0]


def prune_ratio(model: str, channel: str, order: str, k: int) -> float:
    return float(prune_row(model, channel, order, k)["ratio"])


def _ratio(model: str, channel: str, order: str, k: int) -> str:
    """A ratio with its paired interval: ``×460 [391, 540]``."""
    row = prune_row(model, channel, order, k)
    if _missing(row["ratio_ci_low"]):
        return times(row["ratio"])
    low, high = times(row["ratio_ci_low"]), times(row["ratio_ci_high"])
    return f"{times(row['ratio'])} [{low.lstrip('×')}, {high.lstrip('×')}]"


def _values() -> dict[str, Callable[[], float]]:
    return {
        "collapse.sink_share": lambda: float(collapse_row()["sink_share"]),
        "collapse.delta_entropy": lambda: float(collapse_row()["delta_entropy"]),
        "collapse.delta_sink": lambda: float(collapse_row()["delta_sink"]),
        "collapse.delta_content": lambda: float(collapse_row()["delta_content"]),
        "collapse.sink_mass_from": lambda: float(collapse_row()["mean_sink_mass_from"]),
        "collapse.sink_mass_to": lambda: float(collapse_row()["mean_sink_mass_to"]),
        "demo.minutes": lambda: float(manifest()["wall_seconds"]) / 60,
    }


def _one(model: str, column: str) -> float:
    rows = predictor_rows()
    rows = rows[rows["model"] == model]
    return float(rows[column].iloc[-1])


def value(key: str) -> float:
    """The reference run's figure ``key`` (``collapse.sink_share``, ``demo.minutes``,
    ``predictor.<model>.measured``, ...)."""
    if key.startswith("predictor."):
        _, model, column = key.split(".", 2)
        return _one(model, column)
    values = _values()
    if key not in values:
        raise KeyError(f"no reference figure {key!r}: use one of {', '.join(sorted(values))}")
    return values[key]()


# --------------------------------------------------------------------------- the README


def machine() -> str:
    """The reference run's CPU, date and wall time, in one phrase."""
    found = manifest()
    minutes, seconds = divmod(round(float(found["wall_seconds"])), 60)
    return (
        f"`make demo` on {found['created'][:10]}, {found['cpu']}, 2 cores: "
        f"{minutes} min {seconds} s"
    )


def _flips_cell() -> str:
    parts = []
    for model, name in NAMES.items():
        rates = flip_rates(model)["flip_rate"]
        parts.append(f"{name} {pct(rates.min())}–{pct(rates.max())}")
    first = table("flips").iloc[0]
    interval = (
        f"{first['ci_method']}, {int(first['n_docs'])} documents, {int(first['n_boot'])} "
        "resamples, on the results page"
        if not _missing(first["ci_low"])
        else str(first["ci_note"])
    )
    return ", ".join(parts) + f" (5 metrics; 95% intervals: {interval})"


def _cluster_cell() -> str:
    parts = []
    for model, name in NAMES.items():
        keep, drop = rho(model, "keep"), rho(model, "drop")
        parts.append(f"{name} {keep:+.2f} / {drop:+.2f}")
    return "ρ(axis 1, sink mass), keep / drop: " + ", ".join(parts)


def _tally(rows: Any, column: str) -> str:
    found = {
        v: int(rows[column].str.startswith(v).sum()) for v in ("confirmed", "abstained", "failed")
    }
    return (
        f"{found['confirmed']} confirmed, {found['abstained']} abstained, {found['failed']} failed"
    )


def _predictor_cell() -> str:
    rows = counted()
    return (
        f"{len(rows)} held-out verdicts: predictor {_tally(rows, 'verdict')}; constant "
        f"baseline {_tally(rows, 'baseline_verdict')} (below)"
    )


def _interval(row: Any, prefix: str = "") -> str:
    if row[f"{prefix}verdict"].startswith("abstained"):
        return "abstained"
    return (
        f"{pct(row[f'{prefix}predicted'])} [{pct(row[f'{prefix}predicted_low'])}, "
        f"{pct(row[f'{prefix}predicted_high'])}]"
    )


def held_out() -> str:
    """The predictor's held-out verdicts beside the constant baseline's, and which scores
    better (the mean interval score over the verdicts both give; lower is better)."""
    rows = counted()
    lines = [
        "| held out | measured | predictor | verdict | score | baseline | verdict | score |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, r in rows.iterrows():
        scores = [
            "" if _missing(r[f"{p}interval_score"]) else f"{r[f'{p}interval_score']:.3f}"
            for p in ("", "baseline_")
        ]
        lines.append(
            f"| {r['model']}@{r['revision']} | {pct(r['measured'])} | {_interval(r)} | "
            f"{r['verdict']} | {scores[0]} | {_interval(r, 'baseline_')} | "
            f"{r['baseline_verdict']} | {scores[1]} |"
        )
    both = rows.dropna(subset=["interval_score", "baseline_interval_score"])
    mine, theirs = both["interval_score"].mean(), both["baseline_interval_score"].mean()
    better = "beats" if mine < theirs else "does not beat"
    first = rows.iloc[0]
    lines += [
        "",
        f"On the {len(both)} held-out models both score, the predictor {better} the constant "
        f"baseline: mean interval score {mine:.3f} against {theirs:.3f} (Gneiting and Raftery "
        f"2007; lower is better). Intervals: {first['interval_method']}, alpha "
        f"{first['alpha']:g}, {int(first['n_training_models'])} training models in "
        f"{int(first['n_training_runs'])} runs.",
    ]
    return "\n".join(lines)


def _collapse_cell() -> str:
    row = collapse_row()
    return (
        f"{pct(row['sink_share'])} (Shapley attribution; {pct(row['sink_share_low'])}–"
        f"{pct(row['sink_share_high'])} over the two orderings): ΔH = "
        f"{row['delta_entropy']:.3f} = sink "
        f"{row['delta_sink']:.3f} + content {row['delta_content']:.3f} nats; mean sink mass "
        f"{row['mean_sink_mass_from']:.3f} → {row['mean_sink_mass_to']:.3f}"
    )


def _prune_cell() -> str:
    k = int(table("prune")[table("prune")["model"] == "smollm2"]["k"].max())
    worst = max(
        (prune_ratio("smollm2", c, o, k), c, o)
        for c in ("sink_mass", "sink_balance", "content_entropy", "full_entropy")
        for o in ("high", "low")
    )
    best = min(
        (prune_ratio("smollm2", c, o, k), c, o)
        for c in ("sink_mass", "sink_balance", "content_entropy", "full_entropy")
        for o in ("high", "low")
    )
    row = prune_row("smollm2", worst[1], worst[2], k)
    tokens = manifest()["config"]["settings"]["prune"]["max_tokens"]
    return (
        f"SmolLM2, k = {k} of 270 heads: worst {_ratio('smollm2', worst[1], worst[2], k)} "
        f"({worst[1]}, {worst[2]}est first), best {_ratio('smollm2', best[1], best[2], k)} "
        f"({best[1]}, {best[2]}est first); 95% intervals: {row['ci_method']} over "
        f"{int(row['n_windows'])} windows of {tokens} tokens"
    )


def headline() -> str:
    """The README's results table: each experiment, the paper's figure, the run's."""
    rows = [
        ("flips (keep vs drop)", "17–47% of verdicts flip", _flips_cell()),
        ("cluster (Clark et al.)", "the leading axis is the sink", _cluster_cell()),
        (
            "collapse (Bigram-Backcopy, step0 → step2000)",
            "30% / 95% / 79% of the drop is the sink (Pythia)",
            _collapse_cell(),
        ),
        ("predictor (frozen)", "1 confirmed, 1 abstained, 1 failed", _predictor_cell()),
        ("prune (zero ablation)", "the wrong channel inflates perplexity > 100×", _prune_cell()),
    ]
    lines = [
        f"{machine()}.",
        "",
        "| experiment | paper | reference run |",
        "| --- | --- | --- |",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        held_out(),
    ]
    return "\n".join(lines) + "\n"


def readme_with_headline(text: str) -> str:
    """``text`` (the README) with its headline block rewritten from the reference run."""
    if not HEADLINE.search(text):
        raise ValueError("README.md has no <!-- attncoda:headline --> block")
    return HEADLINE.sub(lambda m: m.group(1) + headline() + m.group(3), text)


# --------------------------------------------------------------------------- the site


def _markdown_table(frame: Any, formats: dict[str, Callable[[Any], str]]) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = [
        "| " + " | ".join(formats.get(c, str)(v) for c, v in row.items()) + " |"
        for _, row in frame.iterrows()
    ]
    return "\n".join([head, rule, *body])


def _missing(v: Any) -> bool:
    import pandas as pd

    return bool(pd.isna(v))


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="figure" src="data:image/png;base64,{data}"/>'


def _figure(name: str, model: str | None = None) -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from attncoda.report.figures import figure, figure_tables

    tables = {}
    for t in figure_tables(name):
        frame = table(t)
        tables[t] = frame if model is None else frame[frame["model"] == model]
    return _png(figure(name, tables))


def page() -> str:
    """The site's results page: the run, the headline, then each experiment's tables and
    figures."""
    found = manifest()
    out = [
        f"The reference run is {machine()} (`attncoda demo`, the demo scale; "
        f"torch {found['packages'].get('torch')}, transformers "
        f"{found['packages'].get('transformers')}). Its manifest and tables are committed "
        "under `docs/results/reference/`; this page is drawn from them when the site is "
        "built, and `tests/test_results.py` checks every figure the README and these pages "
        "state against them.",
        "",
        "## Headline",
        "",
        headline(),
        "## Flips",
        "",
        "Flip rate of keep vs drop verdicts per model and metric, with its 95% interval "
        "(its method and the documents behind it in the next columns), and what float32 "
        "rounding of the head distances leaves open: the triplets within their rounding of "
        "the tie edge, and how far the rate and the interval's ends can move by them "
        "([Design](design.md#verdicts-and-ratios-within-rounding)).",
        "",
    ]
    columns = ["model", "metric", "n_triplets", "flip_rate", "ci_low", "ci_high", "n_docs",
               "ci_method", "n_fragile", "rate_rounding", "ci_rounding"]  # fmt: skip
    flips = table("flips")
    flips = flips[[c for c in columns if c in flips]]
    ci = {c: (lambda v: "" if _missing(v) else pct(v)) for c in ("flip_rate", "ci_low", "ci_high")}
    fine = ("rate_rounding", "ci_rounding")
    ci |= {c: (lambda v: "" if _missing(v) else pct(v, 2)) for c in fine}
    out += [_markdown_table(flips, ci), ""]
    out += [_figure("flips"), "", "## Cluster", ""]
    summary = table("cluster_summary")[
        ["model", "variant", "spearman_axis1_vs_sink_mass", "mean_sink_share_of_aitchison_sq"]
    ]
    out += [
        _markdown_table(
            summary,
            {
                "spearman_axis1_vs_sink_mass": lambda v: f"{v:+.2f}",
                "mean_sink_share_of_aitchison_sq": pct,
            },
        ),
        "",
    ]
    agreement = table("cluster_agreement")[["model", "variant_a", "variant_b", "adjusted_rand"]]
    out += [_markdown_table(agreement, {"adjusted_rand": lambda v: f"{v:.2f}"}), ""]
    out += [_figure("cluster", "smollm2"), "", "## Predictor", ""]
    predictor = predictor_rows()[
        [
            "model",
            "revision",
            "relation",
            "measured",
            "predicted",
            "predicted_low",
            "predicted_high",
            "verdict",
            "baseline_predicted",
            "baseline_predicted_low",
            "baseline_predicted_high",
            "baseline_verdict",
            "counted",
        ]
    ]
    out += [
        _markdown_table(
            predictor,
            {
                c: (lambda v: "" if _missing(v) else pct(v))
                for c in predictor.columns
                if c.endswith(("predicted", "predicted_low", "predicted_high", "measured"))
            },
        ),
        "",
        held_out(),
        "",
        _figure("predictor"),
        "",
        "## Collapse",
        "",
    ]
    collapse = table("collapse").query("pair_kind == 'first_last' and level != 'head'")[
        [
            "level",
            "layer",
            "delta_entropy",
            "delta_sink",
            "delta_content",
            "sink_share",
            "sink_share_low",
            "sink_share_high",
        ]
    ]
    nats = lambda v: f"{v:.3f}"  # noqa: E731
    out += [
        _markdown_table(
            collapse,
            {
                "delta_entropy": nats,
                "delta_sink": nats,
                "delta_content": nats,
                "sink_share": pct,
                "sink_share_low": pct,
                "sink_share_high": pct,
                "layer": lambda v: "" if _missing(v) or v < 0 else str(int(v)),
            },
        ),
        "",
        _figure("collapse", SERIES),
        "",
        "## Prune",
        "",
    ]
    prune = table("prune")
    for model in prune["model"].unique():
        rows = prune[(prune["model"] == model) & (prune["ablation"] == "zero")].copy()
        rows["cell"] = [
            _ratio(model, r["channel"], r["order"], int(r["k"])) for _, r in rows.iterrows()
        ]
        wide = rows.pivot_table(
            index=["channel", "order"], columns="k", values="cell", aggfunc="first"
        ).reset_index()
        wide.columns = [c if c in ("channel", "order") else f"k = {c}" for c in wide.columns]
        first = rows.iloc[0]
        unpruned = prune[(prune["model"] == model) & (prune["k"] == 0)]["perplexity"].iloc[0]
        out += [
            f"**{NAMES.get(model, model)}** (unpruned perplexity {unpruned:.2f}; "
            f"ratio to it, with its 95% interval: {first['ci_method']} over "
            f"{int(first['n_windows'])} windows)",
            "",
            _markdown_table(wide, {}),
            "",
            _figure("prune", model),
            "",
        ]
    out += ["## Profile", ""]
    heads = table("profile_heads")
    rows = heads.groupby("model", sort=False).agg(
        heads=("sink_mass", "size"),
        mean_sink_mass=("sink_mass", "mean"),
        heads_over_half=("sink_mass", lambda s: int((s > 0.5).sum())),
    )
    out += [
        _markdown_table(rows.reset_index(), {"mean_sink_mass": lambda v: f"{v:.2f}"}),
        "",
    ]
    for model in heads["model"].unique():
        out += [_figure("profile", model), ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **kwargs: object) -> str:
    return MARKER.sub(lambda m: page_text(), markdown) if MARKER.search(markdown) else markdown


@lru_cache(maxsize=1)
def page_text() -> str:
    return page()


if __name__ == "__main__":
    README.write_text(readme_with_headline(README.read_text(encoding="utf-8")), encoding="utf-8")
    print("README.md: headline rewritten from docs/results/reference/")
