"""The recorded reference run: the one source of every result the README and the site state.

The reference run ships with the package (``attncoda.run.compare.reference_run()``:
``src/attncoda/run/reference/``, so that ``attncoda compare`` checks a user's demo run
against it): a small copy of one ``make demo`` run, its ``manifest.json`` (the config, the
packages, the CPU, the date and the wall time) and its ``tables/``. From them:

- the README's results table (between ``<!-- attncoda:headline -->`` and
  ``<!-- /attncoda:headline -->``) is :func:`attncoda.report.headline.headline`, which
  ``attncoda demo`` also prints for the user's run; ``python docs/hooks/results.py`` writes
  it into the README;
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
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from attncoda.experiments.contract import experiment  # noqa: E402
from attncoda.experiments.prune import ratio_text  # noqa: E402
from attncoda.experiments.view import is_missing as missing  # noqa: E402
from attncoda.experiments.view import pct, prose_name  # noqa: E402
from attncoda.report.headline import headline, machine, run_context  # noqa: E402
from attncoda.run.compare import reference_run  # noqa: E402

REFERENCE = reference_run()
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- attncoda:results -->$", re.M)
HEADLINE = re.compile(r"(<!-- attncoda:headline -->\n)(.*?)(<!-- /attncoda:headline -->)", re.S)
SERIES = "bigram-backcopy"
#: The reference run's tables, sink spec and settings, read once.
CTX = run_context(REFERENCE)


@lru_cache(maxsize=1)
def manifest() -> dict[str, Any]:
    """The reference run's manifest."""
    return dict(json.loads((REFERENCE / "manifest.json").read_text(encoding="utf-8")))


def table(name: str) -> Any:
    """Table ``name`` of the reference run (a pandas DataFrame)."""
    return CTX.frames[name]


def collapse_row(level: str = "model") -> Any:
    """The first-to-last change of the shipped series at ``level`` (one row)."""
    return table("collapse").query(f"pair_kind == 'first_last' and level == '{level}'").iloc[0]


# --------------------------------------------------------------------------- the figures


def rand(model: str, a: str = "keep", b: str = "drop") -> float:
    """Adjusted Rand index of the k-means clusters of two variants."""
    found = table("cluster_agreement")
    row = found[(found["model"] == model) & (found["variant_a"] == a) & (found["variant_b"] == b)]
    return float(row["adjusted_rand"].iloc[0])


def predictor_rows() -> Any:
    """The predictor table, one row per (model, revision)."""
    return table("predictor")


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


def readme_with_headline(text: str) -> str:
    """``text`` (the README) with its headline block rewritten from the reference run."""
    if not HEADLINE.search(text):
        raise ValueError("README.md has no <!-- attncoda:headline --> block")
    return HEADLINE.sub(lambda m: m.group(1) + headline(REFERENCE) + m.group(3), text)


# --------------------------------------------------------------------------- the site


def _markdown_table(frame: Any, formats: dict[str, Callable[[Any], str]]) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = [
        "| " + " | ".join(formats.get(c, str)(v) for c, v in row.items()) + " |"
        for _, row in frame.iterrows()
    ]
    return "\n".join([head, rule, *body])


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="figure" src="data:image/png;base64,{data}"/>'


def _figure(name: str, model: str | None = None) -> str:
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
        f"The reference run is {machine(REFERENCE)} (`attncoda demo`, the demo scale; "
        f"torch {found['packages'].get('torch')}, transformers "
        f"{found['packages'].get('transformers')}). Its manifest and tables are committed "
        "with the package under `src/attncoda/run/reference/` (`attncoda compare` checks a "
        "run against it); this page is drawn from them when the site is "
        "built, and `tests/test_results.py` checks every figure the README and these pages "
        "state against them.",
        "",
        "## Headline",
        "",
        headline(REFERENCE),
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
    ci = {c: (lambda v: "" if missing(v) else pct(v)) for c in ("flip_rate", "ci_low", "ci_high")}
    fine = ("rate_rounding", "ci_rounding")
    ci |= {c: (lambda v: "" if missing(v) else f"{100 * v:.2g}%") for c in fine}
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
                c: (lambda v: "" if missing(v) else pct(v))
                for c in predictor.columns
                if c.endswith(("predicted", "predicted_low", "predicted_high", "measured"))
            },
        ),
        "",
        experiment("predictor").view.headline.below(CTX),
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
                "layer": lambda v: "" if missing(v) or v < 0 else str(int(v)),
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
            ratio_text(r) for _, r in rows.iterrows()
        ]
        wide = rows.pivot_table(
            index=["channel", "order"], columns="k", values="cell", aggfunc="first"
        ).reset_index()
        wide.columns = [c if c in ("channel", "order") else f"k = {c}" for c in wide.columns]
        first = rows.iloc[0]
        unpruned = prune[(prune["model"] == model) & (prune["k"] == 0)]["perplexity"].iloc[0]
        out += [
            f"**{prose_name(model)}** (unpruned perplexity {unpruned:.2f}; "
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
    print(f"README.md: headline rewritten from {REFERENCE}")
