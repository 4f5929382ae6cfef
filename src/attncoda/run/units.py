"""One unit of work of a reproduce run or a sweep: an experiment on one model at one revision.

:func:`run_unit` computes a unit's tables from the run config alone and writes them as the
unit's partition of the store. It holds no state between calls but caches (the loaded model,
its capture, its flip result), so a process that runs several units of one model loads and
captures it once; the results do not depend on what the process ran before.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.store.runs import NO_REVISION, RunStore, Unit

#: The experiments of a reproduce run, in the order they run for each model.
MODEL_EXPERIMENTS = ("profile", "flips", "cluster", "safety", "predictor", "prune")
#: Every experiment name a run config may list.
EXPERIMENTS = (*MODEL_EXPERIMENTS, "collapse")

_CACHE: dict[tuple, Any] = {}
_PER_MODEL = ("load", "rows", "flips")
#: How this process loads and captures models: the run config's device, dtype and method
#: (set by :func:`run_unit`; changing them forgets every cached model).
_OPTIONS: dict[str, Any] = {"device": "cpu", "dtype": None, "method": "exact"}


def _use_options(config: Mapping[str, Any]) -> None:
    options = {key: config.get(key, _OPTIONS[key]) for key in ("device", "dtype", "method")}
    if options != _OPTIONS:
        _CACHE.clear()
        _OPTIONS.update(options)


def clear_cache() -> None:
    """Forget every loaded model, capture and flip result of this process."""
    _CACHE.clear()


def model_spec(unit: Unit) -> str:
    """What :func:`attncoda.load_model` loads for ``unit`` (``model@revision`` when set)."""
    return unit.model if unit.revision == NO_REVISION else f"{unit.model}@{unit.revision}"


def split_spec(spec: str) -> tuple[str, str]:
    """``"owner/name@rev"`` -> ``("owner/name", "rev")``; no ``@`` -> ``(spec, "-")``."""
    if "@" in spec and not Path(spec).exists():
        model, _, revision = spec.rpartition("@")
        if model and revision:
            return model, revision
    return spec, NO_REVISION


def _cached(key: tuple, make: Any) -> Any:
    if key not in _CACHE:
        # One model's objects at a time: loading a new model evicts the previous one's model,
        # captured rows and flip result (a Ray worker may run units of hundreds of models).
        if key[0] == "load":
            for old in [k for k in _CACHE if k[0] in _PER_MODEL and k[1] != key[1]]:
                del _CACHE[old]
        _CACHE[key] = make()
    return _CACHE[key]


def _quiet_load(spec: str) -> tuple:
    """:func:`attncoda.load_model` without transformers' per-load progress bar (a run prints
    one line per unit instead)."""
    from transformers.utils import logging as hf_logging

    from attncoda.models.load import load_model
    from attncoda.run.common import resolve_device

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        device = resolve_device(_OPTIONS["device"])
        return load_model(spec, dtype=_OPTIONS["dtype"], device=device)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _loaded(spec: str) -> tuple:
    return _cached(("load", spec), lambda: _quiet_load(spec))


def _series_point(config: Mapping[str, Any], root: Path, revision: str) -> Any:
    from attncoda.models.series import SeriesPoint

    for step, label, spec in config["series"]["points"]:
        if label == revision:
            return SeriesPoint(step=int(step), label=label, spec=resolve(root, spec))
    raise AttncodaError(f"the run's series has no checkpoint {revision!r}")


def resolve(root: Path, spec: str) -> str:
    """A series checkpoint spec; ``run:<path>`` is relative to the run folder."""
    return str(root / spec[4:]) if spec.startswith("run:") else spec


def unit_spec(unit: Unit, config: Mapping[str, Any], root: Path) -> str:
    """The loadable spec of a unit's model (a series checkpoint resolves to its folder)."""
    series = config.get("series") or {}
    if series and unit.model == series.get("name") and unit.revision != NO_REVISION:
        return _series_point(config, root, unit.revision).spec
    return model_spec(unit)


def _model_rows(spec: str, name: str, config: Mapping[str, Any]) -> Any:
    from attncoda.run.conventions import model_rows

    s = config["settings"]

    def make():
        rows = model_rows(
            spec,
            text=config["corpus"]["text"],
            sink=config["sink"],
            max_tokens=s["rows_tokens"],
            docs=s["rows_docs"],
            seed=config["seed"],
            loaded=_loaded(spec),
            method=_OPTIONS["method"],
        )
        # Tables name the model as the run does (a series checkpoint by its series name).
        from dataclasses import replace

        return replace(rows, rows=replace(rows.rows, model=name))

    return _cached(("rows", spec), make)


