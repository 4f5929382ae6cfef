"""The report section of cluster: Clark et al.'s head clustering under four variants.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attncoda.experiments.cluster._distances import VARIANT_TITLES
from attncoda.experiments.cluster._figure import draw
from attncoda.experiments.view import (
    NA,
    Context,
    figure_or_note,
    fmt_count,
    fmt_num,
    fmt_pct,
    fmt_signed,
    groups,
    is_missing,
    paper_vs_measured,
    table,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["cluster_section"]


def _within(row: dict, column: str) -> str:
    """`` ±x`` from the row's rounding ``column`` (docs/design.md, "Verdicts and ratios
    within rounding"); nothing for a table made before the column was, or where it is 0."""
    bound = row.get(column)
    if is_missing(bound) or not bound:
        return ""
    return f" ±{fmt_num(bound)}"


def _degenerate(row: dict) -> str:
    """``yes``/``no``, or ``on its edge`` where the largest distance lies within its
    rounding of the zero threshold (either verdict is the same evidence)."""
    if bool(row.get("degenerate_edge", False)):
        return "on its edge (either)"
    return "yes" if bool(row.get("degenerate", False)) else "no"


def cluster_section(ctx: Context) -> str:
    """Spearman ρ of MDS axis 1 vs sink mass per variant, adjusted Rand, sink share of d_A²."""
    summary = ctx.tables.cluster_summary
    heads = ctx.optional.cluster
    agreement = ctx.optional.cluster_agreement
    convention = (
        f"JS keep, JS drop, Aitchison sink term, Aitchison content term (sink = {ctx.sink})"
    )
    return (
        _claims(summary, agreement, convention)
        + _variant_table(summary, heads, convention)
        + _agreement_table(agreement, convention)
        + _scatter_figures(summary, heads, convention)
    )


def _rho(summary: pd.DataFrame, variant: str) -> str:
    """Each model's Spearman ρ of MDS axis 1 with head sink mass under ``variant``."""
    values = []
    for label, g in groups(summary):
        hit = g[g["variant"] == variant]
        value = hit["spearman_axis1_vs_sink_mass"].iloc[0] if len(hit) else None
        values.append(f"{label} {fmt_signed(value)}")
    return "; ".join(values)


def _keep_drop_rand(agreement: pd.DataFrame | None) -> str:
    """Each model's adjusted Rand index of the keep and drop clusterings (n/a without the
    agreement table)."""
    ari = []
    if agreement is not None:
        for label, g in groups(agreement):
            hit = g[(g["variant_a"] == "keep") & (g["variant_b"] == "drop")]
            ari.append(f"{label} {fmt_num(hit['adjusted_rand'].iloc[0]) if len(hit) else NA}")
    return "; ".join(ari) or NA


def _claims(summary: pd.DataFrame, agreement: pd.DataFrame | None, convention: str) -> str:
    """The paper-vs-measured block: ρ per variant, keep vs drop agreement, the sink share."""
    shares = [
        f"{label} {fmt_pct(g['mean_sink_share_of_aitchison_sq'].iloc[0])}"
        for label, g in groups(summary)
    ]
    claims = [
        (
            "Spearman ρ(MDS axis 1, head sink mass), JS keep (published)",
            "the leading axis tracks head sink mass (an artifact of the convention)",
            _rho(summary, "keep"),
        ),
        ("Same, JS drop", "—", _rho(summary, "drop")),
        ("Same, Aitchison sink term", "—", _rho(summary, "aitchison_sink")),
        ("Same, Aitchison content term", "—", _rho(summary, "aitchison_content")),
        ("Cluster agreement keep vs drop (adjusted Rand)", "—", _keep_drop_rand(agreement)),
        ("Mean sink share of d_A² over head pairs", "—", "; ".join(shares)),
    ]
    return paper_vs_measured(convention, claims)


