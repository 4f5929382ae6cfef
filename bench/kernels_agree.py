"""Two kernels of one machine stand in for two devices: bench/gpu.py's experiment runs made
on the CPU with ``--method exact`` and with ``--method fast``, held to each other by
:func:`attncoda.compare`, as bench/gpu.py holds a CUDA run to the CPU's (each column by its
rule: docs/design.md, "The same evidence, by one rule").

    PYTHONPATH=src python bench/kernels_agree.py [--runs DIR] [--out kernels-agree.json]

The exact path computes each layer's scores and a float32 log-softmax; the fast path is the
fused kernel (``cpp`` on the CPU). Their statistics differ at float32 rounding, the level at
which a GPU and the CPU differ, so the same verdicts, the same nulls and numbers within their
bounds here are what a GPU run is held to. Prints one line per run and one summary line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("exact", "fast")


def _gpu_module():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", help="where the run folders go (default: a new temporary one)")
    parser.add_argument("--out", default="kernels-agree.json", help="the JSON summary")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = parser.parse_args(argv)
    gpu = _gpu_module()
    folder = Path(args.runs or tempfile.mkdtemp(prefix="attncoda-kernels-")).resolve()
    started = time.perf_counter()
    ran = {}
    for method in METHODS:
        runs = {name: (*argv_, "--method", method) for name, argv_ in gpu.RUNS.items()}
        ran[method] = gpu.run_half("cpu", runs, folder / method, args.timeout)
    from attncoda import compare

    compared = {name: compare(folder / "fast" / name, folder / "exact" / name) for name in gpu.RUNS}
    exits = {m: {n: r["returncode"] for n, r in ran[m].items()} for m in METHODS}
    summary = {
        "folder": str(folder),
        "exits": exits,
        "compared": {name: found.lines() for name, found in compared.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    for name, found in compared.items():
        print(f"  {name}: " + "\n    ".join(found.lines()))
    ok = all(code == 0 for codes in exits.values() for code in codes.values())
    same = all(found.same for found in compared.values())
    print(
        f"SUMMARY kernels: exact vs fast on the CPU, "
        f"{sum(f.same for f in compared.values())}/{len(compared)} runs the same evidence; "
        f"runs exit {exits}; {summary['seconds']:.0f} s"
    )
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
