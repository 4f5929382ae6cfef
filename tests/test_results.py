"""Every figure the README and the site state is the recorded reference run's (shipped with
the package, src/attncoda/run/reference/, read by docs/hooks/results.py), at the digits
shown; and the shipped checkpoints give the reference run's tables again here, held by the
rule of ``attncoda compare``."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from attncoda.run.compare import compare, reference_run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
REFERENCE = reference_run()
#: A figure followed by its key: ``79.4%<!-- ref collapse.sink_share -->``.
REF = re.compile(r"(−|-)?(\d+(?:\.\d+)?)(%| nats| min)?\**<!-- ref ([\w.\-]+) -->")


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


def _shown(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def test_every_annotated_figure_is_the_reference_runs_at_the_digits_shown():
    # The reference run's tables are committed bytes: a figure read from them rounds the
    # same way on every CPU, so it is the value at the digits shown, exactly. What another
    # CPU computes is held to the reference by the comparison's rule (the last test here).
    hook = _hook()
    seen = 0
    for page in _pages():
        for sign, number, unit, key in REF.findall(page.read_text(encoding="utf-8")):
            got = hook.value(key) * (100 if unit == "%" else 1)
            digits = len(number.partition(".")[2])
            assert _shown(abs(got), digits) == number and (got < 0) == bool(sign), (
                page.name, key, number, got
            )  # fmt: skip
            seen += 1
    assert seen >= 1  # the README's figures are its headline table, checked above


def test_the_figure_check_refuses_a_wrong_figure():
    hook = _hook()
    share = 100 * hook.value("collapse.sink_share")
    wrong = f"{share + 0.1:.1f}%<!-- ref collapse.sink_share -->"
    ((sign, number, unit, key),) = REF.findall(wrong)
    assert _shown(100 * hook.value(key), 1) != number


def test_the_results_page_is_drawn_from_the_reference_tables():
    hook = _hook()
    pytest.importorskip("matplotlib")
    page = hook.page()
    assert hook.headline(hook.REFERENCE) in page
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
def test_the_shipped_checkpoints_give_the_reference_tables(tmp_path):
    """The shipped checkpoints make these two units independent of the machine's training:
    run again here with the reference run's settings, collapse and the predictor give the
    reference run's tables (its collapse split, its unseen runs' flip rates, predictions
    and verdicts) within what each column holds (``attncoda compare``), whatever the CPU
    and its code path (tests/test_code_paths.py runs this test under others)."""
    from attncoda.run.reproduce import reproduce

    config = json.loads((REFERENCE / "manifest.json").read_text())["config"]
    settings = {name: config["settings"][name] for name in ("flips", "collapse", "predictor")}
    settings["rows"] = config["rows"]
    out = tmp_path / "run"
    reproduce([], out, experiments=["collapse", "predictor"], settings=settings, progress=False)
    got = compare(out, REFERENCE, subset=True)
    assert {t.table for t in got.tables} >= {"collapse", "collapse_checkpoints", "predictor"}
    assert got.same, "\n".join(got.lines())
