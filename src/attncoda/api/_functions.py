"""The experiment functions, one per experiment: the common options, then every field of the
experiment's ``Settings`` with its default (:mod:`attncoda.api._signatures` checks that)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attncoda.api._call import run_function
from attncoda.api._result import Result
from attncoda.api._signatures import experiment_function as _shown
from attncoda.experiments import cluster as _cluster
from attncoda.experiments import collapse as _collapse
from attncoda.experiments import flips as _flips
from attncoda.experiments import predictor as _predictor
from attncoda.experiments import profile as _profile
from attncoda.experiments import prune as _prune
from attncoda.experiments import safety as _safety
from attncoda.run.config import Rows as _Rows

__all__ = ["cluster", "collapse", "flips", "predict", "profile", "prune", "safety"]


Source = Any  # a model spec (str or path), a Capture, or a list of either


@_shown("profile", "Sink mass, entropy and its exact split per (layer, head), in nats.")
def profile(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    docs: int = _profile.Settings.docs,
    max_tokens: int = _profile.Settings.max_tokens,
) -> Result:
    return run_function("profile", locals())


@_shown("flips", "How often keep and drop reverse 'which head is closer', per metric, with a CI.")
def flips(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    docs: int = _Rows.docs,
    max_tokens: int = _Rows.max_tokens,
    metrics: Sequence[str] = _flips.Settings.metrics,
    n_boot: int = _flips.Settings.n_boot,
    tol: float = _flips.Settings.tol,
) -> Result:
    return run_function("flips", locals())


@_shown("cluster", "Clark et al.'s head clustering under keep, drop and the Aitchison terms.")
def cluster(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    docs: int = _Rows.docs,
    max_tokens: int = _Rows.max_tokens,
    n_clusters: int = _cluster.Settings.n_clusters,
    n_init: int = _cluster.Settings.n_init,
) -> Result:
    return run_function("cluster", locals())


@_shown("safety", "The flip rate by sink share and sink-mass gap, and where keep and drop agree.")
def safety(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    docs: int = _Rows.docs,
    max_tokens: int = _Rows.max_tokens,
    n_bins: int = _safety.Settings.n_bins,
    threshold: float = _safety.Settings.threshold,
) -> Result:
    return run_function("safety", locals())


@_shown(
    "predictor",
    "The frozen flip-rate predictor applied and checked: confirmed, abstained or failed.",
)
def predict(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    docs: int = _Rows.docs,
    max_tokens: int = _Rows.max_tokens,
    predictor: str = _predictor.Settings.predictor,
    protocol: str = _predictor.Settings.protocol,
) -> Result:
    return run_function("predictor", locals())


@_shown("prune", "Heads pruned by a channel, held-out perplexity per k (model specs only).")
def prune(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    channels: Sequence[str] = _prune.Settings.channels,
    orders: Sequence[str] = _prune.Settings.orders,
    ablations: Sequence[str] = _prune.Settings.ablations,
    ks: Sequence[int] = _prune.Settings.ks,
    profile_docs: int = _prune.Settings.profile_docs,
    eval_docs: int = _prune.Settings.eval_docs,
    max_tokens: int = _prune.Settings.max_tokens,
    n_boot: int = _prune.Settings.n_boot,
) -> Result:
    return run_function("prune", locals())


@_shown(
    "collapse",
    """Entropy collapse over checkpoints, its change split exactly into sink and content.

    ``source`` is a series spec (the shipped ``"bigram-backcopy"``,
    ``owner/name@step0,step512``, or a folder of ``stepN`` checkpoints), or a list of
    captures, one per checkpoint in training order, with ``steps`` their training steps and
    ``names`` the series name.""",
)
def collapse(
    source: Source,
    *,
    sink: str = "first",
    seed: int = 0,
    out: str | Path | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
    kernel: str = "auto",
    device_map: str | dict[str, int | str] | None = None,
    max_memory: dict[int | str, int | str] | str | None = None,
    offload_folder: str | Path | None = None,
    text: str | None = None,
    names: str | None = None,
    steps: Sequence[int] | None = None,
    docs: int = _collapse.Settings.docs,
    max_tokens: int = _collapse.Settings.max_tokens,
) -> Result:
    return run_function("collapse", locals())
