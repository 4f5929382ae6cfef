"""The report section of collapse: entropy over training, split into its sink and content
parts, with the share's range over the orderings and the series' task heads.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attncoda.experiments.collapse._figure import draw
from attncoda.experiments.view import (
    NA,
    Context,
    figure_or_note,
    fmt_count,
    fmt_nats,
    fmt_num,
    fmt_pct,
    groups,
    is_missing,
    note,
    paper_vs_measured,
    table,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["collapse_section"]


# collapse ------------------------------------------------------------------------------------


def collapse_section(ctx: Context) -> str:
    """The entropy change over training split into sink and content parts (nats): the
    two-factor Shapley attribution, and the range of the sink share over the two one-sided
    orderings (sink first, content first), which bound it."""
    pairs = ctx.tables.collapse
    convention = (
        "none — two-factor Shapley attribution of the entropy change, ΔH = ΔH_sink + "
        "ΔH_content (the interaction of the two factors split in half); its range: the sink "
        f"shares of the two one-sided orderings; sink = {ctx.sink}"
    )
    per_model = "".join(
        _pair_tables(label, g, convention) + _change_figure(label, g, ctx.sink, convention)
        for label, g in groups(pairs)
    )
    return (
        _claims(pairs, convention)
        + _ORDERINGS
        + _ROUNDING
        + _STAND_IN
        + per_model
        + _checkpoints(ctx, convention)
        + _task_heads(ctx)
        + _training(ctx)
    )


def _claims(pairs: pd.DataFrame, convention: str) -> str:
    """The paper-vs-measured block: each model's sink share of its first → last entropy
    change, with its range over the orderings and its parts (nats)."""
    claims = []
    for label, g in groups(pairs):
        whole = g[(g["pair_kind"] == "first_last") & (g["level"] == "model")]
        for r in whole.to_dict("records"):
            claims.append(
                (
                    f"Sink share of the entropy change, {label} "
                    f"{r['label_from']} → {r['label_to']}",
                    "30% (Pythia-70M), 95% (Pythia-1B), 79% (Pythia-1.4B)",
                    f"{fmt_pct(r['sink_share'])}{_range(r)}: ΔH = "
                    f"{fmt_nats(r['delta_entropy'])} = sink {fmt_nats(r['delta_sink'])} + "
                    f"content {fmt_nats(r['delta_content'])} nats"
                    + (f" ({_note(r)})" if _note(r) else ""),
                )
            )
    if not claims:
        claims.append(
            (
                "Sink share of the entropy change, first → last checkpoint",
                "30% (Pythia-70M), 95% (Pythia-1B), 79% (Pythia-1.4B)",
                "no model-level first → last pair in the collapse table",
            )
        )
    return paper_vs_measured(convention, claims)


def _pair_tables(label: str, g: pd.DataFrame, convention: str) -> str:
    """One model's split tables: first → last checkpoint for the model and each layer, then
    folded, for each head and for the consecutive pairs."""
    first_last = g[g["pair_kind"] == "first_last"]
    shown = first_last[first_last["level"].isin(["model", "layer"])]
    out = table(
        f"{label}: first → last checkpoint, the model and each layer (means per row, nats)",
        convention,
        _PAIR_HEADERS,
        [_pair_row(r) for r in shown.to_dict("records")],
    )
    heads = first_last[first_last["level"] == "head"]
    if len(heads):
        out += (
            "<details><summary>First → last checkpoint, per head</summary>"
            + table(
                f"{label}: first → last checkpoint, each head (means per row, nats)",
                convention,
                _PAIR_HEADERS,
                [_pair_row(r) for r in heads.to_dict("records")],
            )
            + "</details>\n"
        )
    steps = g[(g["pair_kind"] == "consecutive") & (g["level"] == "model")]
    if len(steps):
        out += (
            "<details><summary>Consecutive checkpoint pairs</summary>"
            + table(
                f"{label}: consecutive checkpoint pairs, model level (nats)",
                convention,
                _PAIR_HEADERS,
                [_pair_row(r) for r in steps.sort_values("pair_from").to_dict("records")],
            )
            + "</details>\n"
        )
    return out


def _change_figure(label: str, g: pd.DataFrame, sink: str, convention: str) -> str:
    """One model's figure: the sink and content parts of each consecutive change, stacked,
    and their cumulative sums."""
    return figure_or_note(
        lambda: draw({"collapse": g}, sink=sink),
        alt=f"Stacked bars of the sink and content parts of the entropy change between "
        f"consecutive checkpoints of {label}, and their cumulative sums",
        caption=f"{label}: entropy change per checkpoint pair and cumulated.",
        convention=convention,
    )


_ORDERINGS = note(
    "The sink share is a Shapley attribution, not a measurement of one mechanism: ΔH_content "
    "= ((1−s₀) + (1−s₁))/2 · (H(q₁) − H(q₀)) charges the content change at the mean of the "
    "two checkpoints' content masses, splitting the interaction of sink and content in half. "
    "Moving the sink first charges the content change at 1−s₁, moving the content first at "
    "1−s₀; both "
    "orderings are exact decompositions too, and their sink shares (the range given beside "
    "each share) bound the Shapley share, which is their mean."
)

_ROUNDING = note(
    "A share is a ratio over ΔH. Where |ΔH| lies within its float32 rounding, e = u·(n + 2)·"
    "(H before + H after + log n) with u = 2⁻²⁴ and n the most keys a row sees (a row "
    "entropy is a float32 sum over its keys), the change is one "
    "of the last bits, which another device or kernel gives otherwise: the share and its "
    "range are then left empty (n/a), and the note says so. Early training steps change the "
    "entropy by less than that in some heads. Whether a share is left empty is itself "
    "decided at that bound: where |ΔH| lies within e of it (|ΔH| ≤ 2e, every empty share "
    "included), the note says the share is on the edge, and another run may measure it or "
    "leave it empty; so too where a part lies within twice its rounding of 0, whose sign "
    "decides whether the share lies in [0, 1]."
)

_STAND_IN = note(
    "The paper's shares come from Pythia models trained on hundreds of billions of tokens of "
    "text. A text model trainable offline grows no sink (Gu et al. 2025 saw none below about "
    "100M tokens), so the default series here is the Bigram-Backcopy task of Guo et al. 2024: "
    "synthetic sequences on which a 2-layer GPT-NeoX grows a BOS sink in its dormant heads in "
    "two minutes of CPU. It can stand in for the mechanism — a sink that grows during "
    "training, and an entropy drop that the exact split assigns to the sink or the content — "
    "and it exercises every level of the split. It cannot stand in for the paper's numbers: "
    "the task, the vocabulary (64 tokens), the depth and the scale are all different, so "
    "its share is not a measurement of Pythia."
)


def _task_heads(ctx: Context) -> str:
    """Active versus dormant heads of a Bigram-Backcopy series (the ``train_heads`` table)."""
    heads = ctx.optional.train_heads
    if heads is None:
        return ""
    out = []
    for label, g in groups(heads):
        steps = sorted(dict.fromkeys(int(x) for x in g["step"]))
        body = []
        for r in g.sort_values(["step", "layer", "head"]).to_dict("records"):
            if int(r["step"]) not in (steps[0], steps[-1]):
                continue
            trig, rest = r["bos_attention_trigger"], r["bos_attention_non_trigger"]
            kind = "dormant (sink)" if rest > 0.5 else ""
            if rest > 0.5 and trig < 0.1:
                kind = "active at triggers, dormant elsewhere"
            body.append(
                (
                    f"step{r['step']}",
                    f"layer {r['layer']} head {r['head']}",
                    fmt_pct(trig),
                    fmt_pct(rest),
                    kind,
                )
            )
        out.append(
            table(
                f"{label}: mean attention on <|bos|> per head at the first and last checkpoint, "
                "at trigger and at non-trigger queries (Bigram-Backcopy)",
                "none — attention probabilities on key 0 (<|bos|>) of held-out task sequences, "
                "queries 1..n-1",
                ("checkpoint", "head", "trigger queries", "non-trigger queries", "head kind"),
                body,
            )
        )
    return "".join(out)


_PAIR_HEADERS = (
    "pair",
    "level",
    "rows",
    "H before",
    "H after",
    "ΔH",
    "ΔH sink",
    "ΔH content",
    "sink share (Shapley)",
    "range over the orderings",
    "note",
)


def _text(value: Any) -> str:
    return "" if is_missing(value) else str(value)


def _edge(r: dict[str, Any]) -> str:
    """What the row's edge flags say (``""`` off both, or for a table made before them)."""
    if _flag(r.get("share_edge")):
        if is_missing(r.get("sink_share")):
            return "on the edge of its null bound: another run may measure this share"
        return "on the edge of its null bound: another run may leave this share undefined"
    if _flag(r.get("note_edge")):
        return (
            "on the edge: a part lies within twice its rounding of 0, so another run may "
            "note otherwise"
        )
    return ""


