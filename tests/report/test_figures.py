"""Every figure is drawn one way, from stored tables: ``figure(name, tables)``; and the
report of a run folder holding one experiment's tables shows that section alone."""

from __future__ import annotations

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.experiments.contract import EXPERIMENTS
from attncoda.experiments.view import groups
from attncoda.report.figures import figure, figure_tables
from attncoda.report.html import render_report, sections
from attncoda.run.reproduce import run_experiment
from attncoda.store.runs import read_run_tables
from tiny_runs import TINY_SETTINGS

#: The figures that draw every model of their table at once.
ALL_MODELS = ("flips", "predictor", "sink_rate")


def _first_model(tables: dict[str, pd.DataFrame], names: tuple[str, ...]) -> dict:
    model, revision = tables[names[0]]["model"].iloc[0], tables[names[0]]["revision"].iloc[0]
    return {
        n: tables[n][(tables[n]["model"] == model) & (tables[n]["revision"] == revision)]
        for n in names
    }


def test_every_experiment_has_a_figure_drawn_from_its_tables(tiny_run):
    tables = read_run_tables(tiny_run)
    for name in EXPERIMENTS:
        names = figure_tables(name)
        given = {n: tables[n] for n in names} if name in ALL_MODELS else _first_model(tables, names)
        fig = figure(name, given, sink="first")
        titles = [ax.get_title() for ax in fig.axes] + [fig.get_suptitle()]
        assert fig.axes and any(titles), name


def test_a_per_model_figure_is_titled_with_the_models_label_and_sink(tiny_run):
    heads = read_run_tables(tiny_run)["profile_heads"]
    label, rows = groups(heads)[0]
    fig = figure("profile", {"profile_heads": rows}, sink="first")
    assert fig.get_suptitle().startswith(f"{label}: per-head means over rows with content")
    assert "(sink = first)" in fig.get_suptitle() and "(GPT-NeoX)" in label
    with pytest.raises(AttncodaError, match=r"the profile_heads table must hold one model; got"):
        figure("profile", {"profile_heads": heads})


def test_figure_refuses_an_unknown_name_or_a_missing_table(tiny_run):
    with pytest.raises(AttncodaError, match="no figure of 'train': use one of profile, flips"):
        figure("train", {})
    with pytest.raises(AttncodaError, match="the figure of cluster needs the cluster_summary"):
        figure("cluster", {"cluster": read_run_tables(tiny_run)["cluster"]})


def test_the_predictor_figure_marks_each_verdict(tiny_run):
    table = read_run_tables(tiny_run)["predictor"]
    fig = figure("predictor", {"predictor": table})
    (ax,) = fig.axes
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) == len(table)
    # the tiny run reads its own rows, off the fitted protocol: no verdict is a test
    assert [t.rsplit(": ", 1)[1] for t in ticks] == ["off protocol (no test)"] * len(table)
    # a held-out model on protocol shows its verdict; the others say why they are no test
    three = table.iloc[[0, 0, 0]].reset_index(drop=True)
    three["relation"] = ["held out", "training", "interpolated"]
    three["counted"] = [True, False, False]
    three["off_protocol"] = ""
    three["verdict"] = ["failed", "confirmed", "confirmed"]
    three["baseline_verdict"] = ["confirmed", "confirmed", "failed"]
    marked = figure("predictor", {"predictor": three})
    said = [t.get_text().rsplit(": ", 1)[1] for t in marked.axes[0].get_yticklabels()]
    assert said == [
        "failed (baseline confirmed)",
        "training model (no test)",
        "interpolated (no test)",
    ]
    # per model: the predictor's bar and point (none when it abstains), the baseline's bar and
    # point, the measured cross
    abstained = int(table["abstained"].sum())
    assert len(ax.lines) == 2 * (len(table) - abstained) + 2 * len(table) + len(table)
    # a table from before the baseline was stored draws none
    old = table.drop(columns=[c for c in table.columns if c.startswith("baseline_")])
    bare = figure("predictor", {"predictor": old})
    assert len(bare.axes[0].lines) == 3 * (len(table) - abstained) + abstained


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("flips", {"rows": TINY_SETTINGS["rows"], "flips": TINY_SETTINGS["flips"]}),
        ("profile", {"profile": TINY_SETTINGS["profile"]}),
    ],
)
def test_a_folder_of_one_experiment_reports_that_section(tmp_path, tiny_series, name, settings):
    from test_html import Page

    out = tmp_path / name
    run_experiment(name, [str(tiny_series / "step16")], out, settings=settings, progress=False)
    page = Page(render_report(out).read_text(encoding="utf-8"))
    assert page.sections == [s[0] for s in sections()]
    assert "not run" not in page.text_of(name)
    assert [f for f in page.figures if f["section"] == name]
    for other in page.sections:
        if other != name:
            assert "This section was not run" in page.text_of(other)
            assert f"{other} is not among this run's experiments ({name})" in page.text_of(other)
