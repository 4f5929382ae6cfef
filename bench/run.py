"""Run every attncoda benchmark: ``python bench/run.py [--quick] [--threads N] [--profile]
[--only coda|capture|sweep] [--long] [--record [FILE]]``.

Prints a table (name, ours, reference, ratio, target, met?) and, last, the same figures as
one line of JSON, then ``MISSED: ...`` for each target missed. Timings are reported, never
asserted in tests; the exit status is 1 when a target is missed.

``--threads`` (default 1) caps the BLAS / OpenMP thread pools *before* numpy is imported.
The reference loops are single-threaded numpy, so one thread is the like-for-like setting;
it also keeps a shared or busy machine from oversubscribing its cores (a threaded OpenBLAS
matmul on 2 busy cores was measured ~50x slower than on one thread). ``--threads 0`` leaves
the libraries' defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from _machine import machine

THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (min is kept)")
    parser.add_argument(
        "--threads", type=int, default=1, help="BLAS/OpenMP threads (0: library default)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also print a cProfile breakdown of attncoda's side"
    )
    parser.add_argument(
        "--only",
        choices=("coda", "capture", "sweep", "long"),
        help="run one part (default: all)",
    )
    parser.add_argument(
        "--long-spec",
        default="gemma3",
        help="model of the long-context profile (default gemma3; SmolLM2 at L=8192 when it "
        "does not load)",
    )
    parser.add_argument(
        "--long", action="store_true", help="also measure capture memory at L=8192 (minutes)"
    )
    parser.add_argument(
        "--record",
        nargs="?",
        const=str(Path(__file__).resolve().parent / "RESULTS.md"),
        help="also write the figures, with the date and the machine, to a Markdown file "
        "(default bench/RESULTS.md)",
    )
    args = parser.parse_args(argv)
    if args.threads > 0:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(args.threads)

    # Imported only now, so that the thread settings above reach numpy's BLAS.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np

    import coda_bench

    threads = args.threads if args.threads > 0 else "default"
    started = datetime.now(timezone.utc)
    clock = time.perf_counter()
    setting = (
        f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} cpus, threads={threads}, quick={args.quick}, "
        f"repeats={args.repeats}, long={args.long}"
    )
    print(setting)
    tables: list[tuple[str, str]] = []
    results = []
    if args.only in (None, "coda"):
        results = coda_bench.run(quick=args.quick, repeats=args.repeats)
        tables.append(("P3, P4: coda (head_distances, clr)", coda_bench.table(results)))
        print(tables[-1][1])
        if args.profile:
            print(coda_bench.profile())
    captured = []
    if args.only in (None, "capture"):
        import capture_bench

        captured = capture_bench.run(
            quick=args.quick, repeats=args.repeats, threads=max(args.threads, 1), long=args.long
        )
        tables.append(("P1, P2: capture (SmolLM2)", capture_bench.table(captured)))
        print(tables[-1][1])
    longer: list[dict] = []
    if args.only in (None, "long"):
        import long_bench

        longer = long_bench.run(
            quick=args.quick,
            repeats=args.repeats,
            threads=max(args.threads, 1),
            long_spec=args.long_spec,
        )
        tables.append(("Section 9: long context and the flips unit", long_bench.table(longer)))
        print(tables[-1][1])
    swept = None
    if args.only in (None, "sweep"):
        import sweep_bench

        swept = sweep_bench.bench_sweep(quick=args.quick)
        tables.append(("P5: sweep on Ray", sweep_bench.table(swept)))
        print(tables[-1][1])
    figures = {
        "bench": "attncoda",
        "date": started.isoformat(timespec="seconds"),
        "quick": args.quick,
        "threads": threads,
        "results": [r.as_dict() for r in results],
        "capture": captured,
        "long": longer,
        "sweep": swept,
    }
    print(json.dumps(figures))
    if args.record:
        path = Path(args.record)
        text = _markdown(started, time.perf_counter() - clock, setting, argv, tables, figures)
        path.write_text(text + _kept_sections(path), encoding="utf-8")
        print(f"recorded in {path}")
    from _targets import verdict

    sweep_rows = [swept] if isinstance(swept, dict) else list(swept or [])
    return verdict([*results, *captured, *longer, *sweep_rows])


def _kept_sections(path: Path) -> str:
    """The section bench/fast_bounds.py writes into the file (its own run), kept as it was."""
    from fast_bounds import TITLE

    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if TITLE not in old:
        return ""
    section = old[old.index(TITLE) :].split("\n## ", 1)[0]
    return "\n" + section.rstrip("\n") + "\n"


def _markdown(started, seconds, setting, argv, tables, figures) -> str:
    command = " ".join(["python bench/run.py", *(argv if argv is not None else sys.argv[1:])])
    parts = [
        "# Benchmark results",
        "",
        f"Written by `{command}` (rerun it to replace this file). Ratios are measured against",
        "the reference in the same run; targets are in `bench/README.md`, with what explains",
        "the ones missed.",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')} ({seconds / 60:.1f} minutes)",
        f"- machine: {machine()}",
        f"- setting: {setting}",
        "",
    ]
    for title, text in tables:
        parts += [f"## {title}", "", "```", text.rstrip(), "```", ""]
    parts += ["## The same figures as JSON", "", "```json", json.dumps(figures, indent=1), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
