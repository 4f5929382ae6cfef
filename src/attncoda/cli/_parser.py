"""The ``attncoda`` parser: one subcommand per experiment of the registry, built from its
``Command`` and its options from its ``Settings``, and :func:`main`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from attncoda._errors import AttncodaError, one_line_errors
from attncoda.cli._args import Parser, add_options, add_settings, bind_setting, names, validate
from attncoda.experiments.contract import RULES
from attncoda.run.pool import cores


def _rows(p: argparse.ArgumentParser) -> None:
    from attncoda.run.config import Rows

    add_settings(p, Rows)


def _corpus_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text", help="a .txt or .jsonl corpus (default: the embedded one)")
    p.add_argument("--out", help="run folder (default: attncoda-out/<command>/<model>)")
    _capture_options(p)


def _capture_options(p: argparse.ArgumentParser) -> None:
    """The capture options, one per field of their declaration (``--sink``, ``--seed``,
    ``--device``, ...: :class:`~attncoda.capture.options.CaptureOptions`)."""
    from attncoda.capture.options import CaptureOptions

    add_options(p, CaptureOptions)


def _attention_options(p: argparse.ArgumentParser, several: bool) -> None:
    p.add_argument(
        "--attentions",
        nargs="+" if several else None,
        metavar="FILE",
        help="attention saved by a past run (.npz, .pt or .safetensors) instead of a model",
    )
    p.add_argument(
        "--tokens",
        dest="tokens",
        metavar="FILE",
        help="token ids (batch, pos) for token sinks (.npy, .npz, .pt)",
    )
    p.add_argument(
        "--kind",
        choices=("probs", "log_probs", "logits"),
        help="what the saved numbers are (default: probs, or logits for 'scores' arrays)",
    )


def _run_options(p: argparse.ArgumentParser) -> None:  # long: a run command's options, in order
    from attncoda.experiments.contract import EXPERIMENTS, experiment
    from attncoda.run.config import DEMO_MODELS, Rows

    p.add_argument(
        "--models",
        type=names,
        default=DEMO_MODELS,
        help="comma list of models: embedded ones (attncoda models), owner/name[@rev], "
        f"folders (default: {','.join(DEMO_MODELS)})",
    )
    p.add_argument(
        "--series",
        help="checkpoint series of collapse: bigram-backcopy (shipped), "
        "owner/name@step0,step512,... or a folder of stepN checkpoints (default: the shipped "
        "bigram-backcopy series; with --retrain, one trained into OUT/series)",
    )
    p.add_argument(
        "--experiments",
        type=names,
        default=EXPERIMENTS,
        help=f"comma list of {','.join(EXPERIMENTS)} (default: all)",
    )
    p.add_argument(
        "--scale",
        default="demo",
        choices=("demo", "full"),
        help="demo: minutes on a 2-core CPU; full: the README's settings (default: demo)",
    )
    p.add_argument("--rows-docs", type=int, help="windows whose full rows feed the experiments")
    bind_setting(p, "rows_docs", Rows, "docs")
    for name in EXPERIMENTS:  # the settings an experiment lets a whole run set
        declared = experiment(name)
        fields = {f.name: f for f in dataclasses.fields(declared.settings)}
        for flag in declared.command.run_flags if declared.command is not None else ():
            p.add_argument(
                "--" + flag.replace("_", "-"),
                dest=flag,
                type=type(fields[flag].default),
                help=f"{fields[flag].metadata.get('help', flag)} ({name})",
            )
            bind_setting(p, flag, declared.settings, flag)
    p.add_argument(
        "--retrain",
        action="store_true",
        default=None,
        help="train the series and the unseen runs on this machine instead of reading the "
        "shipped checkpoints; the run's retrain table says what that changed",
    )
    p.add_argument("--train-steps", type=int, help="steps of the retrained series (with --retrain)")
    p.add_argument(
        "--train-task",
        choices=("bigram-backcopy", "text"),
        help="task of the retrained series (with --retrain): bigram-backcopy (a sink grows; "
        "the default) or text (the corpus; no sink grows)",
    )
    p.add_argument("--text", help="a .txt or .jsonl corpus (default: the embedded one)")
    p.add_argument(
        "--workers",
        type=int,
        default=cores(),
        help="units at the same time, each in a process of its own with its share of the "
        f"cores, as dependencies and memory allow (default: the cores, {cores()})",
    )
    p.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop at the first unit that fails (default: run every unit that does not wait "
        "for it, list the failures at the end and exit 1; a rerun retries only them)",
    )
    _capture_options(p)


def _sources(p: argparse.ArgumentParser, command: Any) -> None:
    """The command's sources argument (:data:`attncoda.experiments.contract.SOURCES`)."""
    kind, shown = command.sources, getattr(command, "source_help", "") or None
    if kind == "model":
        p.add_argument("model", help=shown)
    elif kind == "model?":
        p.add_argument("model", nargs="?", help=shown)
        _attention_options(p, several=False)
    elif kind == "models*":
        p.add_argument("models", nargs="*", help=shown)
        _attention_options(p, several=True)
    elif kind == "models+":
        p.add_argument("models", nargs="+", help=shown)
    else:
        p.add_argument("series", help=shown)


