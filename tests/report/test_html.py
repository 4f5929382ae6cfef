"""The HTML report of a run folder: self-contained, deterministic, every convention named."""

from __future__ import annotations

import base64
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.experiments.view import fmt_nats, fmt_pct, fmt_ratio
from attncoda.report.html import render_report, sections

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SECTION_IDS = [
    "profile",
    "flips",
    "cluster",
    "safety",
    "predictor",
    "prune",
    "collapse",
    "sink_rate",
]


class Page(HTMLParser):
    """What the report holds: sections (with their text), tables, figures and images."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.section_text: dict[str, list[str]] = {}
        self.tables: list[dict[str, Any]] = []
        self.figures: list[dict[str, Any]] = []
        self.images: list[dict[str, str | None]] = []
        self.scripts = 0
        self.meta: list[dict[str, str | None]] = []
        self._capture: list[str] | None = None
        self._in_figure = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        section = self.sections[-1] if self.sections else None
        if tag == "section":
            self.sections.append(str(a.get("id")))
            self.section_text[str(a.get("id"))] = []
        elif tag == "table":
            self.tables.append({"caption": None, "section": section})
        elif tag == "figure":
            self._in_figure = True
            self.figures.append({"caption": None, "images": [], "section": section})
        elif tag == "img":
            self.images.append(a)
            if self._in_figure:
                self.figures[-1]["images"].append(a)
        elif tag in ("caption", "figcaption"):
            self._capture = []
        elif tag == "script":
            self.scripts += 1
        elif tag == "meta":
            self.meta.append(a)

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption" and self._capture is not None:
            self.tables[-1]["caption"] = "".join(self._capture)
            self._capture = None
        elif tag == "figcaption" and self._capture is not None:
            self.figures[-1]["caption"] = "".join(self._capture)
            self._capture = None
        elif tag == "figure":
            self._in_figure = False

    def handle_data(self, data: str) -> None:
        if self._capture is not None:
            self._capture.append(data)
        if self.sections:
            self.section_text[self.sections[-1]].append(data)

    def text_of(self, section: str) -> str:
        return " ".join(" ".join(self.section_text[section]).split())


def copy_run(src: Path, dst: Path) -> Path:
    """The report's inputs only (manifest and tables) copied to ``dst``."""
    dst.mkdir(parents=True)
    shutil.copy2(src / "manifest.json", dst / "manifest.json")
    shutil.copytree(src / "tables", dst / "tables")
    return dst


@pytest.fixture(scope="module")
def report(tiny_run: Path) -> Path:
    return tiny_run / "report.html"


@pytest.fixture(scope="module")
def page(report: Path) -> Page:
    return Page(report.read_text(encoding="utf-8"))


def test_the_report_has_seven_sections_in_order(report, page):
    assert report.is_file()
    assert page.sections == SECTION_IDS
    assert [s[0] for s in sections()] == SECTION_IDS


def test_the_settings_table_names_each_setting_by_its_group(report):
    header = report.read_text(encoding="utf-8").split("<nav>")[0]
    for key, value in (("flips.n_boot", "20"), ("rows.docs", "3"), ("train.steps", "16")):
        assert f"<td>{key}</td><td>{value}</td>" in header, key


def test_every_image_is_an_embedded_png_that_decodes(page):
    assert len(page.images) >= 7
    for img in page.images:
        src = str(img["src"])
        assert src.startswith("data:image/png;base64,"), src[:40]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_SIGNATURE)
        assert img.get("alt"), "every image has alt text"


def test_every_table_and_figure_names_its_convention(page):
    assert len(page.tables) >= 15
    for t in page.tables:
        assert t["caption"] and "Convention:" in t["caption"], t
    assert page.figures
    for f in page.figures:
        assert f["caption"] and "Convention:" in f["caption"], f
        assert len(f["images"]) == 1
    assert all(img in sum((f["images"] for f in page.figures), []) for img in page.images)
    # the run's sink spec (manifest config.sink) is named beside the convention
    assert all("sink = first" in f["caption"] for f in page.figures)


def test_every_section_has_a_paper_vs_measured_table_and_the_paper_numbers(page, report):
    for section in SECTION_IDS:
        captions = [t["caption"] for t in page.tables if t["section"] == section]
        assert any(c.startswith("Paper vs measured") for c in captions), section
    text = report.read_text(encoding="utf-8")
    for number in ("17–47%", "30%", "95%", "79%", "100×"):
        assert number in text, number
    assert "no paper number" in page.text_of("safety")
    assert "1 confirmation, 1 abstention, 1 failure" in page.text_of("predictor")


