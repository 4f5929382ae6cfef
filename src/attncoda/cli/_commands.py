"""The bodies of the ``attncoda`` commands: call a run, then print from its stored tables.

Every experiment command is a run of that experiment (:func:`attncoda.run.reproduce.
run_experiment`) into a run folder (``manifest.json``, ``units/``, ``tables/``); the command
renders the folder's ``report.html`` and prints its summary from the stored tables, so a
rerun on a finished folder prints the same lines without computing anything.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.cli._args import settings_values

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["run_command"]


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(spec).name if Path(spec).exists() else spec)


def _out(args: argparse.Namespace, command: str, models: Sequence[str]) -> Path:
    if args.out:
        return Path(args.out)
    return Path("attncoda-out") / command / "+".join(_slug(m) for m in models)


def _one_source(models: Sequence[str], files: Sequence[str] | None, command: str) -> None:
    if bool(models) == bool(files):
        raise AttncodaError(f"{command} needs a model or --attentions FILE (not both, not neither)")


def capture_options(args: argparse.Namespace) -> dict[str, Any]:
    """The command's :class:`~attncoda.run.options.CaptureOptions`, built once by
    :func:`attncoda.cli._args.validate`, as the runner's ``options`` keyword."""
    return {"options": args.options}


def _run(args: argparse.Namespace, name: str, models: Sequence[str], **options: Any) -> Path:
    """Run experiment ``name`` on ``models`` into the command's folder; return it."""
    from attncoda.experiments.contract import experiment
    from attncoda.run.config import Rows
    from attncoda.run.reproduce import run_experiment

    settings: dict[str, dict[str, Any]] = {name: settings_values(args, experiment(name).settings)}
    if "rows" in experiment(name).needs:
        settings["rows"] = settings_values(args, Rows)
    files = options.pop("attentions", None)
    series = options.get("series")
    shown = [Path(f).name for f in files] if files else list(models) or [str(series)]
    out = _out(args, name, shown)
    run_experiment(
        name,
        list(models),
        out,
        settings=settings,
        attentions=files,
        tokens=getattr(args, "tokens", None),
        kind=getattr(args, "kind", None),
        text=args.text,
        progress=True,
        **options,
        **capture_options(args),
    )
    return out


def _tables(out: Path) -> dict[str, pd.DataFrame]:
    from attncoda.store.runs import read_run_tables

    return read_run_tables(out)


def _facts(out: Path, unit: Any) -> dict[str, Any]:
    from attncoda.store import read_json
    from attncoda.store.runs import DONE

    return dict(read_json(out / "units" / unit.folder / DONE).get("facts", {}))


def _finish(out: Path) -> int:
    from attncoda.report.html import render_report

    print(f"tables in {out / 'tables'}")
    print(f"report: {render_report(out)}")
    return 0


def _print_layers(layers: pd.DataFrame) -> None:
    print(
        f"{'layer':>5}  {'sink mass':>9}  {'H(p)':>7}  {'H(q)':>7}  {'sink part':>9}  "
        f"{'content part':>12}   (nats; means over rows with content)"
    )
    for row in layers.itertuples(index=False):
        print(
            f"{row.layer:>5}  {row.sink_mass:>9.3f}  {row.entropy:>7.3f}  "
            f"{row.content_entropy:>7.3f}  {row.binary_term:>9.3f}  {row.content_term:>12.3f}"
        )


def _profile(args: argparse.Namespace) -> int:
    from attncoda.experiments.profile import layer_summary
    from attncoda.store.runs import Unit

    models = [args.model] if args.model else []
    _one_source(models, [args.attentions] if args.attentions else None, "profile")
    given = [args.attentions] if args.attentions else None
    out = _run(args, "profile", models, attentions=given)
    heads = _tables(out)["profile_heads"]
    for (model, revision), part in heads.groupby(["model", "revision"], sort=False):
        read = _facts(out, Unit("profile", model, revision)).get("read", {})
        if "documents" in read:
            print(f"{model}: {read['documents']} documents of given attention, sink = {args.sink}")
        else:
            n = read.get("windows", "?")
            windows = f"{n} window{'s' if n != 1 else ''}"
            print(
                f"{model}: {windows} of up to {read.get('max_tokens', '?')} tokens, "
                f"sink = {args.sink}"
            )
        _print_layers(layer_summary(part))
    return _finish(out)


