"""The self-contained HTML report of a run folder (of ``reproduce``, ``sweep`` or one
experiment's command).

:func:`render_report` reads ``DIR/manifest.json`` and ``DIR/tables/*.parquet`` only (no model
is loaded) and writes ``DIR/report.html``: a header with the run's facts, then one
``<section>`` per experiment of the registry, written by the experiment's own
:class:`~attncoda.experiments.contract.View`. Each section sets the paper's claim beside the
measured numbers, then the measured tables and figures. Every table caption and figure
caption names its convention (keep vs drop, or none for the exact sink/content splits) and
the sink spec of the run.

The page is self-contained (figures are base64 PNGs, CSS is inline, there is no script) and
deterministic: rendering the same folder twice gives the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attncoda.experiments.contract import EXPERIMENTS, View, experiment, settings_dict
from attncoda.experiments.view import Context, esc, is_missing, model_label, note, table
from attncoda.models.spec import parse_spec
from attncoda.run.config import RunConfig
from attncoda.store import atomic_write_bytes, read_json
from attncoda.store.runs import read_run_tables

__all__ = ["REPORT_NAME", "render_report", "sections"]

REPORT_NAME = "report.html"


def sections() -> list[tuple[str, View]]:
    """``(experiment, view)`` of every section, in page order: the registry's
    (:data:`attncoda.experiments.contract.EXPERIMENTS`). A section whose first table is absent
    says it was not run."""
    out = []
    for name in EXPERIMENTS:
        view = experiment(name).view
        if view is not None:
            out.append((name, view))
    return out


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1200px;padding:0 1.5rem 3rem;color:#1b1b1b;line-height:1.45;font-size:15px}
h1{font-size:1.6rem;margin:1.5rem 0 .3rem}h2{font-size:1.3rem;margin:0 0 .6rem}
section{border-top:2px solid #ddd;padding-top:1rem;margin-top:2rem}
table{border-collapse:collapse;margin:.8rem 0 1.2rem;font-size:13px}
caption{text-align:left;font-weight:600;padding:.2rem 0 .4rem;caption-side:top}
th,td{border:1px solid #d0d0d0;padding:.2rem .5rem;vertical-align:top;text-align:left}
th{background:#f3f3f3}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.claims{font-size:14px;background:#fbfaf4}table.claims td:first-child{max-width:26rem}
.convention{font-weight:400;color:#5a3d8a;font-size:.92em}
figure{margin:1rem 0 1.6rem}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:13px;margin-top:.3rem}
.not-run{background:#fff4e5;border-left:4px solid #e0a030;padding:.4rem .7rem}
.note{color:#444;font-size:13.5px}nav ol{columns:2;font-size:14px}
details{margin:.4rem 0 1rem}summary{cursor:pointer;color:#30508a}
code{font-size:.92em;word-break:break-all}
"""


def render_report(run_dir: str | os.PathLike[str]) -> Path:
    """Write the self-contained HTML report of a run folder and return its path.

    Parameters
    ----------
    run_dir : path-like
        A run folder: ``manifest.json`` and ``tables/*.parquet``. Any table may be absent (a
        run of fewer experiments): its section then says it was not run.

    Returns
    -------
    pathlib.Path
        ``run_dir/report.html``, written atomically. A section whose table lacks a column
        it needs says so instead of its content. The same folder always gives the same
        bytes (figures are PNGs without a software stamp; the only dates are the manifest's).

    Raises
    ------
    AttncodaError
        ``run_dir`` holds no ``tables/`` folder, or no readable ``manifest.json``; the
        message names the folder or file.

    Examples
    --------
    >>> from attncoda.report.html import render_report
    >>> render_report("runs/demo")  # doctest: +SKIP
    PosixPath('runs/demo/report.html')
    """
    root = Path(run_dir)
    tables = read_run_tables(root)
    manifest = read_json(root / "manifest.json")
    config = RunConfig.from_json(manifest["config"])
    ctx = Context(frames=tables, sink=config.options.sink)
    body = [_header(manifest, config, ctx, root)]
    for section_id, view in sections():
        present = ctx.holds(view.needs)
        inner = _build(view.section, ctx) if present else _not_run(section_id, view, config)
        body.append(
            f'<section id="{section_id}"><h2>{esc(view.title)}</h2>\n'
            + _skipped(ctx, section_id, view)
            + inner
            + "</section>\n"
        )
    version = (manifest.get("packages") or {}).get("attncoda")
    generator = f'<meta name="generator" content="attncoda {esc(version)}">\n' if version else ""
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        + generator
        + '<link rel="icon" href="data:,">\n'
        + f"<title>{esc(_title(config))}</title>\n<style>{_CSS}</style></head>\n<body>\n"
        + "".join(body)
        + "</body></html>\n"
    )
    return atomic_write_bytes(root / REPORT_NAME, page.encode("utf-8"))


