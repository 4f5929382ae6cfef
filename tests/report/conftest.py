"""Fixtures of the report tests: the tiny trained checkpoints (``tiny_series``) and one small
run of every experiment on two of them, its report rendered (``tiny_run``), are the
session's, in ``tests/conftest.py``, shared with the run tests."""
