"""Runs: load a model, cut the corpus, capture, call the experiments, write the results
(docs/design.md, "Runs").

This layer sits between the command line and the API (which only parse, call and print) and
the pure experiments. Every run writes tidy Parquet tables, figures and a ``manifest.json``.

Modules:

- what a run is: ``config`` (the run config), ``plan`` (units and what each waits for),
  ``reproduce`` (``reproduce``, single-experiment runs), ``sweep``, ``fit`` (the predictor's
  fit; ``scripts/predictor_data.py`` regenerates its shipped rows), ``train`` (a run's
  training series);
- how it runs: ``provide`` (load, capture and keep a model's objects per process),
  ``execute`` (one unit, and the run's finish), ``executors`` and ``ray_tasks`` (in this
  process or on Ray), ``pool`` (a local pool of worker processes), ``job``;
- what a unit reads: ``options`` (devices, dtypes, placement), ``windows`` (corpus windows and
  their facts), ``captured`` (one model's capture and its manifest facts), ``given``
  (attention from a file), ``identity`` (a loaded model's weights hash and recipe);
- ``direct``: prune and collapse on a model loaded by hand, its capture made there.

It may import every layer below it (experiments, capture, models, training, store, data,
coda); never the API or the CLI.
"""