def _build(build: Callable[[Context], str], ctx: Context) -> str:
    # A folder written by another version may lack a column: say so in that section and
    # render the others, rather than refuse the whole report.
    try:
        return build(ctx)
    except KeyError as exc:
        return note(
            f"This section could not be rendered: a table lacks the column {exc.args[0]!r}.",
            "not-run",
        )


def _title(config: RunConfig) -> str:
    models = ", ".join(config.models) or "no models"
    return f"attncoda report — {models}"


def _against_reference(root: Path) -> str:
    """Whether the run holds the same evidence as the reference run recorded from ``make
    demo`` (:func:`attncoda.compare`'s summary), or why it is not compared: another command
    or other settings than the reference's."""
    from attncoda.run.compare import compare

    found = compare(root)
    if found.config:
        differs = ", ".join(found.config)
        return f"not compared: the run's config differs from the reference's in {differs}"
    return found.summary()


def _header(manifest: Mapping[str, Any], config: RunConfig, ctx: Context, root: Path) -> str:
    corpus, series = config.corpus, config.series
    convention = (
        f"keep vs drop is compared throughout; each section names its own (sink = {ctx.sink})"
    )
    facts = [
        ("command", f"attncoda {manifest.get('command', '?')}"),
        ("created", manifest.get("created", "?")),
        ("models", ", ".join(config.models) or "none"),
        (
            "checkpoint series",
            f"{series.name}: {', '.join(p.label for p in series.points)}"
            if series is not None
            else "none",
        ),
        ("experiments", ", ".join(config.experiments)),
        ("scale", config.scale),
        (
            "corpus",
            f"{corpus.spec}, {corpus.n_documents} documents, sha256 {corpus.sha256}",
        ),
        ("sink", ctx.sink),
        ("seed", config.options.seed),
        ("device", _device(manifest, config)),
        ("against the reference run", _against_reference(root)),
        ("python", manifest.get("python", "?")),
        (
            "packages",
            ", ".join(f"{k} {v}" for k, v in sorted((manifest.get("packages") or {}).items())),
        ),
    ]
    parts = [
        f"<header><h1>{esc(_title(config))}</h1>\n",
        note(
            "Attention rows read as compositions: each section puts the paper's claim beside "
            "what this run measured. Entropies and Aitchison distances are in nats."
        ),
        table("Run", convention, ("", "value"), [(k, str(v)) for k, v in facts]),
        _settings(config, convention),
        _models(manifest.get("model_info") or {}, config.models, convention),
        _units(ctx),
        "<nav><ol>"
        + "".join(f'<li><a href="#{sid}">{esc(v.title)}</a></li>' for sid, v in sections())
        + "</ol></nav></header>\n",
    ]
    return "".join(parts)


def _device(manifest: Mapping[str, Any], config: RunConfig) -> str:
    """Where the run's models ran (the manifest's ``device``, and ``gpu`` where CUDA ran),
    beside the device asked for when that differs (``auto``), e.g. ``cpu (asked: auto)``."""
    asked = str(config.options.device_map or config.options.device)
    used = manifest.get("device")
    if not used:
        return asked
    shown = f"{used} ({manifest['gpu']})" if manifest.get("gpu") else str(used)
    return shown if shown == asked else f"{shown} (asked: {asked})"


def _settings(config: RunConfig, convention: str) -> str:
    """Every setting of the run: each experiment's, the shared rows and the train series,
    as ``group.name``."""
    groups = {**config.settings, "rows": config.rows, "train": config.train}
    rows = []
    for group, values in groups.items():
        if values is None:
            continue
        for key, v in sorted(settings_dict(values).items()):
            shown = ", ".join(map(str, v)) if isinstance(v, list) else str(v)
            rows.append((f"{group}.{key}", shown))
    return (
        "<details><summary>Settings</summary>"
        + table(
            "Settings of the run (manifest config.settings, config.rows, config.train)",
            convention,
            ("setting", "value"),
            rows,
        )
        + "</details>\n"
    )