def test_safety_section_names_a_safe_region_per_model_or_says_there_is_none(tiny_run, page):
    from attncoda.experiments.safety import safe_regions
    from attncoda.experiments.view import groups

    text = page.text_of("safety")
    table = pd.read_parquet(tiny_run / "tables" / "safety.parquet")
    regions = safe_regions(table)
    # The report's own label of each model: model@revision and its family.
    labels = {(g["model"].iloc[0], g["revision"].iloc[0]): label for label, g in groups(table)}
    for r in regions[regions["metric"] == "all"].itertuples(index=False):
        label = labels[(r.model, r.revision)]
        assert f"Where {label} is safe" in text
        assert f"{label}: {r.statement}." in text
        # every statement either names the region in numbers or says that none is safe
        assert ("keep and drop agree on >= 95%" in r.statement) != r.statement.startswith(
            "no region"
        )
    assert "✓ safe" in text or not table["safe"].any()


def test_measured_numbers_are_the_tables(tiny_run, page):
    flips = pd.read_parquet(tiny_run / "tables" / "flips.parquet")
    text = page.text_of("flips")
    low, high = flips["flip_rate"].min(), flips["flip_rate"].max()
    assert f"{fmt_pct(low)}–{fmt_pct(high)} over 2 model(s) × 5 metric(s)" in text
    for rate in flips["flip_rate"]:
        assert fmt_pct(rate) in text
    # 3 documents a model: no interval, and the note says why in its place
    assert set(flips["ci_note"]) == {"no interval: 3 documents, fewer than 10"}
    assert "no interval: 3 documents, fewer than 10" in text

    collapse = pd.read_parquet(tiny_run / "tables" / "collapse.parquet")
    row = collapse[(collapse["pair_kind"] == "first_last") & (collapse["level"] == "model")]
    (r,) = row.to_dict("records")
    text = page.text_of("collapse")
    assert (
        f"{fmt_pct(r['sink_share'])} (Shapley attribution; {fmt_pct(r['sink_share_low'])}–"
        f"{fmt_pct(r['sink_share_high'])} over the two orderings): ΔH = "
        f"{fmt_nats(r['delta_entropy'])}"
    ) in text

    prune = pd.read_parquet(tiny_run / "tables" / "prune.parquet")
    text = page.text_of("prune")
    for _, g in prune.groupby("model"):
        assert fmt_ratio(g["ratio"].max()) in text
    assert "no interval: 2 windows, fewer than 10" in text  # 2 evaluation windows
    # safety's bounds name their method and n
    assert "upper 95% Clopper-Pearson bound over the decided triplets" in page.text_of("safety")

    predictor = pd.read_parquet(tiny_run / "tables" / "predictor.parquet")
    tested = predictor[predictor["counted"]]
    counts = tested["verdict"].value_counts()
    text = page.text_of("predictor")
    expected = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("confirmed", "abstained", "failed"))
    assert f"{expected} over {len(tested)} held-out model(s)" in text
    # the predictor and the baseline side by side, the interval named with its method and n
    for header in ("interval score", "baseline [interval]", "baseline interval score"):
        assert header in text
    (method,) = set(predictor["interval_method"])
    assert f"interval: {method}, alpha = 0.10, n = 12 training models of 6 runs" in text
    for r in predictor.itertuples(index=False):
        assert fmt_pct(r.baseline_predicted) in text and fmt_pct(r.baseline_width) in text


def test_self_contained_no_script_no_external_url(report, page):
    text = report.read_text(encoding="utf-8")
    assert page.scripts == 0
    assert "http:" not in text and "https:" not in text and "url(" not in text
    links = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert links and all(u.startswith(("data:", "#")) for u in links)
    manifest = json.loads((report.parent / "manifest.json").read_text())
    version = manifest["packages"]["attncoda"]
    assert {"name": "generator", "content": f"attncoda {version}"} in page.meta


def test_rendering_again_gives_identical_bytes(tiny_run, tmp_path):
    copy = copy_run(tiny_run, tmp_path / "copy")
    # the fixture rendered the first one; the copy's render is the second
    assert render_report(copy).read_bytes() == (tiny_run / "report.html").read_bytes()