def _flag(value: Any) -> bool:
    return not is_missing(value) and bool(value)


def _note(r: dict[str, Any]) -> str:
    """The row's note and what its edge flags say, joined."""
    return "; ".join(t for t in (_text(r.get("sink_share_note")), _edge(r)) if t)


def _range(r: dict[str, Any]) -> str:
    """`` (Shapley attribution; 75.2–83.6% over the two orderings)``, or ``""`` without one."""
    low, high = r.get("sink_share_low"), r.get("sink_share_high")
    if is_missing(low) or is_missing(high):
        return ""
    return f" (Shapley attribution; {fmt_pct(low)}–{fmt_pct(high)} over the two orderings)"


def _pair_row(r: dict[str, Any]) -> tuple[str, ...]:
    level = "model" if r["level"] == "model" else f"layer {r['layer']}"
    if r["level"] == "head":
        level = f"layer {r['layer']} head {r['head']}"
    return (
        f"{r['label_from']} → {r['label_to']}",
        level,
        fmt_count(r["n_rows"]),
        fmt_nats(r["entropy_from"]),
        fmt_nats(r["entropy_to"]),
        fmt_nats(r["delta_entropy"]),
        fmt_nats(r["delta_sink"]),
        fmt_nats(r["delta_content"]),
        fmt_pct(r["sink_share"]),
        (
            NA
            if is_missing(r.get("sink_share_low"))
            else f"{fmt_pct(r['sink_share_low'])} – {fmt_pct(r['sink_share_high'])}"
        ),
        _note(r),
    )


