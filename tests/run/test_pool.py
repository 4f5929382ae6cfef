"""The local pool: units in parallel on worker processes, waiting for the units they run
after and for memory, giving the tables of a run in one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncoda import AttncodaError
from attncoda.run.job import Job
from attncoda.run.plan import Plan
from attncoda.run.pool import LocalPool, Schedule, shares
from attncoda.store.runs import Unit
from tiny_runs import TINY_SETTINGS, assert_same_tables, run_tables

GB = 2**30


def _job(units: list[Unit], after: dict[Unit, tuple[Unit, ...]] | None = None) -> Job:
    plan = Plan(units=tuple(units), after=after or {})
    return Job(plan=plan, todo=list(units), config={}, root=Path("."), command="reproduce")


def _schedule(units: list[Unit], peaks: dict[str, int]) -> Schedule:
    """Two workers, a 10 GB budget, each unit's model its spec with the peak ``peaks`` gives."""
    return Schedule(_job(units), 2, lambda u: u.model, peaks.__getitem__, budget=10 * GB)


def test_a_model_that_would_not_fit_beside_a_running_one_waits(monkeypatch):
    from attncoda.run import pool

    monkeypatch.setattr(pool, "unit_cost", lambda unit: 1.0)  # memory alone decides here
    big = [Unit("profile", "big", "-"), Unit("flips", "big", "-")]
    other = [Unit("profile", "other", "-"), Unit("profile", "small", "-")]
    peaks = {"big": 7 * GB, "other": 6 * GB, "small": 1 * GB}
    schedule = _schedule([*big, *other], peaks)
    assert schedule.next_for(0) == big[0]
    # 'other' (6 GB) would not fit beside 'big' (7 GB) in 10 GB; 'small' (1 GB) does, and
    # a second unit of 'big' would load a second copy (14 GB): it waits for worker 0.
    assert schedule.next_for(1) == other[1]
    schedule.finish(1)
    assert schedule.next_for(1) is None  # only 'big' and 'other' are left: neither fits
    schedule.finish(0)
    assert schedule.next_for(0) == big[1]  # the model worker 0 holds comes first
    schedule.finish(0)
    assert schedule.next_for(1) == other[0]  # alone, anything runs
    schedule.finish(1)
    assert schedule.over and not schedule.failed


def test_the_largest_model_starts_first_and_spreads_while_a_worker_keeps_its_own(monkeypatch):
    # Plan order lists the small model first; its units are quick. Among units that cost
    # the same, the big model's start first: both workers start on them, and each then
    # keeps the model it holds.
    from attncoda.run import pool

    monkeypatch.setattr(pool, "unit_cost", lambda unit: 1.0)
    small = [Unit("profile", "small", "-"), Unit("flips", "small", "-")]
    big = [Unit("profile", "big", "-"), Unit("flips", "big", "-"), Unit("cluster", "big", "-")]
    peaks = {"big": 3 * GB, "small": 1 * GB}
    schedule = _schedule([*small, *big], peaks)
    assert schedule.next_for(0) == big[0]
    assert schedule.next_for(1) == big[1]  # fits twice in 10 GB: a second copy, started now
    schedule.finish(0)
    assert schedule.next_for(0) == big[2]  # worker 0 holds 'big': no reload
    schedule.finish(1)
    assert schedule.next_for(1) == small[0]
    schedule.finish(1)
    assert schedule.next_for(1) == small[1]
    schedule.finish(0)
    schedule.finish(1)
    assert schedule.over