def test_the_predictor_counts_only_held_out_models_read_on_protocol(tiny_run, tmp_path):
    from attncoda.experiments.predictor import OFF_PROTOCOL

    copy = copy_run(tiny_run, tmp_path / "copy")
    path = copy / "tables" / "predictor.parquet"
    table = pd.read_parquet(path)
    # the tiny run reads its own rows: off protocol, nothing counted
    assert len(table) >= 2 and not table["counted"].any()
    assert (table["verdict"] == OFF_PROTOCOL).all()
    page = Page(render_report(copy).read_text(encoding="utf-8"))
    text = page.text_of("predictor")
    assert "0 confirmed, 0 abstained, 0 failed over 0 held-out model(s)" in text
    assert f"{len(table)} (off protocol: no test, never counted)" in text
    # four rows: a training model, an interpolated checkpoint, a held-out model on protocol,
    # and a held-out model read off protocol
    table = pd.concat([table.iloc[[0]]] * 4, ignore_index=True)
    table["model"] = ["bb-a", "bb-b", "bb-c", "bb-d"]
    table["relation"] = ["training", "interpolated", "held out", "held out"]
    table["in_training_set"] = [True, False, False, False]
    table["matched_training_model"] = ["bb-seed0@step2000", "", "", ""]
    table["matched_by"] = ["recipe", "recipe", "", ""]
    table["run_training_models"] = ["", "bb-seed0@step512, bb-seed0@step2000", "", ""]
    table["on_protocol"] = [True, True, True, False]
    table["off_protocol"] = ["", "", "", "windows 4, not 16"]
    table["counted"] = [False, False, True, False]
    table["verdict"] = ["confirmed", "confirmed", "failed", OFF_PROTOCOL]
    table["baseline_verdict"] = ["confirmed", "failed", "confirmed", OFF_PROTOCOL]
    table.to_parquet(path)
    page = Page(render_report(copy).read_text(encoding="utf-8"))
    text = page.text_of("predictor")
    assert "0 confirmed, 0 abstained, 1 failed over 1 held-out model(s)" in text
    # the constant baseline's verdict on the same held-out model, beside it
    assert "1 confirmed, 0 failed over 1 held-out model(s)" in text
    assert "1 (no test: listed apart, never counted as confirmations)" in text
    assert "1 (no test: listed apart, never counted)" in text
    assert "1 (off protocol: no test, never counted)" in text
    assert "training model: bb-seed0@step2000 (recipe)" in text
    assert "interpolated: a checkpoint of the run of bb-seed0@step512, bb-seed0@step2000" in text
    assert f"{OFF_PROTOCOL} (windows 4, not 16); held out" in text
    assert text.count("confirmed (no test)") == 3  # two of the predictor, one of the baseline
    assert "off protocol: no test (no test)" not in text


def test_a_folder_without_tables_is_refused_by_name(tmp_path):
    folder = tmp_path / "not-a-run"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    with pytest.raises(AttncodaError, match=str(folder)):
        render_report(folder)
    assert not (folder / "report.html").exists()


def test_absent_tables_render_as_sections_not_run(tiny_run, tmp_path):
    copy = copy_run(tiny_run, tmp_path / "copy")
    cluster = ("cluster", "cluster_summary", "cluster_agreement", "cluster_distances")
    for name in ("prune", "prune_heads", *cluster):
        (copy / "tables" / f"{name}.parquet").unlink()
    page = Page(render_report(copy).read_text(encoding="utf-8"))
    assert page.sections == SECTION_IDS
    for section in ("prune", "cluster"):
        assert "This section was not run" in page.text_of(section)
        assert not [f for f in page.figures if f["section"] == section]
    assert "not run" not in page.text_of("flips")
    assert [f for f in page.figures if f["section"] == "flips"]
    for t in page.tables:
        assert "Convention:" in t["caption"]


def test_a_table_lacking_a_column_spoils_only_its_section(tiny_run, tmp_path):
    copy = copy_run(tiny_run, tmp_path / "copy")
    path = copy / "tables" / "profile_heads.parquet"
    pd.read_parquet(path).drop(columns="content_term").to_parquet(path, index=False)
    for name in ("safety", "safety_grid", "cluster", "prune"):
        (copy / "tables" / f"{name}.parquet").unlink()  # faster; not what is tested
    page = Page(render_report(copy).read_text(encoding="utf-8"))
    assert "could not be rendered: a table lacks the column 'content_term'" in page.text_of(
        "profile"
    )
    assert [f for f in page.figures if f["section"] == "flips"]


def test_strings_from_tables_are_escaped(tiny_run, tmp_path):
    copy = copy_run(tiny_run, tmp_path / "copy")
    evil = '<script>alert("x")</script>&'
    for name in ("flips", "units", "predictor"):
        path = copy / "tables" / f"{name}.parquet"
        frame = pd.read_parquet(path)
        frame["model"] = frame["model"].where(frame["model"] != frame["model"].iloc[0], evil)
        frame.to_parquet(path, index=False)
    for name in ("safety", "safety_grid", "cluster", "profile_heads", "prune"):
        (copy / "tables" / f"{name}.parquet").unlink()  # faster; not what is tested
    text = render_report(copy).read_text(encoding="utf-8")
    page = Page(text)
    assert page.scripts == 0
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in text
    assert evil in page.text_of("flips")