def _flips(args: argparse.Namespace) -> int:
    _one_source(args.models, args.attentions, "flips")
    out = _run(args, "flips", args.models, attentions=args.attentions)
    print(
        "flip rate of 'which head is closer' verdicts, keep vs drop (95% percentile bootstrap "
        "interval over documents, or why there is none):"
    )
    for row in _tables(out)["flips"].itertuples(index=False):
        ci = row.ci_note or f"[{row.ci_low:6.1%}, {row.ci_high:6.1%}] of {row.n_boot} resamples"
        print(
            f"  {row.model:<24} {row.metric:<12} {row.flip_rate:6.1%}  {ci}, {row.n_docs} "
            f"documents; {row.n_triplets - row.n_ties} decided triplets ({row.n_ties} ties)"
        )
    return _finish(out)


def _cluster(args: argparse.Namespace) -> int:
    out = _run(args, "cluster", [args.model])
    tables = _tables(out)
    summary, agreement = tables["cluster_summary"], tables["cluster_agreement"]
    for model, part in summary.groupby("model", sort=False):
        print(f"{model}: Spearman rho of MDS axis 1 with head sink mass, per variant:")
        for row in part.itertuples(index=False):
            rho = row.spearman_axis1_vs_sink_mass
            print(f"  {row.variant:<18} {'n/a' if rho != rho else f'{rho:+.3f}'}")
        pairs = agreement[
            (agreement["model"] == model)
            & (agreement["variant_a"] == "keep")
            & (agreement["variant_b"] == "drop")
        ]
        ari = float(pairs["adjusted_rand"].iloc[0]) if len(pairs) else float("nan")
        print(f"adjusted Rand index of the k-means clusters, keep vs drop: {ari:.3f}")
        share = float(part["mean_sink_share_of_aitchison_sq"].iloc[0])
        print(f"mean share of pairwise d_A^2 that is the sink term: {share:.3f}")
    return _finish(out)


def _safety(args: argparse.Namespace) -> int:
    from attncoda.experiments.safety import safe_regions

    out = _run(args, "safety", args.models)
    table = _tables(out)["safety"]
    print(
        "flip rate per bin (upper end of its 95% Clopper-Pearson interval over the decided "
        "triplets, and their number):"
    )
    for row in table.itertuples(index=False):
        print(
            f"  {row.model:<20} {row.metric:<12} {row.bin_kind:<10} "
            f"[{row.bin_low:.3g}, {row.bin_high:.3g})  flip rate {row.flip_rate:6.1%} "
            f"(95% bound {row.flip_rate_high:6.1%} of {row.n_decided})"
            + ("  SAFE" if row.safe else "")
        )
    regions = safe_regions(table)
    for row in regions[regions["metric"] == "all"].itertuples(index=False):
        print(f"{row.model}: {row.statement}")
    return _finish(out)


def _predictor_fit(args: argparse.Namespace) -> int:
    from attncoda.run.config import Rows
    from attncoda.run.fit import fit_and_freeze, predictor_rows
    from attncoda.run.reproduce import check_models

    if not args.out:
        raise AttncodaError("predictor fit needs --out: the JSON file to write the predictor to")
    check_models(args.models)
    rows = predictor_rows(
        args.models,
        rows=settings_values(args, Rows),
        text=args.text,
        **capture_options(args),
    )
    predictor = fit_and_freeze(rows, args.out, overwrite=args.overwrite, alpha=args.alpha)
    print(f"fitted on {', '.join(r['model'] for r in rows)}; wrote {args.out}")
    runs = dict.fromkeys(predictor.training_runs)
    print(
        f"  CV+ over {len(runs)} runs ({', '.join(runs)}), alpha {predictor.alpha:g}; "
        f"leave-one-run-out RMSE {predictor.interval.rmse:.4f}, constant baseline "
        f"{predictor.baseline.interval.rmse:.4f}"
    )
    for name, (low, high) in zip(predictor.features, predictor.training_range, strict=True):
        print(f"  {name}: training range [{low:.4g}, {high:.4g}]")
    return 0


def _predictor_apply(args: argparse.Namespace) -> int:
    from attncoda.experiments.predictor import standing as predictor_standing

    if args.predictor != "shipped":
        args.predictor = str(Path(args.predictor).resolve())
    out = _run(args, "predictor", args.models)
    for row in _tables(out)["predictor"].itertuples(index=False):
        said = (
            f"ABSTAIN ({row.reason})"
            if row.abstained
            else f"predicted {row.predicted:.1%} "
            f"[{row.predicted_low:.1%}, {row.predicted_high:.1%}] "
            f"(interval score {row.interval_score:.3f})"
        )
        if hasattr(row, "baseline_predicted"):
            said += (
                f"; baseline {row.baseline_predicted:.1%} [{row.baseline_predicted_low:.1%}, "
                f"{row.baseline_predicted_high:.1%}] (interval score "
                f"{row.baseline_interval_score:.3f})"
            )
        counted, standing = predictor_standing(row._asdict())
        seen = getattr(row, "matched_training_model", "")
        if counted:
            verdict = f"{row.verdict} (held out; baseline {row.baseline_verdict})"
        elif row.relation == "training" and seen and row.on_protocol:
            verdict = f"training model {seen} (matched by {row.matched_by}): no test"
        else:
            verdict = f"{standing}: no test" if row.on_protocol else standing
        print(f"{row.model}: {said}; measured {row.measured:.1%}; {verdict}")
    return _finish(out)