def test_the_longest_unit_starts_first_and_a_worker_keeps_its_model(monkeypatch):
    # SmolLM2's cluster unit is the longest: it starts first, on worker 0, and flips (the
    # next longest) on worker 1. A worker then stays with its model, longest first, before
    # it takes another model's unit (the small model's longer flips before its profile).
    from attncoda.run import pool

    costs = {"cluster": 100.0, "flips": 55.0, "profile": 5.0}
    monkeypatch.setattr(pool, "unit_cost", lambda unit: costs[unit.experiment])
    smol = [Unit(e, "smollm2", "-") for e in ("profile", "flips", "cluster")]
    mini = [Unit(e, "minilm", "-") for e in ("profile", "flips")]
    peaks = {"smollm2": 2 * GB, "minilm": 1 * GB}
    schedule = _schedule([*smol, *mini], peaks)
    assert schedule.next_for(0) == smol[2]
    assert schedule.next_for(1) == smol[1]
    schedule.finish(1)
    assert schedule.next_for(1) == smol[0]  # its own model's, though minilm's flips costs more
    schedule.finish(1)
    assert schedule.next_for(1) == mini[1]
    schedule.finish(1)
    assert schedule.next_for(1) == mini[0]
    schedule.finish(1)
    schedule.finish(0)
    assert schedule.over


def test_the_running_workers_share_the_cores_of_the_idle_ones():
    unit = Unit("prune", "gemma3", "-")
    # 2 workers on 2 cores: one core each, both cores for the last unit running
    assert shares({0: unit, 1: unit}, 2, 2) == {0: 1, 1: 1}
    assert shares({1: unit}, 2, 2) == {0: 1, 1: 2}
    assert shares({}, 2, 2) == {0: 1, 1: 1}
    # 3 workers on 8 cores: 2 each; two running share the 8 (4 each), one takes all 8
    assert shares({0: unit, 2: unit}, 3, 8) == {0: 4, 1: 2, 2: 4}
    assert shares({1: unit}, 3, 8) == {0: 2, 1: 8, 2: 2}
    # more workers than cores: never fewer than one thread
    assert shares({0: unit, 1: unit, 2: unit}, 3, 2) == {0: 1, 1: 1, 2: 1}


def test_a_unit_waits_for_the_units_it_runs_after_and_fails_with_them():
    flips, safety = Unit("flips", "m", "-"), Unit("safety", "m", "-")
    profile = Unit("profile", "n", "-")
    schedule = Schedule(
        _job([flips, safety, profile], {safety: (flips,)}),
        2,
        lambda u: u.model,
        lambda spec: GB,
        budget=10 * GB,
    )
    assert schedule.next_for(0) == flips
    assert schedule.next_for(1) == profile  # safety waits for flips
    schedule.finish(1)
    assert schedule.next_for(1) is None
    schedule.finish(0, "RuntimeError: boom")
    ((blocked, error),) = schedule.blocked()
    assert blocked == safety and "unit flips/m@-" in error and "boom" in error
    assert schedule.over


def test_workers_must_be_a_positive_integer(tmp_path):
    from attncoda.run.reproduce import reproduce

    with pytest.raises(AttncodaError, match="workers must be a positive integer; got 0"):
        LocalPool(0)
    with pytest.raises(AttncodaError, match="workers must be a positive integer; got 1.5"):
        reproduce(["minilm"], tmp_path / "r", workers=1.5)  # type: ignore[arg-type]
    assert not (tmp_path / "r").exists()


def test_two_workers_give_the_tables_of_one_process(tiny_models, tmp_path):
    """Profile, flips and safety of the two tiny models on two workers (safety waits for
    flips) against the same run in this process with a worker's threads, torch's and numpy's
    BLAS alike: the same ops in the same order, so every table is the same, bit for bit."""
    import torch
    from threadpoolctl import threadpool_limits

    from attncoda.run.pool import cores
    from attncoda.run.reproduce import reproduce

    run = dict(experiments=["profile", "flips", "safety"], settings=TINY_SETTINGS, progress=False)
    result = reproduce(tiny_models, tmp_path / "pool", workers=2, **run)
    assert result.ran == len(result.units) == 6 and not result.failed
    threads, before = max(1, cores() // 2), torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(threads):
            reproduce(tiny_models, tmp_path / "one", workers=1, **run)
    finally:
        torch.set_num_threads(before)
    assert len(run_tables(tmp_path / "one")) > 4
    assert_same_tables(tmp_path / "pool", tmp_path / "one")