def _variant_table(summary: pd.DataFrame, heads: pd.DataFrame | None, convention: str) -> str:
    """One row per model and variant: ρ of axis 1 and the largest |ρ| over directions, each
    ± its rounding, whether nothing was embedded, and the heads on a k-means edge."""
    rounding_note = (
        "Each value ± how far float32 rounding of the recorded rows can move it (docs/design.md, "
        "“Verdicts and ratios within rounding”): a ρ through the heads whose sink masses or "
        "coordinates lie within rounding of each other, an adjusted Rand index through the "
        "heads on a k-means edge (within rounding of equidistant from two centres), whose "
        "label may differ between two runs."
    )
    edges = _edge_heads(heads)
    rows = [
        (
            label,
            VARIANT_TITLES.get(str(r["variant"]), str(r["variant"])),
            fmt_signed(r["spearman_axis1_vs_sink_mass"]) + _within(r, "spearman_axis1_rounding"),
            fmt_num(r["max_abs_spearman_any_direction"]) + _within(r, "max_abs_spearman_rounding"),
            _degenerate(r),
            edges.get((str(r["model"]), str(r.get("revision")), str(r["variant"])), NA),
        )
        for label, g in groups(summary)
        for r in g.to_dict("records")
    ]
    return table(
        "Head clustering (Clark et al. 2019) per model and variant",
        f"{convention}. {rounding_note}",
        (
            "model",
            "variant",
            "ρ(axis 1, sink mass)",
            "largest |ρ| over directions",
            "all distances 0",
            "heads on a k-means edge",
        ),
        rows,
    )


def _agreement_table(agreement: pd.DataFrame | None, convention: str) -> str:
    """The adjusted Rand index ± its rounding of every pair of variants, per model (nothing
    without the agreement table)."""
    if agreement is None:
        return ""
    return table(
        "Cluster agreement between variants (adjusted Rand index of k-means labels)",
        convention,
        ("model", "variant A", "variant B", "adjusted Rand"),
        [
            (
                label,
                VARIANT_TITLES.get(str(r["variant_a"]), str(r["variant_a"])),
                VARIANT_TITLES.get(str(r["variant_b"]), str(r["variant_b"])),
                fmt_num(r["adjusted_rand"]) + _within(r, "adjusted_rand_rounding"),
            )
            for label, g in groups(agreement)
            for r in g.to_dict("records")
        ],
    )


def _scatter_figures(summary: pd.DataFrame, heads: pd.DataFrame | None, convention: str) -> str:
    """Per model, the four MDS scatter plots of its heads coloured by sink mass (nothing
    without the per-head table)."""
    if heads is None:
        return ""
    parts = []
    for label, g in groups(heads):
        s = summary[
            (summary["model"] == g["model"].iloc[0])
            & (summary["revision"] == g["revision"].iloc[0])
        ]
        parts.append(
            figure_or_note(
                lambda g=g, s=s: draw({"cluster": g, "cluster_summary": s}),
                alt=f"Four MDS scatter plots of the heads of {label}, one per variant, "
                "coloured by head sink mass",
                caption=f"{label}: heads at their MDS coordinates, coloured by sink mass.",
                convention=convention,
            )
        )
    return "".join(parts)


def _edge_heads(heads: object) -> dict[tuple[str, str, str], str]:
    """Per (model, revision, variant), the count of heads on a k-means edge, from the
    ``cluster`` table's ``edge_<variant>`` columns (none for a table made before them)."""
    import pandas as pd

    if not isinstance(heads, pd.DataFrame) or "model" not in heads.columns:
        return {}
    keys = [c for c in ("model", "revision") if c in heads.columns]
    counts = {}
    for _, g in heads.groupby(keys, sort=False):
        model = str(g["model"].iloc[0])
        revision = str(g["revision"].iloc[0]) if "revision" in g.columns else "None"
        for column in g.columns:
            if column.startswith("edge_"):
                counts[(model, revision, column[5:])] = fmt_count(int(g[column].sum()))
    return counts
