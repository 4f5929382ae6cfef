"""The fast path's derived error bounds at full depth: ``python bench/fast_bounds.py
[--models smollm2,gemma3] [--lengths 1024,4096] [--random N] [--random-long N] [--threads T]
[--kernel auto|cpp|sdpa] [--record [FILE]]``.

For the CPU kernel ``--kernel`` names (``auto``: the one ``"auto"`` takes on the CPU, ``cpp``
where it can be built), each model and length, one forward over the corpus window and ``N``
random-token documents (``--random-long`` of them at lengths above 1024), every layer: the fast
statistics from the layer's own queries, keys and values, then the exact path on the same
tensors (its output goes on), so both paths see the same inputs in every layer. Prints,
per quantity, the largest ``|fast - exact|``, the largest bound
(:func:`attncoda.capture.kernels.difference_bounds`), and the row where the difference comes
closest to its bound (measured / bound, with its input, layer, head and query), and last,
for comparison, the largest difference between two whole captures (``method="fast"`` and
``method="exact"``, each its own forward: later layers' inputs then differ by the outputs'
float32 rounding, which no per-row bound covers). Nothing is asserted: the test
(tests/capture/kernels/test_fast_bounds.py) checks the first layers.

``--record`` replaces (or appends) the section "The fast path's error bounds" of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

QUANTITIES = ("sink_mass", "entropy", "content_entropy")
TITLE = "## The fast path's error bounds (bench/fast_bounds.py)"


def paired(model, ids, kernel):
    """``(exact capture, per-layer fast statistics, per-layer A)`` of one forward, the fast
    statistics from ``kernel``."""
    import torch

    from attncoda.capture import capture
    from attncoda.capture.kernels import registry, score_scale

    fast, scales = [], []
    chosen = registry.lookup(kernel)
    inner = chosen.prepare

    def both(call, *, auto):
        ready = inner(call, auto=auto)
        if isinstance(ready, str):
            raise RuntimeError(f"layer {call.layer}: the fast path refused it")
        _, stats = chosen.run(ready)
        fast.append({k: stats[k].to("cpu", torch.float64).numpy() for k in QUANTITIES})
        scales.append(score_scale(call.query, call.key, call.scaling))
        return ""  # declined: the exact path now runs on the same tensors

    # The chosen kernel's statistics are taken; no kernel serves, so the exact path does.
    declined = {k: (both if k is chosen else lambda call, auto: "") for k in registry.ORDER}
    for k, prepare in declined.items():
        k.prepare = prepare
    try:
        with torch.inference_mode():
            cap = capture(model, ids, record_rows="none", method="fast", kernel=kernel)
    finally:
        for k in declined:
            del k.prepare  # the class's own again
    return cap, fast, scales


def inputs(tokenizer, length, n_random, seed):
    """The corpus window and ``n_random`` random-token documents, BOS first where the
    tokenizer prepends one."""
    import numpy as np

    from attncoda.run.captured import corpus_windows

    first = tokenizer("a")["input_ids"][0]
    bos = first if first == tokenizer.bos_token_id else None
    body = length - (bos is not None)
    found, _ = corpus_windows(tokenizer, text=None, max_tokens=body, docs=1)
    corpus = np.asarray(found[0].input_ids)[None]
    rng = np.random.default_rng(seed)
    random = rng.integers(0, tokenizer.vocab_size, size=(n_random, body))
    if bos is not None:
        corpus = np.concatenate([[[bos]], corpus], axis=1)
        random = np.concatenate([np.full((n_random, 1), bos), random], axis=1)
    return np.concatenate([corpus, random])


def sweep(model, ids, kernel):
    """Per quantity: largest difference, largest bound, and the closest row to its bound."""
    import numpy as np

    from attncoda.capture.kernels import difference_bounds

    head_dim = model.config.head_dim
    cap, fast, scales = paired(model, ids, kernel)
    out = {name: {"diff": 0.0, "bound": 0.0, "ratio": -1.0} for name in QUANTITIES}
    for layer, (stats, scale) in enumerate(zip(fast, scales, strict=True)):
        exact = {k: getattr(cap, k)[:, layer] for k in QUANTITIES}
        bound = difference_bounds(
            n_keys=cap.n_keys[:, layer], head_dim=head_dim, scale=scale, **exact
        )
        content = cap.has_content[:, layer]
        for name in QUANTITIES:
            rows = content if name == "content_entropy" else np.ones_like(content)
            err = np.where(rows, np.abs(stats[name] - exact[name]), 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(err > 0, err / bound[name], 0.0)
            best = out[name]
            best["diff"] = max(best["diff"], float(err.max()))
            best["bound"] = max(best["bound"], float(np.where(rows, bound[name], 0.0).max()))
            where = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
            if ratio[where] > best["ratio"]:
                doc, head, query = (int(i) for i in where)
                best.update(
                    ratio=float(ratio[where]),
                    at=(doc, layer, head, query),
                    at_diff=float(err[where]),
                    at_bound=float(bound[name][where]),
                    at_s=float(exact["sink_mass"][where]),
                )
        high = content & (exact["sink_mass"] > 0.99)
        out.setdefault("high_rows", 0)
        out["high_rows"] += int(high.sum())
    return out


def drift(model, ids, kernel):
    """Largest difference between two whole captures (each its own forward)."""
    import numpy as np
    import torch

    from attncoda.capture import capture

    with torch.inference_mode():
        exact = capture(model, ids, record_rows="none")
        fast = capture(model, ids, record_rows="none", method="fast", kernel=kernel)
    found = {}
    for name in QUANTITIES:
        err = np.abs(getattr(fast, name) - getattr(exact, name))
        if name == "content_entropy":
            err = np.where(exact.has_content, err, 0.0)
        found[name] = float(err.max())
    return found


def table(rows) -> str:
    lines = [
        f"{'model':8} {'L':>5} {'docs':>4} {'quantity':16} {'max |diff|':>10} {'max bound':>10} "
        f"{'closest: diff / bound':>24}  at (doc, layer, head, query), s   whole-capture diff"
    ]
    for row in rows:
        for name in QUANTITIES:
            r = row["sweep"][name]
            closest = f"{r['at_diff']:.2e} / {r['at_bound']:.2e}"
            whole = row["drift"].get(name)
            lines.append(
                f"{row['model']:8} {row['length']:5d} {row['docs']:4d} {name:16} "
                f"{r['diff']:10.2e} {r['bound']:10.2e} {closest:>24}  {r['at']}, "
                f"s = {r['at_s']:.3f}   {'' if whole is None else f'{whole:.2e}'}"
            )
        lines.append(
            f"{'':8} {'':5} {'':4} rows with s > 0.99 (and content): {row['sweep']['high_rows']}"
        )
    return "\n".join(lines)


def record(path: Path, started, seconds, command, text, kernel) -> None:
    from _machine import machine

    section = "\n".join(
        [
            TITLE,
            "",
            f"Written by `{command}`; {started.strftime('%Y-%m-%d %H:%M UTC')} "
            f"({seconds / 60:.1f} minutes); {machine()}; kernel `{kernel}`. Each row of the "
            "table is the worst",
            "case over every row, head and layer of one batch (the corpus window first, doc 0,",
            "then random-token documents), the bound the per-row `difference_bounds`",
            '(docs/design.md, "Error bounds"); the whole-capture difference (two forwards) is',
            "measured up to L = --drift-max (1024 by default). Measured, not asserted.",
            "",
            "```",
            text.rstrip(),
            "```",
            "",
        ]
    )
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if TITLE in old:
        head, rest = old.split(TITLE, 1)
        tail = rest.split("\n## ", 1)
        old = head + ("## " + tail[1] if len(tail) > 1 else "")
        old = old.rstrip("\n") + "\n\n" if old.strip() else ""
    else:
        old = old.rstrip("\n") + "\n\n" if old.strip() else ""
    path.write_text(old + section, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--lengths", default="1024,4096")
    parser.add_argument("--random", type=int, default=20, help="random documents at L <= 1024")
    parser.add_argument("--random-long", type=int, default=2, help="random documents above")
    parser.add_argument("--drift-max", type=int, default=1024, help="whole captures up to L")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kernel", default="auto", help="the CPU kernel: auto, cpp or sdpa")
    parser.add_argument(
        "--record",
        nargs="?",
        const=str(Path(__file__).resolve().parent / "RESULTS.md"),
        help="write the table into bench/RESULTS.md (its own section)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch

    from attncoda.capture.kernels import registry
    from attncoda.models.load import load_model

    kernel = registry.resolve_kernel(args.kernel, "cpu")
    print(f"kernel: {kernel}", flush=True)
    torch.set_num_threads(args.threads)
    started, clock = datetime.now(timezone.utc), time.perf_counter()
    rows = []
    loaded = {}
    command = " ".join(["python bench/fast_bounds.py", *(argv or sys.argv[1:])])
    for length in (int(x) for x in args.lengths.split(",")):
        for spec in args.models.split(","):
            if spec not in loaded:
                loaded[spec] = load_model(spec)[:2]
            model, tokenizer = loaded[spec]
            n_random = args.random if length <= 1024 else args.random_long
            ids = inputs(tokenizer, length, n_random, seed=length)
            t0 = time.perf_counter()
            found = sweep(model, ids, kernel)
            whole = drift(model, ids, kernel) if length <= args.drift_max else {}
            rows.append(
                {"model": spec, "length": length, "docs": len(ids), "sweep": found, "drift": whole}
            )
            print(table(rows[-1:]), f"({time.perf_counter() - t0:.0f} s)", flush=True)
            if args.record:  # after every row, so an interrupted sweep keeps what it measured
                seconds = time.perf_counter() - clock
                record(Path(args.record), started, seconds, command, table(rows), kernel)
    text = table(rows)
    print(text)
    if args.record:
        print(f"recorded in {args.record}")
    from _targets import verdict

    # The target: every measured difference within its row's bound (measured / bound <= 1).
    return verdict(
        [],
        [
            f"{row['model']} L={row['length']} {name}: {got['ratio']:.3g} of its bound"
            for row in rows
            for name in QUANTITIES
            if (got := row["sweep"][name])["ratio"] > 1.0
        ],
    )


if __name__ == "__main__":
    raise SystemExit(main())
