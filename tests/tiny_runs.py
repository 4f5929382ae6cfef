"""The smallest reproduce settings that still give every table of a run (about 10 s on a CPU
with two tiny train-tiny checkpoints as the models). Shared by the run, sweep and report
tests."""

TINY_SETTINGS = {
    "profile_docs": 2,
    "profile_tokens": 32,
    "rows_docs": 3,
    "rows_tokens": 32,
    "n_boot": 20,
    "train_size": "tiny",
    "train_steps": 16,
    "collapse_docs": 4,
    "collapse_tokens": 32,
    "prune_ks": [1, 2],
    "prune_profile_docs": 2,
    "prune_eval_docs": 2,
    "prune_tokens": 32,
    "prune_channels": ["sink_mass", "random"],
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