def _experiment_parsers(sub: Any) -> None:
    """One subcommand per experiment of the registry, built from its
    :class:`~attncoda.experiments.contract.Command` and ``Settings``, and one per tool
    beside it (:class:`~attncoda.experiments.contract.Tool`, ``predictor fit``)."""
    from attncoda.experiments.contract import EXPERIMENTS, experiment

    actions: dict[str, Any] = {}
    for name in EXPERIMENTS:
        declared = experiment(name)
        command = declared.command
        if command is None:
            continue
        typed = name.replace("_", "-")  # a name's underscores are typed as dashes
        if command.action is None:
            p = sub.add_parser(typed, help=command.help)
        else:
            group = sub.add_parser(typed, help=command.help)
            actions[name] = group.add_subparsers(dest="action", required=True)
            p = actions[name].add_parser(command.action, help=command.help)
        if command.positional is not None:
            field = {f.name: f for f in dataclasses.fields(declared.settings)}[command.positional]
            p.add_argument(command.positional, help=field.metadata.get("help"))
            bind_setting(p, command.positional, declared.settings, command.positional)
        _sources(p, command)
        skip = (command.positional,) if command.positional else ()
        add_settings(p, declared.settings, flags=command.flags, skip=skip)
        if declared.shared_rows:
            _rows(p)
        _corpus_options(p)
        shown = typed if command.action is None else f"{typed} {command.action}"
        p.set_defaults(command_name=shown, experiment=name)
        for tool in command.tools:
            t = actions[name].add_parser(tool.action, help=tool.help)
            _sources(t, tool)
            add_settings(t, tool.settings)
            if tool.shared_rows:
                _rows(t)
            _corpus_options(t)
            t.set_defaults(command_name=f"{typed} {tool.action}", tool=(name, tool.action))


def _run_parsers(sub: Any) -> None:
    rp = sub.add_parser(
        "reproduce",
        help="every experiment on a list of models: a resumable run folder and report.html",
        description="Runs profile, flips, cluster, safety, predictor apply, collapse and prune "
        "unit by unit (model, revision, experiment) into OUT. A unit that fails is recorded "
        "and the others run; the command then lists the failures and exits 1. Rerun the same "
        "command to resume: finished units are skipped, failed ones retried; another config "
        "in OUT is refused.",
    )
    _run_options(rp)
    rp.add_argument("--out", help="run folder (default: attncoda-out/reproduce)")
    rp.set_defaults(command_name="reproduce")

    re_ = sub.add_parser("report", help="re-render DIR/report.html from DIR's stored tables")
    re_.add_argument("dir", help="a run folder (of reproduce, sweep or one experiment)")
    re_.set_defaults(command_name="report")

    co = sub.add_parser(
        "compare",
        help="whether two runs hold the same evidence: every table, each column by its rule",
        description="Compares every table of RUN with REFERENCE's (default: the reference run "
        "recorded from `make demo`, shipped with attncoda), each column held by the rule "
        "its experiment declares, every allowance read from the reference's row: "
        + "; ".join(f"{rule.__name__}, {rule.says}" for rule in RULES).replace("%", "%%")
        + ". Prints one line (and the cells that differ, with what each was allowed); exits "
        "1 when the runs differ, 2 when a folder is not a finished run.",
    )
    co.add_argument("run", help="a finished run folder")
    co.add_argument(
        "reference", nargs="?", help="another run folder (default: the shipped reference run)"
    )
    co.set_defaults(command_name="compare")

    sw = sub.add_parser(
        "sweep",
        help="reproduce over models x revisions, one Ray task per unit",
        description="One Ray task per (model, revision, experiment) unit, each writing its own "
        "partition of the run folder (the store of reproduce). Without --ray-address or "
        "--ray-local the units run in this process. To use an existing cluster, start it "
        "(`ray start --head` on one machine, `ray start --address HEAD:6379` on the others; "
        "every machine needs attncoda installed and the run folder on a shared filesystem) "
        "and pass --ray-address auto (on a cluster machine) or --ray-address HEAD:6379.",
    )
    _run_options(sw)
    sw.add_argument(
        "--revisions",
        type=names,
        help="comma list of revisions run for every model (e.g. step0,step512,step143000)",
    )
    ray = sw.add_mutually_exclusive_group()
    ray.add_argument(
        "--ray-address", help="an existing Ray cluster: auto, or HOST:PORT of its head"
    )
    ray.add_argument("--ray-local", type=int, help="start a local Ray instance with N worker CPUs")
    sw.add_argument(
        "--retries", type=int, default=2, help="retries of a failed unit before it is reported"
    )
    sw.add_argument("--out", help="run folder (default: attncoda-out/sweep)")
    sw.set_defaults(command_name="sweep")