#: The per-layer drift of a half-precision forward, as measured (bench/precision.py on
#: SmolLM2 and Gemma 3 in bfloat16, bench/RESULTS.md; docs/how-to/precision.md): how far
#: another attention implementation of the same model moves a later layer's statistics.
HALF_PRECISION_DRIFT = (
    "from layer 1 on, another attention implementation of the same model moves a row's "
    "entropy by up to 0.1-0.2 nats and a head's mean by up to 5e-3 (measured on SmolLM2 and "
    "Gemma 3 in bfloat16; docs/how-to/precision.md)"
)
HALF_PRECISION = ("bfloat16", "float16")


def _capture_route(facts: Mapping[str, Any]) -> str:
    """How capture read the model (its scores, or the fallback's eager outputs), the
    forward it followed (``Capture.forward``) and, for a half-precision model, what that
    forward's own rounding moves."""
    mode = facts.get("capture_mode", "attention")
    parts = ["routed scores" if mode == "attention" else "eager output_attentions (fallback)"]
    if facts.get("forward"):
        parts.append(f"forward: {facts['forward']}")
    if facts.get("read_dtype") in HALF_PRECISION:
        parts.append(f"rows read in {facts['read_dtype']} carry the model's rounding")
    if facts.get("dtype") in HALF_PRECISION:
        parts.append(f"{facts['dtype']} forward: {HALF_PRECISION_DRIFT}")
    return "; ".join(parts)


def _models(info: Mapping[str, Any], order: Sequence[Any], convention: str) -> str:
    # model_info is keyed model@revision; a revision may hold an '@' itself (a/b@x@y)
    first = [f"{parse_spec(str(m)).name}@{parse_spec(str(m)).label}" for m in order]

    def rank(key: str) -> tuple[int, str]:
        return (first.index(key) if key in first else len(first), key)

    rows = []
    for key in sorted(info, key=rank):
        m = info[key] or {}
        rows.append(
            (
                key.removesuffix("@-"),
                str(m.get("family", m.get("model_type", "?"))),
                str(m.get("architecture", "?")),
                f"{m.get('n_layers', '?')} × {m.get('n_heads', '?')}",
                str(m.get("n_kv_heads", "?")),
                "causal" if m.get("causal") else "bidirectional",
                _capture_route(m),
                "yes" if m.get("prepends_bos") else "no",
                str(m.get("source", "?")),
            )
        )
    if not rows:
        return ""
    return table(
        "Models (manifest model_info)",
        convention,
        (
            "model",
            "family",
            "architecture",
            "layers × heads",
            "KV heads",
            "attention",
            "capture",
            "BOS prepended",
            "source",
        ),
        rows,
    )


def _units(ctx: Context) -> str:
    units = ctx.optional.units
    if units is None:
        return note("This folder has no units table.", "not-run")
    experiments = list(dict.fromkeys(str(e) for e in units["experiment"]))
    labels = list(
        dict.fromkeys(
            model_label(m, r) for m, r in zip(units["model"], units["revision"], strict=True)
        )
    )
    status: dict[tuple[str, str], str] = {}
    notes = []
    for r in units.to_dict("records"):
        label = model_label(r["model"], r["revision"])
        status[(label, str(r["experiment"]))] = str(r["status"])
        if not is_missing(r["note"]) and str(r["note"]):
            notes.append(f"{label} / {r['experiment']}: {r['status']}, {r['note']}")
    rows = [(label, *(status.get((label, e), "—") for e in experiments)) for label in labels]
    return table(
        "Units of work: status per model (or checkpoint) and experiment",
        f"each experiment names its own in its section (sink = {ctx.sink})",
        ("model", *experiments),
        rows,
    ) + "".join(note(n) for n in notes)


def _skipped(ctx: Context, section_id: str, view: View) -> str:
    units = ctx.optional.units
    if units is None:
        return ""
    wanted = {section_id, *view.units}
    lines = [
        f"{model_label(r['model'], r['revision'])} ({r['experiment']})"
        + (f": {r['note']}" if not is_missing(r["note"]) and str(r["note"]) else "")
        for r in units.to_dict("records")
        if str(r["experiment"]) in wanted and str(r["status"]) != "done"
    ]
    if not lines:
        return ""
    return note("Units not run for this section — " + "; ".join(lines) + ".", "not-run")


def _not_run(section_id: str, view: View, config: RunConfig) -> str:
    if section_id not in config.experiments:
        why = f"{section_id} is not among this run's experiments ({', '.join(config.experiments)})"
    else:
        why = f"this folder has no tables/{view.needs[0]}.parquet (no unit produced it)"
    return note(f"This section was not run: {why}.", "not-run")
