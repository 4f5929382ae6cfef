"""The sections of the HTML report on head comparisons: profile, flips, cluster.

Each ``*_section(ctx)`` returns the inner HTML of one ``<section>``: a paper-vs-measured
table, the measured tables and the figures, every one captioned with its convention. They
read only the run folder's tables (``ctx.tables``); a section whose table is absent is not
called (:mod:`attncoda.report.html` says it was not run). The predictor's section is in
:mod:`attncoda.report.html_predictor`, the safety map's in :mod:`attncoda.report.html_safety`,
prune's in :mod:`attncoda.report.html_prune` and collapse's in
:mod:`attncoda.report.html_training`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attncoda.experiments.contract import MIN_BOOTSTRAP_N
from attncoda.report.html_parts import (
    NA,
    esc,
    figure_or_note,
    fmt_count,
    fmt_interval,
    fmt_nats,
    fmt_num,
    fmt_pct,
    fmt_signed,
    groups,
    interval_method,
    model_label,
    note,
    paper_vs_measured,
    table,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "Context",
    "cluster_section",
    "flips_section",
    "profile_section",
]

#: The published head-clustering variant first, then the three it is compared with.
_VARIANT_NAMES = {
    "keep": "JS, keep sink (Clark et al.)",
    "drop": "JS, drop sink",
    "aitchison_sink": "Aitchison sink term",
    "aitchison_content": "Aitchison content term",
}


@dataclass(frozen=True)
class Context:
    """What every section reads.

    Attributes
    ----------
    tables : mapping of str to pandas.DataFrame
        The run folder's tables by name.
    sink : str
        The sink spec of the run (manifest ``config.sink``), named in every convention.
    """

    tables: Mapping[str, pd.DataFrame]
    sink: str

    def need(self, name: str) -> pd.DataFrame:
        """Table ``name``, which the section's caller found present (:meth:`get`)."""
        frame = self.get(name)
        if frame is None:
            raise KeyError(name)
        return frame

    def get(self, name: str) -> pd.DataFrame | None:
        """Table ``name``, or ``None`` when the run folder lacks it or it has no rows."""
        frame = self.tables.get(name)
        return None if frame is None or len(frame) == 0 else frame


# profile -------------------------------------------------------------------------------------


def profile_section(ctx: Context) -> str:
    """Per model: mean sink mass, H(p) and its exact parts (nats), and the heatmap figure."""
    from attncoda.report.figures import figure

    heads = ctx.need("profile_heads")
    convention = (
        "none — exact sink/content split (entropy identity H(p) = h(s) + s·H(p_S/s) + "
        f"(1−s)·H(q)), sink = {ctx.sink}"
    )
    rows, claims, figures = [], [], []
    for label, g in groups(heads):
        sink_part = g["binary_term"] + g["within_sink_term"]
        major = int((g["sink_mass"] > 0.5).sum())
        rows.append(
            (
                label,
                f"{int(g['layer'].max()) + 1} × {int(g['head'].max()) + 1}",
                fmt_pct(g["sink_mass"].mean()),
                fmt_pct(g["sink_mass"].max()),
                f"{major} of {len(g)}",
                fmt_nats(g["entropy"].mean()),
                fmt_nats(sink_part.mean()),
                fmt_nats(g["content_term"].mean()),
                fmt_nats(g["content_entropy"].mean()),
            )
        )
        claims.append(
            f"{label}: mean {fmt_pct(g['sink_mass'].mean())}, {major} of {len(g)} heads above 50%"
        )
        figures.append(
            figure_or_note(
                lambda g=g: figure("profile", {"profile_heads": g}, sink=ctx.sink),
                alt=f"Layer by head heatmaps of sink mass, H(p), its sink part and its content "
                f"part for {label}",
                caption=f"{label}: per-head means over rows with content.",
                convention=convention,
            )
        )
    return (
        paper_vs_measured(
            convention,
            [
                (
                    "Sink mass of an attention row (share on the sink token)",
                    "most of a row's mass sits on one sink token",
                    "; ".join(claims),
                )
            ],
        )
        + table(
            "Per model, means over heads (each head: mean over rows with content); nats",
            convention,
            (
                "model",
                "layers × heads",
                "mean sink mass",
                "max head sink mass",
                "heads with sink mass > 50%",
                "H(p)",
                "sink part h(s) + s·H(p_S/s)",
                "content part (1−s)·H(q)",
                "H(q)",
            ),
            rows,
        )
        + note("H(p) = sink part + content part exactly, head by head and on the means.")
        + "".join(figures)
    )


