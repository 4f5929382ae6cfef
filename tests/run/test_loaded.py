"""What a runner keeps between units, :class:`attncoda.run.loaded.Loaded`: owned and passed,
one per run in this process, one per pool worker, one per Ray task; never shared by two
runs unless they are given the same one."""

from __future__ import annotations

import queue

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.run import execute, loaded
from attncoda.run.loaded import Loaded
from attncoda.store.runs import Unit

SETTINGS = {"profile": {"docs": 1, "max_tokens": 16}}


def test_a_runner_keeps_one_model_at_a_time():
    kept = Loaded()
    for kind, value in (("load", 1), ("rows", 2), ("after", 3), ("series_windows", 4)):
        kept.cached((kind, "a"), lambda v=value: v)
    assert kept.cached(("rows", "a"), lambda: 99) == 2  # kept: not made again
    kept.cached(("load", "b"), lambda: 5)
    # Loading b forgets a's load, rows and tables; windows of a series are no model's.
    assert kept.keys() == [("series_windows", "a"), ("load", "b")]
    assert Loaded().keys() == []  # another runner keeps nothing of this one's


def test_what_is_lent_is_read_instead_of_a_load_and_goes_with_its_block():
    kept = Loaded()
    live = ("model", "tokenizer", "info")
    with kept.lend({"mine": live}, {"series": [(0, "mine")]}) as same:
        assert same is kept and kept.lent("mine") and kept.lent("series")
        assert kept.loaded("mine", None) is live  # type: ignore[arg-type]
        assert kept.lent_series("series") == [(0, "mine")]
        kept.keep(("rows", "mine", "how"), 1)
        with pytest.raises(AttncodaError, match=r"\['mine'\] are already lent to this runner"):
            with kept.lend({"mine": live}):
                pass
    assert not kept.lent("mine") and kept.lent_series("series") is None
    assert kept.keys() == []  # what was kept of the lent model went with it
    assert not Loaded().lent("mine")


def test_two_runs_share_loaded_models_only_when_given_the_same_runner(
    models, tmp_path, monkeypatch
):
    from attncoda.run.reproduce import run_experiment

    loads: list[str] = []
    real = loaded._quiet_load

    def counted(spec, options):
        loads.append(spec)
        return real(spec, options)

    monkeypatch.setattr(loaded, "_quiet_load", counted)

    def run(out, **kept):
        run_experiment(
            "profile", models[:1], tmp_path / out, settings=SETTINGS, progress=False, **kept
        )
        return pd.read_parquet(tmp_path / out / "tables" / "profile_heads.parquet")

    shared = Loaded()
    first, second, third = run("a"), run("b", kept=shared), run("c", kept=shared)
    # The first two runs loaded the model each; the third, given the second's runner, did not.
    assert loads == [models[0]] * 2
    assert [k[:2] for k in shared.keys()][:1] == [("load", models[0])]  # then its tables
    for table in (second, third):  # and nothing it kept changed a table
        pd.testing.assert_frame_equal(table, first, check_exact=True)


def _fake_units(monkeypatch) -> list[tuple[str, Loaded, list]]:
    """``run_unit`` replaced by one that records each unit's runner and what it kept then,
    then keeps the unit's model as loaded."""
    seen: list[tuple[str, Loaded, list]] = []

    def run_unit(unit, config, root, command, kept):
        seen.append((unit.model, kept, kept.keys()))
        kept.keep(("load", unit.model, "how"), unit.model)
        return {"status": "done"}

    monkeypatch.setattr(execute, "run_unit", run_unit)
    return seen


def _serve(tasks: list) -> list:
    from attncoda.run.pool import serve

    sent, results = queue.Queue(), queue.Queue()
    for task in [*tasks, None]:
        sent.put(task)
    serve(0, sent, results, False, lambda: None)
    return [results.get_nowait() for _ in tasks]


def test_a_pool_worker_builds_its_own_runner_and_holds_one_model(monkeypatch):
    seen = _fake_units(monkeypatch)

    def task(model, held):
        return (Unit("profile", model, "-"), {}, ".", "reproduce", held)

    done = _serve([task("a", "a"), task("a", "a"), task("b", "b"), task("train", None)])
    assert [r[1] for r in done] == ["done"] * 4
    runners = {id(kept) for _, kept, _ in seen}
    assert len(runners) == 1  # one runner for every unit of the worker
    assert [keys for _, _, keys in seen] == [
        [],  # built by the worker: nothing of the caller's
        [("load", "a", "how")],  # a's second unit finds a loaded
        [],  # b goes to the worker: a is forgotten before b loads
        [("load", "b", "how")],  # a unit that loads nothing keeps b
    ]
    _serve([task("a", "a")])
    assert id(seen[-1][1]) not in runners and seen[-1][2] == []  # another worker: its own


def test_a_ray_task_builds_its_own_runner(monkeypatch):
    from attncoda.run.ray_tasks import _unit_task

    seen = _fake_units(monkeypatch)
    for _ in range(2):
        _unit_task(Unit("profile", "a", "-"), {}, ".", "reproduce")  # type: ignore[arg-type]
    (_, first, kept_first), (_, second, kept_second) = seen
    assert first is not second and kept_first == kept_second == []
