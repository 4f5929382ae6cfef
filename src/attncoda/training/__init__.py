"""Training: train-tiny, a small causal model trained into a checkpoint series."""
