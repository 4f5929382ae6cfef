"""A run keeps going (docs/design.md, "A run keeps going"): a model that cannot be read fails
its own units, recorded in the units table and the report, while every other unit runs; the
command lists the failures and exits 1, ``--fail-fast`` stops at the first, and a rerun of
the same command runs only the failed units, in this process and on a local pool alike."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from attncoda import AttncodaError
from attncoda.cli import main
from attncoda.run.reproduce import reproduce
from attncoda.store.runs import read_run_tables
from tiny_runs import TINY_SETTINGS, assert_same_tables, done_units

#: Two experiments, safety after flips: 3 units per model.
EXPERIMENTS = ["profile", "flips", "safety"]
SETTINGS = {k: TINY_SETTINGS[k] for k in ("rows", "profile", "flips")}


@pytest.fixture
def broken(tmp_path: Path, models: list[str]) -> tuple[Path, bytes]:
    """A copy of ``models[1]`` whose ``model.safetensors`` lost its second half, and the
    file's bytes (to restore it)."""
    folder = tmp_path / "broken"
    shutil.copytree(models[1], folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return folder, data


def _cannot_read(folder: Path) -> str:
    """How a unit of the broken model fails (the start of its one-line reason)."""
    weights = str((folder / "model.safetensors").resolve())
    return f"AttncodaError: model file {weights!r} cannot be read (SafetensorError: "


def _unfinished(out: Path) -> list[Path]:
    return [d for d in (out / "units").glob("*/*") if not (d / "_done.json").is_file()]


def _argv(models: list[str], out: Path, *more: str) -> list[str]:
    return [
        "reproduce",
        "--models",
        ",".join(models),
        "--experiments",
        ",".join(EXPERIMENTS),
        "--rows-docs",
        "3",
        "--n-boot",
        "20",
        "--workers",
        "1",
        "--out",
        str(out),
        *more,
    ]


def test_a_broken_model_fails_its_units_the_others_finish_and_the_rerun_runs_only_them(
    tmp_path, models, broken, capsys
):
    folder, data = broken
    out = tmp_path / "run"
    specs = [models[0], str(folder)]
    assert main(_argv(specs, out)) == 1
    printed = capsys.readouterr().out
    keys = [f"{e}/{folder}@-" for e in EXPERIMENTS]
    for key in keys[:2]:  # profile and flips fail reading the model
        assert f"FAILED {key}: {_cannot_read(folder)}" in printed
    # safety waits for flips of the same model: it fails naming it
    assert f"FAILED {keys[2]}: AttncodaError: unit {keys[1]} failed, so its tables" in printed
    assert (
        "3 unit(s) failed: do what their messages say, then rerun the same command; only the "
        "failed units run again"
    ) in printed
    units = read_run_tables(out)["units"].set_index(["experiment", "model"])
    for experiment in EXPERIMENTS:
        assert units.loc[(experiment, models[0]), "status"] == "done"
        assert units.loc[(experiment, str(folder)), "status"] == "failed"
    assert units.loc[("profile", str(folder)), "note"].startswith(_cannot_read(folder))
    tables = read_run_tables(out)
    for name in ("profile_heads", "flips", "safety"):
        assert set(tables[name]["model"]) == {models[0]}
    assert _unfinished(out) == [], "a failed unit left a partition behind"
    report = html.unescape((out / "report.html").read_text())
    assert f"{folder} / profile: failed, {_cannot_read(folder)}" in report

    # Restored, the same command runs only the three failed units, and the run's tables are
    # those of a run that never failed (same process, same ops: bit for bit).
    (folder / "model.safetensors").write_bytes(data)
    assert main(_argv(specs, out)) == 0
    assert "6 units: 3 run now, 3 finished earlier" in capsys.readouterr().out
    clean = tmp_path / "clean"
    assert main(_argv(specs, clean)) == 0
    assert_same_tables(out, clean)


def test_fail_fast_stops_at_the_first_failure(tmp_path, models, broken, capsys):
    folder, _ = broken
    out = tmp_path / "fast"
    assert main(_argv([str(folder), models[0]], out, "--fail-fast")) == 2
    err = capsys.readouterr().err
    weights = str((folder / "model.safetensors").resolve())
    assert err.startswith(
        f"attncoda: error: unit profile/{folder}@- failed: model file {weights!r} cannot be read"
    )
    assert not out.exists(), "a run that finished no unit left its folder"
    # From Python: the units before the failure are kept, to resume.
    with pytest.raises(AttncodaError, match=f"^unit profile/{folder}@- failed: model file "):
        reproduce(
            [models[0], str(folder)],
            out,
            experiments=EXPERIMENTS,
            settings=SETTINGS,
            progress=False,
            fail_fast=True,
        )
    assert done_units(out) == 3 and _unfinished(out) == []


def test_fail_fast_stops_a_local_pool_at_the_first_failure(tmp_path, models, broken):
    # Two workers, the longest units first: one of the broken model's units that read it
    # fails first, while the other model's units may be running beside it. The run stops
    # there, naming that unit; what finished is kept to resume, and nothing half-written or
    # locked is left.
    folder, _ = broken
    out = tmp_path / "pool-fast"
    first = rf"^unit (profile|flips)/{re.escape(str(folder))}@- failed: model file "
    with pytest.raises(AttncodaError, match=first):
        reproduce(
            [str(folder), models[0]],
            out,
            experiments=EXPERIMENTS,
            settings=SETTINGS,
            progress=False,
            workers=2,
            fail_fast=True,
        )
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob(".lock"))
    if out.exists():  # a unit of the other model finished: kept, to resume
        assert _unfinished(out) == [] and 1 <= done_units(out) < 6


def test_a_local_pool_keeps_going_too(tmp_path, models, broken):
    folder, data = broken
    out = tmp_path / "pool"
    run = dict(experiments=EXPERIMENTS, settings=SETTINGS, progress=False, workers=2)
    result = reproduce([str(folder), models[0]], out, **run)
    assert sorted(result.failed) == sorted(f"{e}/{folder}@-" for e in EXPERIMENTS)
    assert result.failed[f"profile/{folder}@-"].startswith(_cannot_read(folder))
    assert (result.ran, result.skipped) == (3, 0)
    assert set(read_run_tables(out)["flips"]["model"]) == {models[0]}
    assert _unfinished(out) == []
    (folder / "model.safetensors").write_bytes(data)
    # the run config does not record the workers: the rerun may run in this process
    again = reproduce([str(folder), models[0]], out, **{**run, "workers": 1})
    assert (again.ran, again.skipped, again.failed) == (3, 3, {})
    assert set(read_run_tables(out)["flips"]["model"]) == {str(folder), models[0]}


def test_a_failure_reads_as_one_line():
    from attncoda.run.job import describe

    assert describe(RuntimeError("shapes differ:\n  (2, 3)\n  (3, 2)\n")) == (
        "RuntimeError: shapes differ: (2, 3) (3, 2)"
    )
    assert describe(KeyError("x")) == "KeyError: 'x'"
    assert describe(RuntimeError()) == "RuntimeError"
