"""Every figure the README and the site state is the recorded reference run's
(docs/results/reference/, read by docs/hooks/results.py), at the digits shown."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
REFERENCE = DOCS / "results" / "reference"
#: A figure followed by its key: ``79.4%<!-- ref collapse.sink_share -->``.
REF = re.compile(r"(−|-)?(\d+(?:\.\d+)?)(%| nats| min)?\**<!-- ref ([\w.\-]+) -->")
#: A value near a rounding boundary may round the other way on another CPU (float32): one
#: unit of the last digit shown is allowed, as the notebook's outputs are compared.
UNIT = 1.0


def _hook():
    spec = importlib.util.spec_from_file_location("results_hook", DOCS / "hooks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_the_reference_run_is_a_demo_run_with_its_machine_and_time():
    found = json.loads((REFERENCE / "manifest.json").read_text())
    assert found["command"] == "reproduce"
    assert found["config"]["models"] == ["smollm2", "gemma3", "minilm"]
    assert found["config"]["series"]["spec"] == "bigram-backcopy"  # the shipped checkpoints
    assert found["config"]["train"] is None  # nothing trained
    assert found["cpu"] and found["created"] and found["wall_seconds"] > 0
    assert {p.name for p in (REFERENCE / "tables").iterdir()} >= {
        "flips.parquet",
        "collapse.parquet",
        "predictor.parquet",
        "prune.parquet",
    }


def test_the_readme_headline_is_the_reference_runs():
    hook = _hook()
    text = README.read_text(encoding="utf-8")
    assert hook.readme_with_headline(text) == text, (
        "the README's results differ from the reference run: python docs/hooks/results.py"
    )


def test_every_annotated_figure_is_the_reference_runs_at_the_digits_shown():
    hook = _hook()
    seen = 0
    for page in _pages():
        for sign, number, unit, key in REF.findall(page.read_text(encoding="utf-8")):
            shown = float(number) * (-1 if sign else 1)
            got = hook.value(key)
            if unit == "%":
                got *= 100
            digits = len(number.partition(".")[2])
            assert abs(got - shown) <= UNIT * 10.0**-digits, (page.name, key, shown, got)
            seen += 1
    assert seen >= 1  # the README's figures are its headline table, checked above


def test_the_figure_check_refuses_a_wrong_figure():
    hook = _hook()
    share = 100 * hook.value("collapse.sink_share")
    wrong = f"{share + 0.5:.1f}%<!-- ref collapse.sink_share -->"
    ((sign, number, unit, key),) = REF.findall(wrong)
    assert abs(100 * hook.value(key) - float(number)) > UNIT * 0.1


def test_the_results_page_is_drawn_from_the_reference_tables():
    hook = _hook()
    pytest.importorskip("matplotlib")
    page = hook.page()
    assert hook.headline() in page
    flips = hook.table("flips")
    for _, row in flips.iterrows():  # every flip rate and its interval, as the page shows it
        rate = hook.pct(row["flip_rate"])
        line = f"| {row['model']} | {row['metric']} | {row['n_triplets']} | {rate} |"
        assert line in page
    assert page.count('src="data:image/png;base64,') >= 6
    assert "<!-- attncoda:results -->" in (DOCS / "results.md").read_text()


def test_the_readme_is_a_readme():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200


@pytest.mark.slow
def test_collapse_and_the_predictor_on_the_shipped_checkpoints_give_the_reference_values(
    tmp_path,
):
    """The shipped checkpoints make these two units independent of the machine's training:
    run again here with the reference run's settings, they give its collapse split and its
    unseen runs' flip rates and predictions, at the digits the README shows (3 decimals of a
    fraction, 3 of nats), whatever the CPU."""
    import pandas as pd

    from attncoda.run.reproduce import reproduce

    config = json.loads((REFERENCE / "manifest.json").read_text())["config"]
    settings = {name: config["settings"][name] for name in ("flips", "collapse", "predictor")}
    settings["rows"] = config["rows"]
    out = tmp_path / "run"
    reproduce([], out, experiments=["collapse", "predictor"], settings=settings, progress=False)

    def rows(name: str, where: Path) -> pd.DataFrame:
        return pd.read_parquet(where / f"{name}.parquet")

    here, there = out / "tables", REFERENCE / "tables"
    first_last = "pair_kind == 'first_last' and level != 'head'"
    mine, theirs = (
        rows("collapse", here).query(first_last),
        rows("collapse", there).query(first_last),
    )
    assert len(mine) == len(theirs) > 1
    for column in ("sink_share", "delta_entropy", "delta_sink", "delta_content"):
        assert list(mine[column]) == pytest.approx(list(theirs[column]), abs=1e-3), column
    columns = ["model", "revision", "verdict", "relation", "counted"]
    mine, theirs = rows("predictor", here), rows("predictor", there)
    theirs = theirs[theirs["model"].isin(set(mine["model"]))].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine[columns], theirs[columns])
    for column in ("measured", "predicted", "predicted_low", "predicted_high"):
        assert list(mine[column]) == pytest.approx(list(theirs[column]), abs=1e-3, nan_ok=True)
