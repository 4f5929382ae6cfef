"""Capture: the registered attention function, row statistics, ablation, given attention.

:mod:`attncoda.capture.capture` runs a model over token windows into a :class:`Capture`
(:mod:`attncoda.capture.result`) through :mod:`attncoda.capture.attention` (routed) or
:mod:`attncoda.capture.outputs` (eager ``output_attentions``); the batch and forward helpers
are in :mod:`attncoda.capture.forward`, the statistics in :mod:`attncoda.capture.statistics`
and :mod:`attncoda.capture.fast`, sink specs in :mod:`attncoda.capture.sinks`, head ablation in
:mod:`attncoda.capture.ablation` and attention a user already has in
:mod:`attncoda.capture.given`.
"""