# flips ---------------------------------------------------------------------------------------


def flips_section(ctx: Context) -> str:
    """Flip rates keep vs drop per model and metric, with CIs; the range over all of them."""
    from attncoda.report.figures import figure

    flips = ctx.need("flips")
    convention = f"keep vs drop (sink = {ctx.sink})"
    rates = flips["flip_rate"].astype(float)
    finite = rates[rates.notna()]
    labels = [model_label(m, r) for m, r in zip(flips["model"], flips["revision"], strict=True)]
    n_models, n_metrics = len(dict.fromkeys(labels)), flips["metric"].nunique()
    overall = (
        f"{fmt_pct(finite.min())}–{fmt_pct(finite.max())} over {n_models} model(s) × "
        f"{n_metrics} metric(s)"
        if len(finite)
        else "no decided triplets"
    )
    claims = [("Verdicts “which head is more similar” that flip", "17–47%", overall)]
    for label, g in groups(flips):
        r = g["flip_rate"].astype(float).dropna()
        if len(r):
            low, high = g.loc[r.idxmin(), "metric"], g.loc[r.idxmax(), "metric"]
            measured = f"{fmt_pct(r.min())} ({low}) – {fmt_pct(r.max())} ({high})"
            claims.append((f"Flip-rate range over metrics, {label}", "—", measured))
    rows = [
        (
            label,
            r["metric"],
            fmt_count(r["n_heads"]),
            fmt_count(r.get("n_docs")),
            fmt_count(r["n_triplets"]),
            fmt_count(r["n_ties"]),
            fmt_count(r["flips"]),
            fmt_pct(r["flip_rate"]),
            fmt_interval(r, "ci_low", "ci_high"),
            interval_method(r, "n_docs", "documents"),
        )
        for label, g in groups(flips)
        for r in g.to_dict("records")
    ]
    plotted = flips.assign(model=labels)
    parts = [
        paper_vs_measured(convention, claims),
        table(
            "Flip rate per model and row metric, with its 95% interval: a percentile bootstrap "
            f"over documents, given only from {MIN_BOOTSTRAP_N} documents up (with fewer, the "
            "note says so)",
            convention,
            (
                "model",
                "metric",
                "heads",
                "documents",
                "triplets",
                "ties",
                "flips",
                "flip rate",
                "95% interval",
                "interval method and n",
            ),
            rows,
        ),
        figure_or_note(
            lambda: figure("flips", {"flips": plotted}),
            alt="Bar chart of the keep vs drop flip rate per row metric and model, with "
            "bootstrap 95% intervals where there are enough documents for one",
            caption="Flip rate of head-similarity verdicts per row metric; whiskers: the "
            f"percentile bootstrap 95% interval over documents (none below {MIN_BOOTSTRAP_N} "
            "documents).",
            convention=convention,
        ),
    ]
    by_layer = ctx.get("flips_by_layer")
    if by_layer is not None:
        for label, g in groups(by_layer):
            metrics = list(dict.fromkeys(g["metric"]))
            pivot = g.pivot_table(index="layer", columns="metric", values="flip_rate")
            body = [
                (str(layer), *(fmt_pct(pivot.loc[layer].get(m)) for m in metrics))
                for layer in pivot.index
            ]
            parts.append(
                f"<details><summary>{esc(f'Flip rate by layer — {label}')}</summary>"
                + table(f"Flip rate by layer — {label}", convention, ("layer", *metrics), body)
                + "</details>\n"
            )
    return "".join(parts)


