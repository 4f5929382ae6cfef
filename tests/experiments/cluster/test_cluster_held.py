"""How a comparison holds cluster's tables: every float column declared, and a run whose
results move past what the reference's rows state is a different run (tamper tests)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attncoda.experiments.cluster import EXPERIMENT, VARIANTS, cluster, result_tables
from attncoda.experiments.contract import (
    Bound,
    DocRows,
    HeadRows,
    Same,
    compare_frames,
    held_by,
)
from attncoda.experiments.contract._held import BOUND_RTOL


def _rows() -> HeadRows:
    rng = np.random.default_rng(12)
    heads, keys = 12, 10
    docs = []
    for _ in range(3):
        positions = list(range(2, keys))
        mask = np.arange(keys)[None, :] <= np.asarray(positions)[:, None]
        z = rng.normal(size=(heads, len(positions), keys)) * 1.5
        z[:, :, 0] += np.linspace(-1.0, 4.0, heads)[:, None]
        z = np.where(mask, z, -np.inf)
        lp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        docs.append(DocRows(logp=np.where(mask, lp, np.nan), key_mask=mask, sink=(0,)))
    mass = np.concatenate([np.exp(d.logp[:, :, 0]) for d in docs], axis=1).mean(axis=1)
    return HeadRows("toy/held", 3, 4, tuple(docs), mass)


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    found = result_tables(cluster(_rows(), seed=0, n_clusters=3, n_init=2)).frames
    return {name: frame.assign(revision="-") for name, frame in found.items()}


def _same(name: str, run: pd.DataFrame, reference: pd.DataFrame) -> bool:
    return compare_frames(name, run, reference, EXPERIMENT.held.get(name)).same


def test_every_float_column_of_every_table_declares_its_rule(
    frames: dict[str, pd.DataFrame],
) -> None:
    for name, frame in frames.items():
        rules = EXPERIMENT.held.get(name, {})
        for column in frame.columns:
            if pd.api.types.is_float_dtype(frame[column]):
                assert not isinstance(held_by(rules, column), Same), (name, column)


def test_a_run_is_the_same_evidence_as_itself(frames: dict[str, pd.DataFrame]) -> None:
    for name, frame in frames.items():
        assert _same(name, frame.copy(), frame)


def test_a_coordinate_moved_beyond_its_bound_differs(frames: dict[str, pd.DataFrame]) -> None:
    reference = frames["cluster"]
    bound = float(reference["distance_rounding_keep"].max())
    for shift, same in ((0.5 * bound, True), (3.0 * bound, False)):
        run = reference.copy()
        run.loc[4, "x_keep"] += shift
        assert _same("cluster", run, reference) is same
    # a rotation of the whole embedding moves no distance
    run = reference.copy()
    run["x_keep"], run["y_keep"] = -reference["y_keep"], reference["x_keep"]
    assert _same("cluster", run, reference)


def _moved_label(reference: pd.DataFrame, variant: str) -> tuple[int, pd.DataFrame]:
    """A copy of ``reference`` with one head (in a cluster of several) given another label."""
    column = f"cluster_{variant}"
    counts = reference[column].value_counts()
    head = int(reference.index[reference[column] == counts.index[0]][0])
    other = next(lab for lab in counts.index if lab != counts.index[0])
    run = reference.copy()
    run.loc[head, column] = other
    return head, run


def test_a_label_moved_off_an_edge_differs_and_on_an_edge_does_not(
    frames: dict[str, pd.DataFrame],
) -> None:
    reference = frames["cluster"].copy()
    reference["edge_keep"] = False
    head, run = _moved_label(reference, "keep")
    assert not _same("cluster", run, reference)
    on_edge = reference.copy()
    on_edge.loc[head, "edge_keep"] = True
    assert _same("cluster", run.assign(edge_keep=on_edge["edge_keep"]), on_edge)
    # the run's own edge flag excuses nothing: the reference's row decides
    assert not _same("cluster", run.assign(edge_keep=on_edge["edge_keep"]), reference)


def test_degenerate_flipped_off_its_edge_differs(frames: dict[str, pd.DataFrame]) -> None:
    reference = frames["cluster_summary"].copy()
    run = reference.copy()
    run.loc[1, "degenerate"] = not bool(reference.loc[1, "degenerate"])
    assert not _same("cluster_summary", run, reference)
    edge = reference.copy()
    edge.loc[1, "degenerate_edge"] = True
    assert _same("cluster_summary", run.assign(degenerate_edge=edge["degenerate_edge"]), edge)


@pytest.mark.parametrize(
    ("name", "column", "bound"),
    [
        ("cluster_summary", "spearman_axis1_vs_sink_mass", "spearman_axis1_rounding"),
        ("cluster_summary", "max_abs_spearman_any_direction", "max_abs_spearman_rounding"),
        ("cluster_summary", "mean_sink_share_of_aitchison_sq", "mean_sink_share_rounding"),
        ("cluster_agreement", "adjusted_rand", "adjusted_rand_rounding"),
        ("cluster_distances", "distance", "distance_rounding"),
    ],
)
def test_a_result_moved_past_its_stated_rounding_differs(
    frames: dict[str, pd.DataFrame], name: str, column: str, bound: str
) -> None:
    reference = frames[name].copy()
    reference[bound] = np.maximum(reference[bound], 1e-3 * reference[column].abs())
    room = float(reference.loc[0, bound])
    for shift, same in ((0.5 * room, True), (1.5 * room, False)):
        run = reference.copy()
        run.loc[0, column] += shift
        assert _same(name, run, reference) is same, (column, shift)


@pytest.mark.parametrize(
    ("name", "column"),
    [
        ("cluster_summary", "n_near_ties"),
        ("cluster_agreement", "n_edge_heads"),
        ("cluster", "distance_rounding_aitchison_content"),
        ("cluster_summary", "spearman_axis1_rounding"),
        ("cluster_distances", "distance_rounding"),
    ],
)
def test_a_fragility_inflated_differs(
    frames: dict[str, pd.DataFrame], name: str, column: str
) -> None:
    reference = frames[name]
    rule = EXPERIMENT.held[name][column]
    assert isinstance(rule, Bound)
    value = float(reference.loc[0, column])
    unit = 1.0 if rule.per is None else 1.0 / float(reference.loc[0, rule.per])
    room = BOUND_RTOL * abs(value) + rule.units * unit  # a bound in nats: 1% of itself
    integral = rule.per is None and rule.units > 0
    for extra, same in ((0.5 * room, True), (1.5 * room, False)):
        run = reference.copy()
        grown = value + extra
        run.loc[0, column] = round(grown) if integral else grown
        assert _same(name, run, reference) is same, (column, extra)


def test_the_held_tables_name_every_variant() -> None:
    rules = EXPERIMENT.held["cluster"]
    for variant in VARIANTS:
        assert rules[f"cluster_{variant}"].edge == f"edge_{variant}"
        assert rules[f"x_{variant}"].bound == f"distance_rounding_{variant}"


def test_the_summary_and_the_report_say_how_far_rounding_moves_each_value(
    frames: dict[str, pd.DataFrame],
) -> None:
    from attncoda.experiments.cluster._section import cluster_section
    from attncoda.experiments.cluster._summary import summary
    from attncoda.experiments.view import Context

    # a run's tables carry the unit's model and revision on every row
    tables = {name: frame.assign(model="toy/held") for name, frame in frames.items()}
    part = tables["cluster_summary"]
    part.loc[0, "spearman_axis1_rounding"] = 0.0123
    part.loc[2, "degenerate_edge"] = True
    tables["cluster"].loc[[0, 3], "edge_drop"] = True
    agreement = tables["cluster_agreement"]
    agreement.loc[0, "adjusted_rand_rounding"] = 0.0456
    printed = summary(tables, lambda *_: {}, "first").splitlines()
    keep = float(part.loc[0, "spearman_axis1_vs_sink_mass"])
    assert f"  keep               {keep:+.3f} ±0.012" in printed
    drop = next(line for line in printed if line.startswith("  drop"))
    assert drop.endswith("; 2 head(s) on a k-means edge")
    sink = next(line for line in printed if line.startswith("  aitchison_sink"))
    assert "on the edge of not embedded" in sink
    ari = float(agreement.loc[0, "adjusted_rand"])  # keep vs drop
    assert f"adjusted Rand index of the k-means clusters, keep vs drop: {ari:.3f} ±0.046" in printed
    page = cluster_section(Context(frames=tables, sink="first"))
    assert f"{keep:+.3f} ±0.012" in page
    assert "on its edge (either)" in page
    assert "±0.046" in page
