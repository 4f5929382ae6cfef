"""Every experiment runs, or is cleanly skipped with its reason, on every shipped checkpoint
at demo scale, and no table of the run holds a key twice (docs/design.md, "A run keeps
going", "One unit per (experiment, model, revision)").

One run is shared by the assertions: every per-model experiment on all 16 shipped
checkpoints, collapse on the shipped series. Each checkpoint is named twice or three times
(among the models, as a series point, as a series end or an unseen run the predictor is
applied to), so the run also shows that the planner merges them. The demo scale's settings
that meet a model's shape are kept (prune's ks and window length, the windows' lengths);
only the counts (windows, resamples, MDS starts, prune's channels and orders) are cut, so the
run costs well under a minute of one core.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attncoda.experiments.contract import EXPERIMENTS, experiment
from attncoda.models.shipped import SHIPPED
from attncoda.run.reproduce import reproduce
from attncoda.store.runs import read_run_tables

SPECS = [f"{name}@step{step}" for name, run in SHIPPED.items() for step in run.steps]
COUNTS = {
    "rows": {"docs": 2},
    "profile": {"docs": 2},
    "flips": {"n_boot": 20},
    "cluster": {"n_init": 1},
    "predictor": {"protocol": "run"},
    "sink_rate": {"docs": 2},
    "collapse": {"docs": 2},
    "prune": {
        "profile_docs": 2,
        "eval_docs": 2,
        "n_boot": 20,
        "channels": ["sink_mass"],
        "orders": ["high"],
    },
}

#: The columns that name one row of each table, besides ``model`` and ``revision`` (read
#: off each experiment's documented table layout, not derived from the tables).
KEYS = {
    "cluster": ["layer", "head"],
    "cluster_agreement": ["variant_a", "variant_b"],
    "cluster_distances": ["variant", "head_a", "head_b"],
    "cluster_summary": ["variant"],
    "collapse": ["pair_kind", "pair_from", "pair_to", "level", "layer", "head"],
    "collapse_checkpoints": ["step", "level", "layer", "head"],
    "flips": ["metric"],
    "flips_by_layer": ["metric", "layer"],
    "predictor": [],
    "profile_heads": ["layer", "head"],
    "prune": ["channel", "order", "ablation", "k"],
    "prune_heads": ["layer", "head"],
    "safety": ["metric", "bin_kind", "bin"],
    "safety_grid": ["metric", "sink_share_bin", "sink_gap_bin"],
    "sink_rate": ["position"],
    "sink_rate_heads": ["layer", "head", "position"],
    "units": ["experiment"],
}


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    out = tmp_path_factory.mktemp("walk") / "run"
    return reproduce(SPECS, out, settings=COUNTS, progress=False), out


def test_every_experiment_runs_or_is_skipped_on_every_shipped_checkpoint(walk):
    result, out = walk
    assert result.failed == {}
    per_model = [e for e in EXPERIMENTS if "checkpoint" not in experiment(e).needs]
    steps = SHIPPED["bigram-backcopy"].steps
    expected = {f"{e}/{spec}" for e in per_model for spec in SPECS} | {
        f"collapse/bigram-backcopy@step{s}" for s in steps
    }
    keys = [u.key for u in result.units]
    assert len(keys) == len(set(keys)) == 16 * len(per_model) + 13
    assert set(keys) == expected
    units = read_run_tables(out)["units"]
    assert set(units["status"]) <= {"done", "skipped"}
    skipped = units[units["status"] == "skipped"]
    assert all(str(n) for n in skipped["note"]), "a unit was skipped without its reason"


def test_prune_prunes_the_ks_that_fit_or_half_the_heads(walk):
    _, out = walk
    tables = read_run_tables(out)
    ks = tables["prune"].groupby("model")["k"].agg(lambda k: sorted(set(k)))
    # demo ks 16 and 64 (k 0 is the unpruned baseline): the tiny size has 8 heads, the
    # small one 16
    assert ks.to_dict() == {
        "bigram-backcopy": [0, 4],
        "bigram-backcopy-seed2": [0, 4],
        "bigram-backcopy-triggers5": [0, 4],
        "bigram-backcopy-small": [0, 16],
    }
    units = tables["units"].set_index(["experiment", "model", "revision"])
    assert units.loc[("prune", "bigram-backcopy", "step0"), "note"] == (
        "ks 16, 64 are more than the 8 heads of bigram-backcopy: k 4 (half its heads) pruned "
        "instead"
    )
    assert units.loc[("prune", "bigram-backcopy-small", "step500"), "note"] == (
        "k 64 is more than the 16 heads of bigram-backcopy-small: left out"
    )


def test_no_table_of_the_run_holds_a_key_twice(walk):
    _, out = walk
    tables = read_run_tables(out)
    assert set(tables) <= set(KEYS), f"give the key of {sorted(set(tables) - set(KEYS))}"
    for name, frame in tables.items():
        key = [c for c in ("model", "revision") if c in frame.columns] + KEYS[name]
        twice = frame[frame.duplicated(subset=key, keep=False)]
        assert twice.empty, f"{name} holds {len(twice)} rows of a repeated key:\n{twice[key]}"
