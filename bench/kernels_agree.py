"""Two kernels of one machine stand in for two devices: bench/gpu.py's experiment runs made
on the CPU with ``--method exact`` and with ``--method fast``, every table compared as
bench/gpu.py compares a CUDA run with the CPU's (float32 rounding, plus each ratio's and each
count's stated bound: docs/design.md, "Verdicts and ratios within rounding").

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
    tables = {}
    for name in gpu.RUNS:
        for table, got in gpu.compare_runs(folder / "exact" / name, folder / "fast" / name).items():
            tables[f"{name}/{table.removesuffix('.parquet')}"] = got
    equal = sum(bool(t.get("equal")) for t in tables.values())
    exits = {m: {n: r["returncode"] for n, r in ran[m].items()} for m in METHODS}
    worst = max(tables.items(), key=lambda kv: kv[1].get("max_abs_diff") or 0.0)
    summary = {
        "folder": str(folder),
        "exits": exits,
        "tables": tables,
        "tolerance": {"rtol": gpu.RTOL, "atol": gpu.ATOL},
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    for name, got in tables.items():
        if not got.get("equal"):
            print(f"  {name}: {got.get('why') or got.get('examples')}")
    ok = all(code == 0 for codes in exits.values() for code in codes.values())
    print(
        f"SUMMARY kernels: exact vs fast on the CPU, {equal}/{len(tables)} tables equal within "
        f"rounding and stated bounds; runs exit {exits}; largest difference "
        f"{worst[1].get('max_abs_diff'):.3g} ({worst[0]}, {worst[1].get('column')}); "
        f"{summary['seconds']:.0f} s"
    )
    return 0 if ok and equal == len(tables) else 1


if __name__ == "__main__":
    sys.exit(main())