def test_cluster_figure_from_tables_names_each_variant_and_its_rho(tiny_run):
    from attncoda.experiments.cluster._figure import cluster_figure_from_tables

    heads = pd.read_parquet(tiny_run / "tables" / "cluster.parquet")
    summary = pd.read_parquet(tiny_run / "tables" / "cluster_summary.parquet")
    model = heads["model"].iloc[0]
    fig = cluster_figure_from_tables(
        heads[heads["model"] == model], summary[summary["model"] == model]
    )
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 4
    keep = summary[(summary["model"] == model) & (summary["variant"] == "keep")].iloc[0]
    assert f"= {keep['spearman_axis1_vs_sink_mass']:+.2f}" in titles[0]
    with pytest.raises(AttncodaError, match="one model"):
        cluster_figure_from_tables(heads, summary)
    with pytest.raises(AttncodaError, match="'x_drop'"):
        cluster_figure_from_tables(heads[heads["model"] == model].drop(columns="x_drop"), summary)


@pytest.mark.browser
def test_the_report_opens_in_chromium_without_console_errors(report, tmp_path):
    from browser import assert_page_ok, check_page

    result = check_page(report, tmp_path / "report.png")
    assert_page_ok(result)
    assert len(result["images"]) >= 7


def test_collapse_section_shows_the_task_series_heads_and_what_it_stands_in_for(tiny_run, page):
    text = page.text_of("collapse")
    heads = pd.read_parquet(tiny_run / "tables" / "train_heads.parquet")
    assert set(heads["step"]) == {0, 1, 2, 4, 8, 16}  # the default series is Bigram-Backcopy
    assert "at trigger and at non-trigger queries (Bigram-Backcopy)" in text
    assert "It cannot stand in for the paper's numbers" in text
    assert "First → last checkpoint, per head" in text


def test_intervals_name_their_method_and_n_where_a_table_gives_them(tiny_run, tmp_path):
    # The tiny run reads too few documents and windows for an interval; give its flips and
    # prune tables intervals, as 16 documents and 16 windows would, and render them.
    copy = copy_run(tiny_run, tmp_path / "copy")
    for name in ("safety", "safety_grid", "cluster", "profile_heads"):
        (copy / "tables" / f"{name}.parquet").unlink()  # faster; not what is tested
    path = copy / "tables" / "flips.parquet"
    flips = pd.read_parquet(path)
    flips = flips.assign(
        n_docs=16,
        ci_low=flips["flip_rate"] - 0.01,
        ci_high=flips["flip_rate"] + 0.02,
        ci_method="percentile bootstrap over documents",
        n_boot=200,
        ci_note="",
    )
    flips.to_parquet(path, index=False)
    path = copy / "tables" / "prune.parquet"
    prune = pd.read_parquet(path)
    pruned = prune["k"] > 0
    prune.loc[pruned, "ratio_ci_low"] = prune.loc[pruned, "ratio"] * 0.9
    prune.loc[pruned, "ratio_ci_high"] = prune.loc[pruned, "ratio"] * 1.2
    prune.loc[pruned, "ci_method"] = "paired percentile bootstrap over windows"
    prune.loc[pruned, ["n_windows", "n_boot"]] = (16, 1000)
    prune.loc[pruned, "ci_note"] = ""
    prune.to_parquet(path, index=False)
    page = Page(render_report(copy).read_text(encoding="utf-8"))

    text = page.text_of("flips")
    r = flips.iloc[0]
    assert f"{fmt_pct(r['ci_low'])} – {fmt_pct(r['ci_high'])}" in text
    assert "percentile bootstrap over documents, 16 documents, 200 resamples" in text
    assert "no interval" not in text
    text = page.text_of("prune")
    worst = prune[pruned].loc[prune[pruned]["ratio"].idxmax()]
    interval = f"{fmt_ratio(worst['ratio_ci_low'])} – {fmt_ratio(worst['ratio_ci_high'])}"
    assert f"{fmt_ratio(worst['ratio'])} ({interval})" in text
    assert "paired percentile bootstrap over windows, 16 windows, 1,000 resamples" in text


def test_the_run_table_says_whether_the_run_holds_the_references_evidence(tiny_run, tmp_path):
    import shutil

    from attncoda.run.compare import reference_run

    demo = tmp_path / "demo"
    shutil.copytree(reference_run(), demo)
    text = render_report(demo).read_text(encoding="utf-8")
    assert "against the reference run</td><td>same evidence within rounding: 16 tables" in text
    # Another command's run is not compared with the demo's reference, and says why.
    other = render_report(copy_run(tiny_run, tmp_path / "other")).read_text(encoding="utf-8")
    assert "against the reference run</td><td>not compared: the run&#x27;s config differs" in other
