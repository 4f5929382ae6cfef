"""The smallest run settings that still give every table of a run (about 10 s on a CPU with
two tiny train-tiny checkpoints as the models). Shared by the run, sweep and report tests."""

TINY_SETTINGS = {
    "profile": {"docs": 2, "max_tokens": 32},
    "rows": {"docs": 3, "max_tokens": 32},
    "flips": {"n_boot": 20},
    # the run's own rows (off the fitted protocol: no verdict counted); reading the fitted
    # protocol's 16 windows of 128 tokens has its own test (tests/run/test_reproduce.py)
    "predictor": {"protocol": "run"},
    # a series trained in the run (16 steps), not the shipped one, so that the train unit
    # runs; the runs the predictor never saw have their own test (tests/run/test_reproduce.py).
    # Batches of 8 windows of 32 tokens, not 32 of 64: the same steps, units and tables, in a
    # third of the training's time (it was 45% of a run's)
    "train": {
        "retrain": True,
        "size": "tiny",
        "steps": 16,
        "unseen": False,
        "window": 32,
        "batch_size": 8,
    },
    "collapse": {"docs": 4, "max_tokens": 32},
    # one MDS start, not Clark et al.'s five: the starts were a third of a run's time
    "cluster": {"n_init": 1},
    "prune": {
        "ks": [1, 2],
        "profile_docs": 2,
        "eval_docs": 2,
        "max_tokens": 32,
        "channels": ["sink_mass", "random"],
    },
}


def run_tables(out):
    """Every table of a run folder, ``{file name: DataFrame}``."""
    import pandas as pd

    return {p.name: pd.read_parquet(p) for p in sorted((out / "tables").glob("*.parquet"))}


def assert_same_tables(a, b) -> None:
    """The two run folders hold the same tables, bit for bit (same machine, same ops)."""
    import pandas as pd

    left, right = run_tables(a), run_tables(b)
    assert sorted(left) == sorted(right)
    for name in left:
        pd.testing.assert_frame_equal(left[name], right[name], check_exact=True, obj=name)


def done_units(out) -> int:
    """How many units of a run folder have finished."""
    return len(list((out / "units").glob("*/*/_done.json"))) if (out / "units").exists() else 0
