"""The Python API: one function per experiment, each returning a :class:`Result`
(docs/design.md, "Runs").

Each function takes model specs or captures:

- model specs (``"minilm"``, ``"owner/name@rev"``, a folder; one or a list) run through the
  same runner as the CLI, into ``out`` when given (a run folder ``attncoda report`` renders)
  or a temporary folder otherwise, and return the tables the runner stored;
- :class:`attncoda.Capture` objects (one or a list, from :func:`attncoda.capture_windows` or
  :func:`attncoda.from_attentions`) run in this process, with no file written.

Either way the tables are those of the experiment's contract (``attncoda.experiments``),
with the run's ``family`` column first, and :meth:`Result.figure` draws the figure of the
report from them.

Each function's keywords are the common options, then every field of the experiment's
``Settings`` with its default, each value checked before anything loads or is written
(:mod:`attncoda.api_signatures`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.api_signatures import COMMON_OPTIONS, check_common
from attncoda.api_signatures import experiment_function as _shown
from attncoda.api_sources import capture_names, sources
from attncoda.experiments import cluster as _cluster
from attncoda.experiments import collapse as _collapse
from attncoda.experiments import flips as _flips
from attncoda.experiments import predictor as _predictor
from attncoda.experiments import profile as _profile
from attncoda.experiments import prune as _prune
from attncoda.experiments import safety as _safety

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["Result", "cluster", "collapse", "flips", "predict", "profile", "prune", "safety"]

#: The family column of tables made from captures handed in (no model facts to read).
GIVEN_FAMILY = "given attention"


@dataclass(frozen=True)
class Result:
    """What an experiment function returns.

    Attributes
    ----------
    experiment : str
        The experiment's name (``"flips"``).
    tables : dict of str to pandas.DataFrame
        Its tables by name, every model's rows together, ``family`` first.
    summary : dict of str to dict
        Each model's JSON summary (cluster's artifact, collapse's facts; empty for most).
    path : pathlib.Path or None
        The run folder the tables were stored in, when ``out`` was given.
    sink : str
        The sink spec the tables were made with.
    """

    experiment: str
    tables: Mapping[str, pd.DataFrame]
    summary: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    path: Path | None = None
    sink: str = "first"

    @property
    def table(self) -> pd.DataFrame:
        """The experiment's first table (``flips`` for flips, ``profile_heads`` for profile)."""
        return next(iter(self.tables.values()))

    def figure(self, model: str | None = None) -> Figure:
        """The experiment's figure, drawn from :attr:`tables` by the report's own code.

        Flips and predictor draw every model; the others draw one, so a result of several
        models needs ``model`` (one of the tables' ``model`` values).
        """
        from attncoda.report.figures import figure

        tables = self.tables
        if model is not None:
            known = sorted({str(m) for f in tables.values() for m in f.get("model", [])})
            if model not in known:
                raise AttncodaError(f"no model {model!r} in this result: use one of {known}")
            tables = {
                k: f[f["model"] == model] if "model" in f.columns else f for k, f in tables.items()
            }
        return figure(self.experiment, tables, sink=self.sink)

    def _repr_html_(self) -> str:
        from attncoda.report.notebook import result_html

        return result_html(self)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {len(v)} rows" for k, v in self.tables.items())
        where = f", path={str(self.path)!r}" if self.path else ""
        return f"Result({self.experiment!r}, {shapes}{where})"


def _concat(
    units: Sequence[tuple[Mapping[str, pd.DataFrame], str, str]], family: str
) -> dict[str, Any]:
    """The tables of ``(frames, model, revision)`` units as a run stores them: ``model``,
    ``revision`` and ``family`` first, the units' rows in order."""
    import pandas as pd

    out: dict[str, Any] = {}
    for name in dict.fromkeys(n for frames, _, _ in units for n in frames):
        parts = []
        for frames, model, revision in units:
            if name not in frames:
                continue
            frame = frames[name].drop(
                columns=[c for c in ("model", "revision", "family") if c in frames[name]]
            )
            frame.insert(0, "family", family)
            frame.insert(0, "revision", revision)
            frame.insert(0, "model", model)
            parts.append(frame)
        out[name] = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return out


