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
