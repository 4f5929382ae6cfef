"""Runs: load a model, cut the corpus, capture, call the experiments, write the results
(docs/design.md, "Runs").

This layer sits between the command line and the API (which only parse, call and print) and
the pure experiments. Every run writes tidy Parquet tables, figures and a ``manifest.json``.

Its modules stand on floors, each importing only the floors below it (an import-linter
contract of ``pyproject.toml`` checks it), from the top:

- the commands: ``fit`` (the predictor's fit and ``predictor fit``;
  ``scripts/predictor_data.py`` regenerates its shipped rows), ``sweep``, ``direct`` (prune
  and collapse on a model loaded by hand, its capture made there); ``reproduce``
  (``reproduce``, single-experiment runs, the model checks);
- execution: ``executors`` (the one executor interface: in this process or on Ray), ``pool``
  (a local pool of worker processes) and ``ray_tasks``, ``execute`` (one unit, and the run's
  finish);
- a unit's inputs: ``provide`` (rows, captures, windows, series points, the tables of the
  experiments a unit runs after);
- what a run is, each floor reading the run config: ``job`` (what an executor is handed)
  and ``train`` (a run's training series), ``plan`` (units and what each waits for) and
  ``compare`` (whether two run folders hold the same evidence, and the shipped reference
  run), ``config`` (the run config, typed and frozen); then its parts: ``series`` (the series of
  collapse, the one trained, the unseen runs) and ``options`` (the capture options as
  recorded); ``loaded`` (``Loaded``, what a runner keeps and what a caller lends it, owned
  and passed; a loaded model's identity); ``captured`` (the corpus windows a run reads, a
  model's capture of them, attention handed in) and ``stored`` (a finished unit's tables and
  arrays read back).

It may import every layer below it (experiments, capture, models, training, store, data,
coda); never the API or the CLI.
"""