def _on_captures(
    name: str,
    captures: Sequence[Any],
    names: Sequence[str],
    settings: Any,
    *,
    sink: str,
    seed: int,
    device: str,
    steps: Sequence[int] | None = None,
) -> Result:
    from attncoda.experiments.contract import Inputs, experiment, head_rows
    from attncoda.models.spec import NO_REVISION

    exp = experiment(name)
    model_free = not {"model", "windows"} & set(exp.needs)
    if not model_free and exp.given is None:
        raise AttncodaError(
            f"{name} needs the model itself, which a capture does not hold: pass a model "
            "spec instead"
        )
    needs = set(exp.needs if model_free else exp.given or ())
    for dep in exp.after:
        needs.update(experiment(dep).needs)

    def inputs_for(cap: Any, label: str, **extra: Any) -> Any:
        return Inputs(
            model=label,
            seed=seed,
            sink=sink,
            device=device,
            rows=head_rows(cap, label) if "rows" in needs else None,
            capture=cap if "capture" in needs else None,
            **extra,
        )

    def with_after(base: Any, target: Any) -> Any:
        """``base`` with the tables of ``target``'s ``after`` experiments (their defaults)."""
        from dataclasses import replace

        after = {}
        for dep in target.after:
            dep_exp = experiment(dep)
            after[dep] = dep_exp.run(with_after(base, dep_exp), dep_exp.settings())
        return replace(base, after=after)

    if exp.combine is not None:
        from attncoda.models.series import SeriesPoint

        if steps is None:
            steps = list(range(len(captures)))
        if len(steps) != len(captures):
            raise AttncodaError(
                f"steps {list(steps)!r} must give one training step per capture "
                f"({len(captures)} captures)"
            )
        series_name = names[0]
        units = [
            exp.run(
                inputs_for(
                    cap,
                    series_name,
                    checkpoint=SeriesPoint(step=int(s), label=f"step{int(s)}", spec=label),
                    revision=f"step{int(s)}",
                ),
                settings,
            )
            for cap, label, s in zip(captures, names, steps, strict=True)
        ]
        combined = exp.combine(units, settings)
        series = _concat([(combined.frames, series_name, NO_REVISION)], GIVEN_FAMILY)
        return Result(name, series, {"series": dict(combined.summary)}, None, sink)

    frames: list[tuple[Mapping[str, Any], str, str]] = []
    summary: dict[str, dict[str, Any]] = {}
    for cap, label in zip(captures, names, strict=True):
        tables = exp.run(with_after(inputs_for(cap, label), exp), settings)
        frames.append((tables.frames, label, NO_REVISION))
        summary[label] = dict(tables.summary)
    return Result(name, _concat(frames, GIVEN_FAMILY), summary, None, sink)


def _on_specs(
    name: str,
    specs: Sequence[str],
    settings: Any,
    *,
    out: str | Path | None,
    options: Mapping[str, Any],
) -> Result:
    """Run ``name`` on model specs through the runner into ``out`` (or a temporary folder),
    and read its tables back."""
    from attncoda.experiments.contract import experiment, settings_dict
    from attncoda.run.reproduce import run_experiment
    from attncoda.store.runs import read_run_tables

    exp = experiment(name)
    own = ("collapse", "collapse_checkpoints") if exp.combine is not None else exp.tables
    series = specs[0] if exp.combine is not None else None
    if series is not None and len(specs) != 1:
        raise AttncodaError(
            f"collapse reads one checkpoint series, got {len(specs)} specs: pass one series "
            "spec (owner/name@step0,step512 or a folder of stepN checkpoints)"
        )

    sink = str(options.get("sink", "first"))

    def run(folder: Path) -> Result:
        run_experiment(
            name,
            [] if series is not None else list(specs),
            folder,
            settings={name: settings_dict(settings)},
            series=series,
            progress=False,
            **options,
        )
        stored = read_run_tables(folder)
        tables = {t: stored[t] for t in own if t in stored}
        if not tables:
            units = stored["units"]
            notes = "; ".join(str(n) for n in units[units["experiment"] == name]["note"] if n)
            raise AttncodaError(f"{name} wrote no table: {notes or 'every unit was skipped'}")
        return Result(name, tables, {}, None if out is None else Path(out), sink)

    if out is None:
        with tempfile.TemporaryDirectory(prefix="attncoda-") as folder:
            return run(Path(folder) / "run")
    return run(Path(out))


