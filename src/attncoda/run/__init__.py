"""Runs: load a model, cut the corpus, capture, call the experiments, write the results.

This layer sits between the command line (which only parses and prints) and the pure
experiments. Every run writes tidy Parquet tables, figures and a ``manifest.json``.
"""