#: What the flips unit keeps beside its tables, so that the safety and predictor units of
#: the same model (in another process, on Ray) need not recompute the pooled distances.
FLIPS_ARRAYS = "flips_result.npz"


def _flips(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> Any:
    """The flip result of ``unit``'s model: from this process's cache, else from the
    finished flips unit's partition, else computed."""
    from attncoda.experiments.flips import flips
    from attncoda.run.conventions import CAPTURE_TOL

    def make():
        stored = _stored_flips(unit, config, root)
        if stored is not None:
            return stored
        s = config["settings"]
        rows = _model_rows(spec, unit.model, config)
        device = next(_loaded(spec)[0].parameters()).device.type
        return flips(
            rows.rows, n_boot=s["n_boot"], seed=config["seed"], tol=CAPTURE_TOL, device=device
        )

    return _cached(("flips", spec), make)


def _stored_flips(unit: Unit, config: Mapping[str, Any], root: Path) -> Any:
    import io

    import numpy as np

    from attncoda.experiments.flips import FlipsResult

    store = RunStore(root, "reproduce", config)
    source = Unit("flips", unit.model, unit.revision)
    path = store.unit_dir(source) / FLIPS_ARRAYS
    if not store.is_done(source) or not path.is_file():
        return None
    arrays = np.load(io.BytesIO(path.read_bytes()))
    distances = {}
    bootstrap = {}
    for key in arrays.files:
        kind, _, rest = key.partition(":")
        if kind == "distance":
            metric, _, convention = rest.partition(":")
            distances[(metric, convention)] = arrays[key]
        elif kind == "bootstrap":
            bootstrap[rest] = arrays[key]
    return FlipsResult(
        model=unit.model,
        # The partitions carry the run's key columns; the result holds the experiment's own.
        table=store.partition(source, "flips").drop(columns=["revision", "family"]),
        by_layer=store.partition(source, "flips_by_layer").drop(columns=["revision", "family"]),
        distances=distances,
        bootstrap=bootstrap,
        n_docs=int(arrays["n_docs"]),
        n_rows=int(arrays["n_rows"]),
        tol=float(arrays["tol"]),
    )


def _write_flips_arrays(result: Any, folder: Path) -> None:
    import io

    import numpy as np

    from attncoda.store import atomic_write_bytes

    arrays = {f"distance:{m}:{c}": d for (m, c), d in result.distances.items()}
    arrays.update({f"bootstrap:{m}": b for m, b in result.bootstrap.items()})
    buffer = io.BytesIO()
    np.savez(buffer, n_docs=result.n_docs, n_rows=result.n_rows, tol=result.tol, **arrays)
    atomic_write_bytes(folder / FLIPS_ARRAYS, buffer.getvalue())


def _profile(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    from attncoda.experiments.profile import head_summary
    from attncoda.run.common import capture_corpus

    s = config["settings"]
    captured = capture_corpus(
        spec,
        text=config["corpus"]["text"],
        sink=config["sink"],
        max_tokens=s["profile_tokens"],
        docs=s["profile_docs"],
        seed=config["seed"],
        loaded=_loaded(spec),
        record_rows="none",
        method=_OPTIONS["method"],
    )
    return {"profile_heads": head_summary(captured.capture.to_frame())}


def _cluster(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    import pandas as pd

    from attncoda.experiments.cluster import VARIANT_TITLES, VARIANTS, cluster

    s = config["settings"]
    result = cluster(
        _model_rows(spec, unit.model, config).rows,
        seed=config["seed"],
        n_clusters=s["clusters"],
    )
    art = result.artifact
    summary = pd.DataFrame(
        {
            "variant": list(VARIANTS),
            "title": [VARIANT_TITLES[v] for v in VARIANTS],
            "spearman_axis1_vs_sink_mass": [
                art["spearman_axis1_vs_sink_mass"][v] for v in VARIANTS
            ],
            "max_abs_spearman_any_direction": [
                art["max_abs_spearman_any_direction_vs_sink_mass"][v] for v in VARIANTS
            ],
            "degenerate": [v in art["degenerate_variants"] for v in VARIANTS],
            "mean_sink_share_of_aitchison_sq": art["mean_sink_share_of_aitchison_sq"],
        }
    )
    for column in ("spearman_axis1_vs_sink_mass", "max_abs_spearman_any_direction"):
        summary[column] = summary[column].astype("float64")
    agreement = pd.DataFrame(
        [
            {"variant_a": key.split("|")[0], "variant_b": key.split("|")[1], "adjusted_rand": v}
            for key, v in art["adjusted_rand"].items()
        ]
    )
    return {"cluster": result.table, "cluster_summary": summary, "cluster_agreement": agreement}


def _safety(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    from attncoda.experiments.safety import safety_map

    threshold = config["settings"].get("safe_threshold")  # None or absent: the default
    result = safety_map(
        _model_rows(spec, unit.model, config).rows,
        n_bins=config["settings"]["safety_bins"],
        flips_result=_flips(unit, spec, config, root),
        **({} if threshold is None else {"threshold": threshold}),
    )
    return {"safety": result.table, "safety_grid": result.grid}


def _predictor(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    import pandas as pd

    from attncoda.experiments.predictor import Predictor, predictor_row
    from attncoda.run.conventions import apply_predictor, shipped_predictor

    rows = _model_rows(spec, unit.model, config)
    row = predictor_row(rows.rows, _flips(unit, spec, config, root))
    (outcome,) = apply_predictor("shipped", [row])
    trained_on = Predictor.from_json(shipped_predictor()).training_models
    label = unit.model if unit.revision == NO_REVISION else f"{unit.model} {unit.revision}"
    p = outcome["prediction"]
    record = {
        **{f"feature_{k}": float(v) for k, v in outcome["features"].items()},
        "abstained": bool(p.abstained),
        "reason": p.reason,
        "predicted": p.point,
        "predicted_low": p.low,
        "predicted_high": p.high,
        "measured": outcome["measured"],
        "verdict": outcome["verdict"],
        "in_training_set": any(label == t or unit.model == t for t in trained_on),
    }
    frame = pd.DataFrame([record])
    for column in ("predicted", "predicted_low", "predicted_high"):
        frame[column] = frame[column].astype("float64")
    return {"predictor": frame}


def _prune(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> dict[str, Any] | None:
    from attncoda.experiments.prune import prune, split_windows
    from attncoda.run.common import corpus_windows

    s = config["settings"]
    model, tokenizer, info = _loaded(spec)
    if not info.causal:
        return None
    windows, _ = corpus_windows(
        tokenizer,
        text=config["corpus"]["text"],
        max_tokens=s["prune_tokens"],
        docs=s["prune_profile_docs"] + s["prune_eval_docs"],
    )
    profile_windows, eval_windows = split_windows(
        windows, s["prune_profile_docs"], s["prune_eval_docs"]
    )
    result = prune(
        model,
        tokenizer,
        profile_windows,
        eval_windows,
        channels=tuple(s["prune_channels"]),
        orders=tuple(s["prune_orders"]),
        ablations=tuple(s["prune_ablations"]),
        ks=tuple(k for k in s["prune_ks"] if k <= info.n_layers * info.n_heads),
        sink=config["sink"],
        seed=config["seed"],
        model_name=unit.model,
    )
    return {"prune": result.table, "prune_heads": result.heads}


def _train(unit: Unit, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    import pandas as pd

    from attncoda.training.train import TrainConfig, train_tiny

    s = config["settings"]
    train_config = TrainConfig(
        task=s.get("train_task", "text"),
        steps=s["train_steps"],
        seed=config["seed"],
        size=s["train_size"],
        window=s["train_window"],
        batch_size=s["train_batch_size"],
        lr=s.get("train_lr"),
        corpus=config["corpus"]["text"],
    )
    result = train_tiny(root / "series" / "train-tiny", train_config, threads=1, progress=False)
    rows = []
    for step, tr, va, att in zip(
        result.steps, result.train_loss, result.val_loss, result.first_token_attention, strict=True
    ):
        for layer, value in enumerate(att):
            rows.append(
                {
                    "step": int(step),
                    "train_loss": float(tr),
                    "val_loss": float(va),
                    "layer": layer,
                    "first_token_attention": float(value),
                }
            )
    heads = [
        {
            "step": int(step),
            "layer": layer,
            "head": head,
            "bos_attention_trigger": float(t),
            "bos_attention_non_trigger": float(n),
        }
        for step, trig, rest in zip(
            result.steps,
            result.bos_attention_trigger,
            result.bos_attention_non_trigger,
            strict=True,
        )
        for layer, (lt, ln) in enumerate(zip(trig, rest, strict=True))
        for head, (t, n) in enumerate(zip(lt, ln, strict=True))
    ]
    tables = {"train": pd.DataFrame(rows)}
    if heads:  # Bigram-Backcopy: active (trigger) versus dormant (non-trigger) heads
        tables["train_heads"] = pd.DataFrame(heads)
    return tables


def series_windows(config: Mapping[str, Any], root: Path) -> list:
    """The token windows every checkpoint of the run's series reads (first one's tokenizer)."""
    from attncoda.run.common import corpus_windows

    s = config["settings"]
    first = _series_point(config, root, config["series"]["points"][0][1])

    def make():
        _, tokenizer, _ = _loaded_tokenizer(first.spec)
        windows, _ = corpus_windows(
            tokenizer,
            text=config["corpus"]["text"],
            max_tokens=s["collapse_tokens"],
            docs=s["collapse_docs"],
        )
        return [w.input_ids for w in windows]

    return _cached(("series_windows", first.spec), make)


def _loaded_tokenizer(spec: str) -> tuple:
    key = ("load", spec)
    if key in _CACHE:
        return _CACHE[key]
    return _cached(("tokenizer", spec), lambda: _quiet_load(spec))


def _collapse(unit: Unit, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    from attncoda.experiments.collapse import checkpoint_stats, stats_frames

    point = _series_point(config, root, unit.revision)
    windows = series_windows(config, root)
    model, tokenizer, _ = _loaded(point.spec)
    stats = checkpoint_stats(model, tokenizer, windows, point, sink=config["sink"])
    rows, sinks = stats_frames(stats)
    return {"collapse_rows": rows, "collapse_sinks": sinks}


def run_unit(unit: Unit, config: Mapping[str, Any], root: str | Path) -> dict[str, Any]:
    """Compute ``unit`` and write its partition into the run folder ``root``.

    The folder must already hold the run's manifest (made by :class:`RunStore` with this
    ``config``). A finished unit is not redone. Returns the facts recorded with the unit:
    ``status`` (``"done"``, ``"skipped"`` for a unit that does not apply to its model, with
    ``note``), ``seconds``, and the model facts.
    """
    root = Path(root)
    store = RunStore(root, "reproduce", config)
    if store.is_done(unit):
        return {**store.facts(unit), "resumed": True}
    _use_options(config)
    store.begin(unit)
    start = time.perf_counter()
    facts: dict[str, Any] = {"status": "done", "note": ""}
    if unit.experiment == "train":
        tables = _train(unit, config, root)
    elif unit.experiment == "collapse":
        tables = _collapse(unit, config, root)
    elif unit.experiment in MODEL_EXPERIMENTS:
        spec = unit_spec(unit, config, root)
        run = {
            "profile": _profile,
            "flips": _flips_unit,
            "cluster": _cluster,
            "safety": _safety,
            "predictor": _predictor,
            "prune": _prune,
        }[unit.experiment]
        found = run(unit, spec, config, root)
        model, _, info = _loaded(spec)
        facts["model_info"] = info.to_dict()
        facts["device"] = next(model.parameters()).device.type
        if found is None:
            facts["status"] = "skipped"
            facts["note"] = (
                f"prune measures perplexity, which needs a causal language model; "
                f"{unit.model} is {info.architecture}"
            )
            found = {}
        tables = {name: _with_family(frame, info.family) for name, frame in found.items()}
    else:
        raise AttncodaError(f"unknown experiment {unit.experiment!r}: use one of {EXPERIMENTS}")
    facts["seconds"] = round(time.perf_counter() - start, 3)
    store.finish(unit, tables, facts)
    return facts


def _with_family(frame: Any, family: str) -> Any:
    """``frame`` with a first column ``family`` (the model family every row belongs to)."""
    out = frame.drop(columns="family") if "family" in frame.columns else frame.copy()
    out.insert(0, "family", family)
    return out


def _flips_unit(unit: Unit, spec: str, config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    result = _flips(unit, spec, config, root)
    _write_flips_arrays(result, RunStore(root, "reproduce", config).unit_dir(unit))
    return {"flips": result.table, "flips_by_layer": result.by_layer}


__all__ = [
    "EXPERIMENTS",
    "MODEL_EXPERIMENTS",
    "clear_cache",
    "model_spec",
    "resolve",
    "run_unit",
    "series_windows",
    "split_spec",
    "unit_spec",
]