def _train_parser(sub: Any) -> None:
    from attncoda.data.tasks import TASKS  # numpy only: no torch at parse time

    tt = sub.add_parser("train-tiny", help="train a small GPT-NeoX from scratch (checkpoints)")
    tt.add_argument("out", help="folder for the step<N> checkpoints")
    tt.add_argument(
        "--task",
        default="text",
        choices=TASKS,
        help="text: the corpus; bigram-backcopy: the synthetic task on which a sink grows",
    )
    # None: the task's own default (TASK_DEFAULTS).
    tt.add_argument("--steps", type=int, help="default: 1000 (text), 2000 (bigram-backcopy)")
    tt.add_argument("--seed", type=int, default=0)
    tt.add_argument("--size", choices=("tiny", "small"), help="default: small (text), tiny (task)")
    tt.add_argument("--window", type=int, help="default: 128 (text), 64 (bigram-backcopy)")
    tt.add_argument("--batch-size", type=int, help="default: 16 (text), 32 (bigram-backcopy)")
    tt.add_argument("--lr", type=float, help="default: 2e-3 (text), 1e-2 (bigram-backcopy)")
    tt.add_argument("--triggers", type=int, default=3, help="trigger tokens (bigram-backcopy)")
    tt.add_argument(
        "--threads",
        type=int,
        default=1,
        help="recorded only: training runs on one pinned thread, bit-identical on one machine",
    )
    tt.add_argument("--text", help="a .txt or .jsonl corpus (default: the embedded one)")
    tt.add_argument("--overwrite", action="store_true")
    tt.set_defaults(command_name="train-tiny")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``attncoda`` command."""
    parser = Parser(
        prog="attncoda",
        description="Attention rows as compositional data: exact sink/content splits.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an unexpected error"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="the worked example, then reproduce on smollm2, gemma3 and minilm (demo scale)",
    )
    demo.add_argument("--example-only", action="store_true", help="print the example only")
    _run_options(demo)
    demo.add_argument("--out", help="run folder (default: attncoda-out/demo)")
    demo.set_defaults(command_name="demo")

    mo = sub.add_parser(
        "models",
        help="the embedded models (family, shape, installed and cached, sink, capture) and "
        "the shipped checkpoint series",
    )
    mo.set_defaults(command_name="models")

    _experiment_parsers(sub)
    _run_parsers(sub)
    _train_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attncoda`` console script."""
    from attncoda.cli._commands import run_command

    args = build_parser().parse_args(argv)
    try:
        with one_line_errors():
            validate(args)
            return run_command(args.command_name, args)
    except AttncodaError as exc:
        print(f"attncoda: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "attncoda: interrupted: finished units are kept and the unfinished one cleared; "
            "rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    except Exception as exc:  # one line, not a traceback, unless asked for
        if args.debug:
            raise
        print(
            f"attncoda: unexpected error: {type(exc).__name__}: {exc} (rerun with --debug "
            f"for the traceback)",
            file=sys.stderr,
        )
        return 1