def _collapse(args: argparse.Namespace) -> int:
    import pandas as pd

    out = _run(args, "collapse", [], series=args.series)
    table = _tables(out)["collapse"]
    model = table[table["level"] == "model"]
    print(
        "model-level mean entropy change and its two-factor Shapley split (nats); the sink "
        "share's range over the two one-sided orderings in brackets:"
    )
    for row in model.itertuples(index=False):
        share = (
            "n/a"
            if pd.isna(row.sink_share)
            else f"{row.sink_share:.1%} ({row.sink_share_low:.1%}-{row.sink_share_high:.1%})"
        )
        print(
            f"  {row.pair_kind:<11} {row.label_from:>8} -> {row.label_to:<8} "
            f"dH {row.delta_entropy:+.4f} = sink {row.delta_sink:+.4f} "
            f"+ content {row.delta_content:+.4f}   sink share {share}"
        )
    return _finish(out)


def _prune(args: argparse.Namespace) -> int:
    out = _run(args, "prune", [args.model])
    tables = _tables(out)
    if "prune" not in tables:
        units = tables["units"]
        note = units[units["experiment"] == "prune"]["note"].iloc[0]
        raise AttncodaError(note)
    for _, table in tables["prune"].groupby(["model", "revision"], sort=False):
        base = table[table["k"] == 0]
        if len(base):
            print(
                f"unpruned perplexity: {float(base['perplexity'].iloc[0]):.3f} on "
                f"{int(base['n_windows'].iloc[0])} windows; each ratio's 95% interval is a "
                "paired percentile bootstrap over them"
            )
        pruned = table[table["k"] > 0]
        for key, group in pruned.groupby(["ablation", "channel", "order"], sort=True):
            worst = group.loc[group["ratio"].idxmax()]
            ci = worst["ci_note"] or (
                f"[{worst['ratio_ci_low']:.2f}, {worst['ratio_ci_high']:.2f}] of "
                f"{int(worst['n_boot'])} resamples"
            )
            print(
                f"  {key[0]:<8} {key[1]:<16} {key[2]:<5} worst ratio {worst['ratio']:9.2f} "
                f"at k={int(worst['k'])}  {ci}"
            )
    return _finish(out)


