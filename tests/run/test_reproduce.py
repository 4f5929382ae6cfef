"""``attncoda reproduce``: a killed run resumes to the tables of an uninterrupted one; a
rerun skips finished units; another config is refused; ``report`` re-renders alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.cli import main
from attncoda.experiments.collapse import collapse_from_stats, stats_frames
from attncoda.report.html import render_report
from attncoda.run.config import run_config
from attncoda.run.direct import checkpoint_stats
from attncoda.run.plan import plan
from attncoda.run.reproduce import reproduce
from tiny_runs import TINY_SETTINGS, assert_same_tables, done_units, run_tables

SETTINGS = TINY_SETTINGS


def _series_windows(first_checkpoint: Path) -> list:
    """The collapse windows of the tiny settings, cut by the series' first tokenizer."""
    from attncoda.models.load import load_model
    from attncoda.run.captured import corpus_windows

    _, tokenizer, _ = load_model(str(first_checkpoint))
    collapse_settings = SETTINGS["collapse"]
    windows, _ = corpus_windows(
        tokenizer,
        text=None,
        max_tokens=collapse_settings["max_tokens"],
        docs=collapse_settings["docs"],
    )
    return [w.input_ids for w in windows]


def _checkpoint_stats(points, windows):
    from attncoda.models.load import load_model

    for point in points:
        model, tokenizer, _ = load_model(point.spec)
        yield checkpoint_stats(model, tokenizer, windows, point)


def collapse(series, windows, *, model: str):
    """The collapse result of every checkpoint of ``series`` (a folder or its points),
    captured here, one checkpoint after another."""
    from attncoda.models.series import parse_series

    points = parse_series(series) if isinstance(series, (str, Path)) else list(series)
    return collapse_from_stats(
        _checkpoint_stats(points, windows), windows, points=points, model=model
    )


def test_plan_has_every_experiment_per_model_and_the_series(models, uninterrupted):
    config = run_config(models, settings=SETTINGS)
    units = plan(config).units
    per_model = ["profile", "flips", "cluster", "safety", "predictor", "prune"]
    assert [u.experiment for u in units[:6]] == per_model
    assert [u.revision for u in units if u.experiment == "collapse"] == [
        "step0",
        "step1",
        "step2",
        "step4",
        "step8",
        "step16",
    ]
    assert [u.key for u in units if u.model == "train-tiny" and u.experiment != "collapse"] == [
        "train/train-tiny@-",
        "predictor/train-tiny@step0",
        "predictor/train-tiny@step16",
    ]
    tables = run_tables(uninterrupted)
    for name in ("flips", "cluster", "safety", "predictor", "prune", "collapse", "units"):
        assert f"{name}.parquet" in tables
    units_table = tables["units.parquet"]
    assert len(units_table) == len(units) and set(units_table["status"]) == {"done"}
    assert set(tables["flips.parquet"]["model"]) == set(models)
    # Every model experiment's table names the family (train-tiny is a GPT-NeoX), third.
    model_tables = ("profile_heads", "flips", "cluster", "cluster_summary", "cluster_distances")
    for name in (*model_tables, "safety", "prune"):
        assert list(tables[f"{name}.parquet"].columns[:3]) == ["model", "revision", "family"]
        assert set(tables[f"{name}.parquet"]["family"]) == {"GPT-NeoX"}, name
    # the collapse table assembled from stored checkpoint partitions equals collapse() direct
    series = uninterrupted / "series" / "train-tiny"  # the run trained its own series
    direct = collapse(series, _series_windows(series / "step0"), model="train-tiny")
    stored = tables["collapse.parquet"].drop(columns="revision")
    pd.testing.assert_frame_equal(stored, direct.table, check_exact=True)


