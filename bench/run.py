"""Run every attncoda benchmark: ``python bench/run.py [--quick] [--threads N] [--profile]``.

Prints a table (name, ours, reference, ratio, target, met?) and, last, the same figures as
one line of JSON. Timings are reported, never asserted.

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
from pathlib import Path

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
    parser.add_argument("--only", choices=("coda", "capture"), help="run one part (default: both)")
    parser.add_argument(
        "--long", action="store_true", help="also measure capture memory at L=8192 (minutes)"
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
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} cpus, threads={threads}, quick={args.quick}, "
        f"repeats={args.repeats}"
    )
    results = []
    if args.only in (None, "coda"):
        results = coda_bench.run(quick=args.quick, repeats=args.repeats)
        print(coda_bench.table(results))
        if args.profile:
            print(coda_bench.profile())
    captured = []
    if args.only in (None, "capture"):
        import capture_bench

        captured = capture_bench.run(
            quick=args.quick, repeats=args.repeats, threads=max(args.threads, 1), long=args.long
        )
        print(capture_bench.table(captured))
    print(
        json.dumps(
            {
                "bench": "attncoda",
                "quick": args.quick,
                "threads": threads,
                "results": [r.as_dict() for r in results],
                "capture": captured,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