def _train_tiny(args: argparse.Namespace) -> int:
    from attncoda.training.train import TrainConfig, train_tiny

    config = TrainConfig(
        task=args.task,
        steps=args.steps,
        seed=args.seed,
        size=args.size,
        window=args.window,
        batch_size=args.batch_size,
        lr=args.lr,
        corpus=args.text,
        triggers=args.triggers,
    )
    result = train_tiny(
        args.out, config, threads=args.threads, overwrite=args.overwrite, progress=True
    )
    if not result.trained:
        print(f"{args.out} already holds this series (same config): nothing to train")
    print(f"{'step':>6}  {'train loss':>10}  {'val loss':>8}  first-token attention per layer")
    for step, tr, va, att in zip(
        result.steps, result.train_loss, result.val_loss, result.first_token_attention, strict=True
    ):
        print(f"{step:>6}  {tr:>10.3f}  {va:>8.3f}  " + " ".join(f"{a:.3f}" for a in att))
    if result.bos_attention_non_trigger:
        print("mean attention on <|bos|> per head, at trigger / non-trigger queries")
        for step, trig, rest in zip(
            result.steps,
            result.bos_attention_trigger,
            result.bos_attention_non_trigger,
            strict=True,
        ):
            heads = [
                f"L{layer}H{head} {t:.2f}/{n:.2f}"
                for layer, (lt, ln) in enumerate(zip(trig, rest, strict=True))
                for head, (t, n) in enumerate(zip(lt, ln, strict=True))
            ]
            print(f"{step:>6}  " + "  ".join(heads))
    print(f"{result.steps_per_second:.2f} steps/s; checkpoints in {result.out_dir}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from attncoda.models.zoo import zoo_table

    def said(flag: bool | None) -> str:
        return "n/a" if flag is None else ("yes" if flag else "no")

    table = zoo_table()
    width = max(8, *(len(r["name"]) for r in table))
    print(
        f"{'name':<{width}} {'family':<8} {'layers x heads (KV)':<20} {'params':>7}  "
        f"{'installed':<9}  {'cached':<6}  {'capture':<9}  sink"
    )
    for r in table:
        shape = f"{r['layers']} x {r['heads']} ({r['kv_heads']})"
        print(
            f"{r['name']:<{width}} {r['family']:<8} {shape:<20} {r['params'] / 1e6:>6.1f}M  "
            f"{said(r['installed']):<9}  {said(r['cached']):<6}  {r['capture']:<9}  {r['sink']}"
        )
    print(
        "\ncapture: 'attention' routes the model through attncoda's attention function; "
        "'outputs' reads eager output_attentions"
    )
    print("cached: n/a = read in place from its wheel; 'no' = prepared on first load")
    for r in table:
        print(f"{r['name']}: {r['title']}; licence: {r['licence']}")
        if not r["installed"]:
            print(f"  install with: {r['install']}")
    _shipped()
    return 0


def _shipped() -> None:
    from attncoda.models.shipped import shipped_table

    rows = shipped_table()
    width = max(len(r["spec"]) for r in rows)
    print("\nshipped checkpoints (train-tiny on Bigram-Backcopy; name@stepN names one):")
    print(f"{'spec':<{width}}  {'role':<6}  {'checkpoints':<23}  recipe")
    for r in rows:
        print(f"{r['spec']:<{width}}  {r['role']:<6}  {r['checkpoints']:<23}  {r['recipe']}")


def _run_options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments that ``reproduce`` and ``sweep`` share."""
    settings: dict[str, dict[str, Any]] = {}
    for dest, group, key in (
        ("rows_docs", "rows", "docs"),
        ("n_boot", "flips", "n_boot"),
        ("retrain", "train", "retrain"),
        ("train_steps", "train", "steps"),
        ("train_task", "train", "task"),
    ):
        if getattr(args, dest, None) is not None:
            settings.setdefault(group, {})[key] = getattr(args, dest)
    return {
        "series": args.series,
        "experiments": args.experiments,
        "scale": args.scale,
        "settings": settings,
        "text": args.text,
        "progress": True,
        **capture_options(args),
    }


def _print_run(result: Any, out: Path) -> None:
    print(f"{len(result.units)} units: {result.ran} run now, {result.skipped} finished earlier")
    for key, error in result.failed.items():
        print(f"FAILED {key}: {error}")


def _reproduce(args: argparse.Namespace) -> int:
    from attncoda.run.reproduce import reproduce

    out = Path(args.out or Path("attncoda-out") / "reproduce")
    _print_run(reproduce(args.models, out, **_run_options_of(args)), out)
    return _finish(out)


def _demo(args: argparse.Namespace) -> int:
    from attncoda.report.worked_example import worked_example
    from attncoda.store.runs import check_run_folder

    if not args.example_only:
        args.out = args.out or str(Path("attncoda-out") / "demo")
        check_run_folder(args.out)  # refused before the example is printed, not after
    print(worked_example())
    if args.example_only:
        return 0
    print("\nNow every experiment on the embedded models (attncoda reproduce):\n", flush=True)
    return _reproduce(args)


def _report(args: argparse.Namespace) -> int:
    from attncoda.report.html import render_report

    print(f"report: {render_report(args.dir)}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from attncoda.run.reproduce import check_models
    from attncoda.run.sweep import expand_models, sweep
    from attncoda.store.runs import check_run_folder

    out = Path(args.out or Path("attncoda-out") / "sweep")
    check_run_folder(out)
    # Syntax and paths only: a sweep's units may run on machines whose hub caches differ
    # from this one's, so a hub id missing here fails as a unit, not the whole sweep.
    check_models(expand_models(args.models, args.revisions), args.series, cache=False)
    result = sweep(
        args.models,
        out,
        revisions=args.revisions,
        ray_address=args.ray_address,
        ray_local=args.ray_local,
        retries=args.retries,
        **_run_options_of(args),
    )
    _print_run(result, out)
    _finish(out)
    return 1 if result.failed else 0


_COMMANDS = {
    "demo": _demo,
    "models": _models,
    "profile": _profile,
    "flips": _flips,
    "cluster": _cluster,
    "safety": _safety,
    "predictor fit": _predictor_fit,
    "predictor apply": _predictor_apply,
    "collapse": _collapse,
    "prune": _prune,
    "reproduce": _reproduce,
    "report": _report,
    "sweep": _sweep,
    "train-tiny": _train_tiny,
}


def run_command(name: str, args: argparse.Namespace) -> int:
    """Run the command ``name`` (``"predictor fit"`` for a subcommand) on ``args``."""
    return int(_COMMANDS[name](args))