def test_plan_waits_for_the_units_it_reads():
    # safety alone brings the flips unit it reads; each waits for it, same model and revision
    config = run_config(["a/x@step0", "a/b@x@y"], experiments=["safety"])
    assert config.experiments == ("flips", "safety")
    found = plan(config)
    assert [u.key for u in found.units] == [
        "flips/a/x@step0",
        "safety/a/x@step0",
        "flips/a/b@x@y",  # the revision is everything after the first '@'
        "safety/a/b@x@y",
    ]
    assert [d.key for d in found.waits_for(found.units[1])] == ["flips/a/x@step0"]
    assert found.waits_for(found.units[0]) == ()
    assert {u.key for u in found.awaited()} == {"flips/a/x@step0", "flips/a/b@x@y"}
    # a trained series: its checkpoints' units wait for the train unit; the predictor on
    # a checkpoint reads flips where it runs (no flips unit of the series is planned)
    config = run_config([], experiments=["collapse", "predictor"], settings=SETTINGS)
    found = plan(config)
    train = next(u for u in found.units if u.experiment == "train")
    readers = [u for u in found.units if u.model == "train-tiny" and u != train]
    assert len(readers) == 6 + 2
    assert all(found.waits_for(u) == (train,) for u in readers)


def test_a_model_named_twice_is_one_unit_per_experiment():
    # named twice in the models: merged, in the order first named
    config = run_config(["b", "a", "b"], experiments=["profile"])
    assert config.models == ("b", "a")
    assert [u.key for u in plan(config).units] == ["profile/b@-", "profile/a@-"]
    # named in the models and again as the series' last checkpoint and an unseen run: the
    # predictor runs once on each, where the models name it
    config = run_config(
        ["bigram-backcopy@step2000", "bigram-backcopy-small@step500"], series="bigram-backcopy"
    )
    keys = [u.key for u in plan(config).units]
    per_model = ["profile", "flips", "cluster", "safety", "predictor", "prune", "sink_rate"]
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000]
    assert keys == [
        *(f"{e}/bigram-backcopy@step2000" for e in per_model),
        *(f"{e}/bigram-backcopy-small@step500" for e in per_model),
        *(f"collapse/bigram-backcopy@step{s}" for s in steps),
        "predictor/bigram-backcopy@step0",
        "predictor/bigram-backcopy-seed2@step1000",
        "predictor/bigram-backcopy-triggers5@step1000",
    ]


#: The tiny settings for a run given its series: no train settings (they shape a retrain).
GIVEN = {group: values for group, values in SETTINGS.items() if group != "train"}


def test_a_given_series_waits_for_nothing(models):
    series = str(Path(models[0]).parent)
    found = plan(run_config([], series=series, experiments=["collapse"], settings=GIVEN))
    assert [u.experiment for u in found.units] == ["collapse"] * 6
    assert found.after == {}


def test_sigkill_partway_then_resume_gives_identical_tables(tmp_path, models, uninterrupted):
    out = tmp_path / "killed"
    script = (
        "from attncoda.run.reproduce import reproduce; "
        f"reproduce({models!r}, {str(out)!r}, settings={SETTINGS!r}, progress=False)"
    )
    total = len(plan(run_config(models, settings=SETTINGS)).units)
    for kill_after in (2, 9, 14):  # inside the first model, the second, the series
        proc = subprocess.Popen([sys.executable, "-c", script])
        deadline = time.monotonic() + 120
        while done_units(out) < kill_after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.kill()  # SIGKILL: no handler runs, files may be half-written
        proc.wait()
        assert done_units(out) < total, "the run finished before it was killed"
    assert not (out / "tables").exists()
    result = reproduce(models, out, settings=SETTINGS, progress=False)
    assert result.skipped >= 14 and result.ran == total - result.skipped
    assert_same_tables(out, uninterrupted)


def test_rerun_skips_everything_and_keeps_tables(tmp_path, models, uninterrupted):
    out = shutil.copytree(uninterrupted, tmp_path / "run")  # the shared run stays read-only
    before = {p.name: p.read_bytes() for p in (out / "tables").glob("*.parquet")}
    result = reproduce(models, out, settings=SETTINGS, progress=False)
    assert result.ran == 0 and result.skipped == len(result.units)
    after = {p.name: p.read_bytes() for p in (out / "tables").glob("*.parquet")}
    assert after == before