# cluster -------------------------------------------------------------------------------------


def cluster_section(ctx: Context) -> str:
    """Spearman ρ of MDS axis 1 vs sink mass per variant, adjusted Rand, sink share of d_A²."""
    from attncoda.report.figures import figure

    summary = ctx.need("cluster_summary")
    heads = ctx.get("cluster")
    agreement = ctx.get("cluster_agreement")
    convention = (
        f"JS keep, JS drop, Aitchison sink term, Aitchison content term (sink = {ctx.sink})"
    )
    per_model = groups(summary)

    def rho(variant: str) -> str:
        values = []
        for label, g in per_model:
            hit = g[g["variant"] == variant]
            value = hit["spearman_axis1_vs_sink_mass"].iloc[0] if len(hit) else None
            values.append(f"{label} {fmt_signed(value)}")
        return "; ".join(values)

    ari = []
    if agreement is not None:
        for label, g in groups(agreement):
            hit = g[(g["variant_a"] == "keep") & (g["variant_b"] == "drop")]
            ari.append(f"{label} {fmt_num(hit['adjusted_rand'].iloc[0]) if len(hit) else NA}")
    shares = [
        f"{label} {fmt_pct(g['mean_sink_share_of_aitchison_sq'].iloc[0])}" for label, g in per_model
    ]
    claims = [
        (
            "Spearman ρ(MDS axis 1, head sink mass), JS keep (published)",
            "the leading axis tracks head sink mass (an artifact of the convention)",
            rho("keep"),
        ),
        ("Same, JS drop", "—", rho("drop")),
        ("Same, Aitchison sink term", "—", rho("aitchison_sink")),
        ("Same, Aitchison content term", "—", rho("aitchison_content")),
        ("Cluster agreement keep vs drop (adjusted Rand)", "—", "; ".join(ari) or NA),
        ("Mean sink share of d_A² over head pairs", "—", "; ".join(shares)),
    ]
    rows = [
        (
            label,
            _VARIANT_NAMES.get(str(r["variant"]), str(r["variant"])),
            fmt_signed(r["spearman_axis1_vs_sink_mass"]),
            fmt_num(r["max_abs_spearman_any_direction"]),
            "yes" if bool(r.get("degenerate", False)) else "no",
        )
        for label, g in per_model
        for r in g.to_dict("records")
    ]
    parts = [
        paper_vs_measured(convention, claims),
        table(
            "Head clustering (Clark et al. 2019) per model and variant",
            convention,
            (
                "model",
                "variant",
                "ρ(axis 1, sink mass)",
                "largest |ρ| over directions",
                "all distances 0",
            ),
            rows,
        ),
    ]
    if agreement is not None:
        parts.append(
            table(
                "Cluster agreement between variants (adjusted Rand index of k-means labels)",
                convention,
                ("model", "variant A", "variant B", "adjusted Rand"),
                [
                    (
                        label,
                        _VARIANT_NAMES.get(str(r["variant_a"]), str(r["variant_a"])),
                        _VARIANT_NAMES.get(str(r["variant_b"]), str(r["variant_b"])),
                        fmt_num(r["adjusted_rand"]),
                    )
                    for label, g in groups(agreement)
                    for r in g.to_dict("records")
                ],
            )
        )
    if heads is not None:
        for label, g in groups(heads):
            s = summary[
                (summary["model"] == g["model"].iloc[0])
                & (summary["revision"] == g["revision"].iloc[0])
            ]
            parts.append(
                figure_or_note(
                    lambda g=g, s=s: figure("cluster", {"cluster": g, "cluster_summary": s}),
                    alt=f"Four MDS scatter plots of the heads of {label}, one per variant, "
                    "coloured by head sink mass",
                    caption=f"{label}: heads at their MDS coordinates, coloured by sink mass.",
                    convention=convention,
                )
            )
    return "".join(parts)