def _call(name: str, source: Any, settings: Mapping[str, Any], common: Mapping[str, Any]) -> Result:
    from attncoda.experiments.contract import experiment, settings_from

    exp = experiment(name)
    chosen = settings_from(exp.settings, settings)  # every value checked: nothing loaded yet
    check_common(common)
    if common.get("steps") is not None and exp.combine is None:
        raise AttncodaError(f"steps= is for collapse over captures, not for {name}")
    items, kind = sources(source)
    sink, seed, device = common["sink"], common["seed"], common["device"]
    options = {k: v for k, v in common.items() if k not in ("names", "steps", "out")}
    if kind == "live":
        return _on_live(name, items, chosen, common, options)
    if kind == "capture":
        given = common.get("names")
        if exp.combine is not None:  # one series: one name for every checkpoint's capture
            if given is not None and not isinstance(given, str):
                raise AttncodaError(f"names={given!r}: give the series one name (a str)")
            labels = [given or "series"] * len(items)
        else:
            labels = capture_names(items, given)
        return _on_captures(
            name,
            items,
            labels,
            chosen,
            sink=sink,
            seed=seed,
            device=device,
            steps=common.get("steps"),
        )
    if common.get("steps") is not None or common.get("names") is not None:
        raise AttncodaError(
            "steps= and names= are for captures: a run names its models by their specs and "
            "reads a series' steps from its spec"
        )
    return _on_specs(name, [str(s) for s in items], chosen, out=common.get("out"), options=options)


def _on_live(
    name: str,
    items: Sequence[Any],
    settings: Any,
    common: Mapping[str, Any],
    options: Mapping[str, Any],
) -> Result:
    """Run ``name`` on live models through the runner with ``options``, as on specs (the
    runner is lent them: :func:`attncoda.run.provide.lend`)."""
    from attncoda.api_sources import live_entries
    from attncoda.run.provide import lend

    entries = live_entries(items, common.get("names"), name)
    for option, default in (("device", "cpu"), ("dtype", None), ("device_map", None)):
        if common.get(option) != default:
            raise AttncodaError(
                f"{option}={common[option]!r} is for model specs: a live model runs where "
                "and in the dtype it is"
            )
    with lend(entries):
        return _on_specs(name, list(entries), settings, out=common.get("out"), options=options)


def _run(name: str, values: Mapping[str, Any]) -> Result:
    """Call ``name`` with an API function's parameters ``values`` (its ``locals()``)."""
    values = dict(values)
    source = values.pop("source")
    common = {k: values.pop(k, None) for k in COMMON_OPTIONS if k != "source"}
    return _call(name, source, values, common)


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
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    docs: int = _profile.Settings.docs,
    tokens: int = _profile.Settings.tokens,
) -> Result:
    return _run("profile", locals())


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
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    metrics: Sequence[str] = _flips.Settings.metrics,
    n_boot: int = _flips.Settings.n_boot,
    tol: float = _flips.Settings.tol,
) -> Result:
    return _run("flips", locals())


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
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    n_clusters: int = _cluster.Settings.n_clusters,
    n_init: int = _cluster.Settings.n_init,
) -> Result:
    return _run("cluster", locals())


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
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    n_bins: int = _safety.Settings.n_bins,
    threshold: float = _safety.Settings.threshold,
) -> Result:
    return _run("safety", locals())


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
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    predictor: str = _predictor.Settings.predictor,
    protocol: str = _predictor.Settings.protocol,
) -> Result:
    return _run("predictor", locals())


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
    text: str | None = None,
    names: Sequence[str] | str | None = None,
    channels: Sequence[str] = _prune.Settings.channels,
    orders: Sequence[str] = _prune.Settings.orders,
    ablations: Sequence[str] = _prune.Settings.ablations,
    ks: Sequence[int] = _prune.Settings.ks,
    profile_docs: int = _prune.Settings.profile_docs,
    eval_docs: int = _prune.Settings.eval_docs,
    tokens: int = _prune.Settings.tokens,
) -> Result:
    return _run("prune", locals())


@_shown(
    "collapse",
    """Entropy collapse over checkpoints, its change split exactly into sink and content.

    ``source`` is a series spec (``owner/name@step0,step512``, or a folder of ``stepN``
    checkpoints), or a list of captures, one per checkpoint in training order, with
    ``steps`` their training steps and ``names`` the series name.""",
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
    text: str | None = None,
    names: str | None = None,
    steps: Sequence[int] | None = None,
    docs: int = _collapse.Settings.docs,
    tokens: int = _collapse.Settings.tokens,
) -> Result:
    return _run("collapse", locals())