def _checkpoints(ctx: Context, convention: str) -> str:
    points = ctx.optional.collapse_checkpoints
    if points is None:
        return ""
    out = []
    for label, g in groups(points):
        whole = g[g["level"] == "model"].sort_values("step")
        out.append(
            table(
                f"{label}: model-level means per checkpoint (nats)",
                convention,
                ("checkpoint", "step", "rows", "mean sink mass", "H(p)", "H(q)", "sink balance"),
                [
                    (
                        str(r["label"]),
                        str(r["step"]),
                        fmt_count(r["n_rows"]),
                        fmt_pct(r["mean_sink_mass"]),
                        fmt_nats(r["entropy"]),
                        fmt_nats(r["content_entropy"]),
                        fmt_num(r["sink_balance"]),
                    )
                    for r in whole.to_dict("records")
                ],
            )
        )
    return "".join(out)


def _training(ctx: Context) -> str:
    train = ctx.optional.train
    if train is None:
        return ""
    out = []
    for label, g in groups(train):
        layers = sorted(dict.fromkeys(int(x) for x in g["layer"]))
        body = []
        for step in sorted(dict.fromkeys(int(x) for x in g["step"])):
            at = g[g["step"] == step]
            by_layer = dict(zip(at["layer"].astype(int), at["first_token_attention"], strict=True))
            body.append(
                (
                    str(step),
                    fmt_num(at["train_loss"].iloc[0]),
                    fmt_num(at["val_loss"].iloc[0]),
                    *(fmt_pct(by_layer.get(layer)) for layer in layers),
                )
            )
        out.append(
            "<details><summary>Training of the series</summary>"
            + table(
                f"{label}: training losses (nats per token) and mean attention on the first "
                "token per layer",
                f"none — first-token attention is the sink mass with sink = first (the "
                f"report's sink: {ctx.sink})",
                ("step", "train loss", "validation loss", *(f"layer {i}" for i in layers)),
                body,
            )
            + "</details>\n"
        )
    return "".join(out)
