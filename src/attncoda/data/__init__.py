"""Data: the embedded corpus and its windows; the synthetic tasks of training."""