def test_other_config_is_refused_naming_the_keys(tmp_path, models, uninterrupted, capsys):
    out = shutil.copytree(uninterrupted, tmp_path / "run")
    changed = {**SETTINGS, "flips": {"n_boot": 21}}
    with pytest.raises(AttncodaError, match=r"settings\.flips\.n_boot \(stored 20, given 21\)"):
        reproduce(models, out, settings=changed, progress=False)
    code = main(["reproduce", "--models", ",".join(models), "--seed", "5", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "differing keys" in err and "seed (stored 0, given 5)" in err


def test_bad_arguments_are_named():
    with pytest.raises(AttncodaError, match="unknown experiment"):
        run_config(["x"], experiments=["flips", "nope"])
    with pytest.raises(
        AttncodaError, match="unknown setting 'n_bootz' of flips: use one of metrics, n_boot, tol"
    ):
        run_config(["x"], settings={"flips": {"n_bootz": 1}})
    with pytest.raises(
        AttncodaError, match="unknown setting 'window' of rows: use one of docs, max_tokens"
    ):
        run_config(["x"], settings={"rows": {"window": 1}})
    with pytest.raises(AttncodaError, match="unknown settings group 'flip': use one of profile"):
        run_config(["x"], settings={"flip": {"n_boot": 1}})
    with pytest.raises(AttncodaError, match="unknown scale"):
        run_config(["x"], scale="huge")
    with pytest.raises(AttncodaError, match="^two attention files are named 'a.npz': rename one"):
        run_config([], experiments=["flips"], attentions=["one/a.npz", "two/a.npz"])
    with pytest.raises(AttncodaError, match="prune runs a model: give a model spec, not"):
        run_config([], experiments=["flips", "prune"], attentions=["a.npz"])
    with pytest.raises(AttncodaError, match="give models or attention files, not both"):
        run_config(["x"], experiments=["flips"], attentions=["a.npz"])


def test_the_scales_are_overrides_of_the_settings_defaults():
    from attncoda.experiments.flips import Settings as FlipsSettings
    from attncoda.experiments.prune import Settings as PruneSettings

    demo = run_config(["x"]).to_json()
    assert demo["settings"]["flips"]["n_boot"] == FlipsSettings().n_boot == 200
    assert PruneSettings().ks == (4, 16, 64) and PruneSettings().max_tokens == 128
    # the demo prunes at two head counts over windows of 64 tokens: minutes, not ten
    assert demo["settings"]["prune"]["ks"] == [16, 64]
    assert demo["settings"]["prune"]["max_tokens"] == 64
    # 16 held-out windows: each perplexity ratio gets its paired interval (10 at least)
    assert demo["settings"]["prune"]["eval_docs"] == PruneSettings().eval_docs == 16
    # 16 windows: flips' interval needs 10 documents, and the predictor's protocol reads 16
    assert demo["rows"] == {"docs": 16, "max_tokens": 128}
    full = run_config(["x"], scale="full", settings={"flips": {"n_boot": 7}}).to_json()
    assert full["rows"] == {"docs": 16, "max_tokens": 128}
    assert full["settings"]["flips"]["n_boot"] == 7  # a setting given wins over the scale
    assert full["settings"]["profile"]["docs"] == 32
    assert full["settings"]["prune"]["ks"] == [1, 2, 4, 8, 16, 32, 64]
    assert full["settings"]["prune"]["max_tokens"] == 128
    # an experiment that needs no rows records none
    assert run_config(["x"], experiments=["profile"]).rows is None


def test_checkpoint_stats_round_trip_through_tables(models):
    from attncoda.experiments.collapse import stats_from_frames
    from attncoda.models.load import load_model
    from attncoda.models.series import parse_series

    points = parse_series(Path(models[0]).parent)[-3:]
    windows = [[0, 5, 9, 30, 7, 2], [0, 11, 3, 8]]
    frames = []
    for point in points:
        model, tokenizer, _ = load_model(point.spec)
        frames.append(stats_frames(checkpoint_stats(model, tokenizer, windows, point)))
    rebuilt = [
        stats_from_frames(p.step, p.label, rows.sample(frac=1, random_state=0), sinks)
        for p, (rows, sinks) in zip(points, frames, strict=True)
    ]
    got = collapse_from_stats(rebuilt, windows, points=points, model="m")
    want = collapse(points, windows, model="m")
    pd.testing.assert_frame_equal(got.table, want.table, check_exact=True)
    pd.testing.assert_frame_equal(got.checkpoints, want.checkpoints, check_exact=True)
    assert got.summary == want.summary
    with pytest.raises(AttncodaError, match="not the full grid"):
        stats_from_frames(1, "step1", frames[0][0].iloc[1:], frames[0][1])


def test_report_command_rebuilds_identical_html_without_a_model(tmp_path, uninterrupted):
    out = shutil.copytree(uninterrupted, tmp_path / "run")  # the shared run stays read-only
    report = out / "report.html"
    before = report.read_bytes()
    report.unlink()
    script = (
        "import sys; from attncoda.cli import main; rc = main(['report', sys.argv[1]]); "
        "assert 'torch' not in sys.modules, 'report imported torch'; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"report: {report}" in done.stdout
    assert report.read_bytes() == before


def test_a_given_series_is_used_instead_of_training_one(tmp_path, models):
    series = Path(models[0]).parent
    out = tmp_path / "given"
    result = reproduce(
        [], out, series=str(series), experiments=["collapse"], settings=GIVEN, progress=False
    )
    assert [u.key for u in result.units] == [f"collapse/tt@step{s}" for s in (0, 1, 2, 4, 8, 16)]
    assert not (out / "series").exists()
    stored = pd.read_parquet(out / "tables" / "collapse.parquet").drop(columns="revision")
    direct = collapse(series, _series_windows(series / "step0"), model="tt")
    pd.testing.assert_frame_equal(stored, direct.table, check_exact=True)
    html = render_report(out).read_text()
    assert "This section was not run" in html


def test_safety_and_predictor_read_the_stored_flip_distances(models, uninterrupted):
    import numpy as np

    from attncoda.experiments.flips import CAPTURE_TOL, FlipsResult, flips
    from attncoda.run import stored as partition
    from attncoda.run.fit import model_rows
    from attncoda.store.runs import RunStore, Unit

    config = json.loads((uninterrupted / "manifest.json").read_text())["config"]
    unit = Unit("flips", models[0])
    assert (uninterrupted / "units" / unit.folder / partition.ARRAYS).is_file()
    store = RunStore(uninterrupted, "reproduce", config)
    stored = FlipsResult.from_tables(models[0], partition.read_unit(store, unit))
    rows = model_rows(models[0], rows=SETTINGS["rows"])
    fresh = flips(rows, n_boot=SETTINGS["flips"]["n_boot"], seed=0, tol=CAPTURE_TOL)
    assert stored.distances.keys() == fresh.distances.keys()
    for key, value in fresh.distances.items():
        np.testing.assert_array_equal(stored.distances[key], value)
    for metric, value in fresh.bootstrap.items():
        np.testing.assert_array_equal(stored.bootstrap[metric], value)
    assert (stored.n_docs, stored.n_rows, stored.tol) == (fresh.n_docs, fresh.n_rows, fresh.tol)
    pd.testing.assert_frame_equal(stored.table, fresh.table, check_exact=True)


def test_the_default_series_is_the_shipped_one_and_a_retrain_is_asked_for():
    from attncoda.models.shipped import UNSEEN

    default = run_config([], experiments=["collapse", "predictor"])
    stored = default.to_json()
    assert stored["train"] is None and stored["series"]["spec"] == "bigram-backcopy"
    assert stored["series"]["points"][-1] == [2000, "step2000", "bigram-backcopy@step2000"]
    assert [u[2] for u in stored["series"]["unseen"]] == [
        f"{name}@step{recipe['steps']}" for name, recipe in UNSEEN.items()
    ]
    assert not any(u.experiment == "train" for u in plan(default).units)  # nothing trains
    retrain = {"train": {"retrain": True}}
    again = run_config([], experiments=["collapse"], settings=retrain).to_json()
    assert again["series"]["task"] == "bigram-backcopy"
    assert again["series"]["points"][-1][1] == "step2000"  # the task's default steps
    text = {"train": {"retrain": True, "task": "text"}}
    text = run_config([], experiments=["collapse"], settings=text).to_json()
    assert text["series"]["task"] == "text"
    assert text["series"]["points"][-1][1] == "step1000"
    msg = "unknown train task 'copy': use one of text, bigram-backcopy"
    with pytest.raises(AttncodaError, match=msg):
        run_config(
            [], experiments=["collapse"], settings={"train": {"retrain": True, "task": "copy"}}
        )


def test_train_settings_without_a_retrain_are_refused():
    msg = (
        "train setting steps=16 shapes a series the run trains: add --retrain (retrain=True) "
        "to train one, or leave it out to read the shipped checkpoints"
    )
    with pytest.raises(AttncodaError) as err:
        run_config([], experiments=["collapse"], settings={"train": {"steps": 16}})
    assert str(err.value) == msg
    msg = (
        "retrain trains the default series, but the series 'bigram-backcopy' is given: drop "
        "--series to retrain, or drop --retrain to read the series given"
    )
    with pytest.raises(AttncodaError) as err:
        run_config(
            [],
            series="bigram-backcopy",
            experiments=["collapse"],
            settings={"train": {"retrain": True}},
        )
    assert str(err.value) == msg


def test_reproduce_and_sweep_run_their_units_through_one_executor(monkeypatch, tmp_path, models):
    from attncoda.run import executors
    from attncoda.run import reproduce as reproduce_module
    from attncoda.run import sweep as sweep_module

    seen: list[tuple[str, int]] = []

    class Recording(executors.InProcess):
        def run(self, job, log):
            seen.append((job.command, len(job.todo)))
            return super().run(job, log)

    monkeypatch.setattr(reproduce_module, "InProcess", Recording)
    monkeypatch.setattr(sweep_module, "InProcess", Recording)
    settings = {"rows": SETTINGS["rows"], "flips": SETTINGS["flips"]}
    reproduce(models[:1], tmp_path / "r", experiments=["flips"], settings=settings, progress=False)
    sweep_module.sweep(
        models[:1], tmp_path / "s", experiments=["flips"], settings=settings, progress=False
    )
    assert seen == [("reproduce", 1), ("reproduce", 1)]
    assert_same_tables(tmp_path / "r", tmp_path / "s")
    assert isinstance(executors.OnRay(local=1), executors.Executor)


UNSEEN_SETTINGS = {**SETTINGS, "train": {**SETTINGS["train"], "unseen": True}}


def test_the_predictor_is_applied_to_bigram_backcopy_runs_it_never_saw():
    from attncoda.models.shipped import UNSEEN as UNSEEN_SERIES

    config = run_config([], experiments=["collapse", "predictor"], settings=UNSEEN_SETTINGS)
    unseen = config.to_json()["series"]["unseen"]
    # at most the series' own 16 steps each, trained under the run folder
    assert [(n, s, spec) for n, s, spec, _ in unseen] == [
        (name, 16, f"run:series/unseen/{name}/step16") for name in UNSEEN_SERIES
    ]
    found = plan(config)
    train = next(u for u in found.units if u.experiment == "train")
    units = [u for u in found.units if u.model in UNSEEN_SERIES]
    assert [u.key for u in units] == [f"predictor/{name}@step16" for name in UNSEEN_SERIES]
    assert all(found.waits_for(u) == (train,) for u in units)
    # none without the predictor, on the text task, or when switched off
    text = {**UNSEEN_SETTINGS, "train": {**UNSEEN_SETTINGS["train"], "task": "text"}}
    for experiments, settings in (
        (["collapse"], UNSEEN_SETTINGS),
        (["collapse", "predictor"], text),
        (["collapse", "predictor"], SETTINGS),
    ):
        stored = run_config([], experiments=experiments, settings=settings).to_json()
        assert stored["series"]["unseen"] == []


def test_a_run_trains_the_unseen_runs_and_reports_them_unseen(tmp_path):
    from attncoda.models.shipped import UNSEEN as UNSEEN_SERIES
    from attncoda.training.identity import checkpoint_recipe

    out = tmp_path / "run"
    reproduce(
        [], out, experiments=["collapse", "predictor"], settings=UNSEEN_SETTINGS, progress=False
    )
    table = pd.read_parquet(out / "tables" / "predictor.parquet")
    rows = table.set_index("model")
    for name, fields in UNSEEN_SERIES.items():
        recipe = checkpoint_recipe(out / "series" / "unseen" / name / "step16")
        assert recipe is not None and recipe["step"] == 16
        assert {k: recipe["config"].get(k) for k in ("seed", "size")} == {
            "seed": fields["seed"],
            "size": fields.get("size", "tiny"),
        }
        assert recipe["config"]["task_config"]["n_triggers"] == fields.get("triggers", 3)
        assert not rows.loc[name, "in_training_set"]
        assert rows.loc[name, "matched_training_model"] == rows.loc[name, "matched_by"] == ""
        # what it read is recorded as read: its task's sequences, not the text corpus
        assert rows.loc[name, "read_corpus"] == "bigram-backcopy"
    assert set(table["model"]) == {"train-tiny", *UNSEEN_SERIES}
    # what retraining changed, beside the shipped checkpoints' figures (the reference run's)
    from attncoda.models.shipped import manifest

    measured = manifest()["measured"]
    retrain = pd.read_parquet(out / "tables" / "retrain.parquet").set_index("model")
    assert list(retrain.index) == ["bigram-backcopy", *UNSEEN_SERIES]
    collapse = pd.read_parquet(out / "tables" / "collapse.parquet").query(
        "pair_kind == 'first_last' and level == 'model'"
    )
    first = retrain.loc["bigram-backcopy"]
    assert first["quantity"] == "collapse sink share"
    assert first["shipped"] == measured["collapse_sink_share"]
    assert first["retrained"] == float(collapse["sink_share"].iloc[0])
    for name in UNSEEN_SERIES:
        assert retrain.loc[name, "shipped"] == measured["flip_rate"][name]
        assert retrain.loc[name, "retrained"] == rows.loc[name, "measured"]
    assert (retrain["change"] == retrain["retrained"] - retrain["shipped"]).all()


def test_the_predictor_unit_reads_the_fitted_protocol_and_gives_no_verdict_off_it(models, tmp_path):
    """At the run's rows (3 windows of 32 tokens) the predictor unit reads its own rows with
    the shipped predictor's protocol (16 windows of 128 tokens): its features and flip rate
    are those of the rows measured that way directly. With ``protocol="run"`` it reads the
    run's rows, which are off protocol: no verdict, never counted."""
    from attncoda.experiments.predictor import OFF_PROTOCOL, Predictor, shipped_predictor
    from attncoda.run.fit import measured_row

    protocol = Predictor.from_json(shipped_predictor()).protocol
    fitted = {**SETTINGS, "predictor": {"protocol": "fitted"}}
    out = tmp_path / "fitted"
    reproduce(models[:1], out, experiments=["predictor"], settings=fitted, progress=False)
    (row,) = pd.read_parquet(out / "tables" / "predictor.parquet").to_dict("records")
    assert (row["read_windows"], row["read_window_tokens"]) == (16, 128)
    assert row["on_protocol"] and row["off_protocol"] == "" and row["verdict"] != OFF_PROTOCOL
    assert row["relation"] == "held out" and row["counted"]
    reference = measured_row(models[0], rows=protocol.rows_at())
    assert Predictor.from_json(shipped_predictor()).off_protocol(reference["protocol"]) == []
    for name, value in reference["features"].items():
        assert row[f"feature_{name}"] == pytest.approx(value, rel=1e-12, abs=1e-15)
    rates = list(reference["flip_rates"].values())
    assert row["measured"] == pytest.approx(sum(rates) / len(rates), rel=1e-12)
    # the run's flips unit read the run's rows; the predictor did not reuse them
    flips = pd.read_parquet(out / "tables" / "flips.parquet")
    assert set(flips["metric"]) == set(protocol.metrics)

    out = tmp_path / "run"
    reproduce(models[:1], out, experiments=["predictor"], settings=SETTINGS, progress=False)
    (row,) = pd.read_parquet(out / "tables" / "predictor.parquet").to_dict("records")
    assert (row["read_windows"], row["read_window_tokens"]) == (3, 32)
    assert row["verdict"] == OFF_PROTOCOL and not row["on_protocol"] and not row["counted"]
    assert "windows 3, not 16" in row["off_protocol"]
    assert "window_tokens 32, not 128" in row["off_protocol"]


def test_the_weights_are_hashed_only_for_the_predictor(models, tmp_path, monkeypatch):
    """Only the predictor recognises models by content: a run without it hashes nothing,
    and a run with it hashes each model once."""
    import attncoda.training.identity as identity

    real, calls = identity.model_identity, []

    def counted(model, folder=None):
        calls.append(folder)
        return real(model, folder)

    monkeypatch.setattr(identity, "model_identity", counted)
    reproduce(models[:1], tmp_path / "f", experiments=["flips"], settings=SETTINGS, progress=False)
    assert calls == []
    reproduce(
        models[:1], tmp_path / "p", experiments=["predictor"], settings=SETTINGS, progress=False
    )
    assert len(calls) == 1
    (row,) = pd.read_parquet(tmp_path / "p" / "tables" / "predictor.parquet").to_dict("records")
    assert row["relation"] == "held out"
