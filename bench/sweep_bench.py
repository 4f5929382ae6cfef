"""Sweep benchmark P5: 8 units on 2 local Ray workers vs the same units in one process.

The units are ``profile`` and ``flips`` on four checkpoints (steps 2, 4, 8, 16) of a
``train-tiny`` model of size ``small`` (4 layers x 4 heads, 128 wide) trained here first (not
timed), with settings (:data:`SETTINGS`) that make each unit take seconds. Every run writes
into a fresh folder. Figures:

- ``in_process_s``: ``sweep`` without Ray (the units one after another in this process), the
  process warmed up first (torch, transformers and attncoda imported, one warm-up unit run on
  another checkpoint). Measured at torch's one thread and at one thread per core; the faster
  is the in-process figure (``in_process_threads`` says which).
- ``ray_with_startup_s``: ``sweep(ray_local=2)`` from nothing: starting Ray, its two worker
  processes importing torch / transformers / attncoda, the units, and shutting Ray down.
- ``ray_without_startup_s``: the same sweep on a Ray instance already started, whose two
  workers have run the warm-up unit (imports done): the units alone.
- ``ratio_with_startup`` = in-process / Ray with start-up; ``ratio_without_startup`` =
  in-process / Ray without start-up. The target (>= 1.6) is judged on the latter: start-up is
  paid once per sweep, while a real sweep has many more units than 8.

``tables_equal`` says whether every table of the Ray runs equals the in-process run's, value
for value. Timings are reported, never asserted.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The measured units' settings: about 1.5 s (profile) and 3 s (flips) a unit on one core.
SETTINGS: dict[str, dict[str, Any]] = {
    "profile": {"docs": 96, "max_tokens": 128},
    "rows": {"docs": 32, "max_tokens": 128},
    "flips": {"n_boot": 2000},
}
QUICK_SETTINGS: dict[str, dict[str, Any]] = {
    "profile": {"docs": 4, "max_tokens": 64},
    "rows": {"docs": 3, "max_tokens": 64},
    "flips": {"n_boot": 50},
}
EXPERIMENTS = ("profile", "flips")
TARGET = 1.6


def _checkpoints(folder: Path, quick: bool) -> tuple[list[str], str]:
    """Four measured checkpoints and one warm-up checkpoint of a small train-tiny model."""
    from attncoda.training.train import TrainConfig, train_tiny

    size = "tiny" if quick else "small"
    result = train_tiny(folder / "tt", TrainConfig(steps=16, size=size), progress=False)
    paths = [str(p) for p in result.checkpoints]
    return paths[-4:], paths[0]


def _same_tables(a: Path, b: Path) -> bool:
    import pandas as pd

    from attncoda.store.runs import read_run_tables

    x, y = read_run_tables(a), read_run_tables(b)
    if sorted(x) != sorted(y):
        return False
    try:
        for name in x:
            pd.testing.assert_frame_equal(x[name], y[name], check_exact=True)
    except AssertionError:
        return False
    return True


def _unit_seconds(out: Path) -> float:
    """Sum of the units' own compute times (``seconds`` in each ``_done.json``)."""
    import json

    return sum(
        float(json.loads(p.read_text())["facts"].get("seconds", 0.0))
        for p in (out / "units").rglob("_done.json")
    )


def bench_sweep(quick: bool = False) -> dict[str, Any]:  # long: the benchmark's steps, in order
    """P5 figures (see the module docstring) as a dict."""
    import torch

    from attncoda.run.sweep import sweep

    settings = QUICK_SETTINGS if quick else SETTINGS
    work = Path(tempfile.mkdtemp(prefix="attncoda-sweep-bench-"))
    try:
        models, warm = _checkpoints(work, quick)
        common: dict[str, Any] = {
            "experiments": EXPERIMENTS,
            "settings": settings,
            "progress": False,
        }
        # In this process: warm up (imports, one unit of another checkpoint), then time.
        sweep([warm], work / "warm-in-process", **common)
        default_threads = torch.get_num_threads()
        timings: dict[int, float] = {}
        for threads in sorted({1, os.cpu_count() or 1}) if not quick else [default_threads]:
            torch.set_num_threads(threads)  # each sweep loads its models anew (its own Loaded)
            start = time.perf_counter()
            sweep(models, work / f"in-process-{threads}", **common)
            timings[threads] = time.perf_counter() - start
        torch.set_num_threads(default_threads)
        best = min(timings, key=lambda t: timings[t])
        in_process = timings[best]

        # Ray from nothing: start-up, worker imports, units, shutdown.
        start = time.perf_counter()
        sweep(models, work / "ray-cold", ray_local=2, **common)
        ray_cold = time.perf_counter() - start

        # Ray already started, both workers warm: the units alone.
        import ray

        from attncoda.run.ray_tasks import connect

        start = time.perf_counter()
        connect(None, 2)
        try:
            # Two warm-up units at once, so that each of the two workers runs one.
            sweep([warm], work / "warm-ray", ray_local=2, **common)
            startup = time.perf_counter() - start
            start = time.perf_counter()
            sweep(models, work / "ray-warm", ray_local=2, **common)
            ray_warm = time.perf_counter() - start
        finally:
            ray.shutdown()
        unit_seconds = {
            "in_process": _unit_seconds(work / f"in-process-{best}"),
            "ray_with_startup": _unit_seconds(work / "ray-cold"),
            "ray_without_startup": _unit_seconds(work / "ray-warm"),
        }
        equal = _same_tables(work / "ray-cold", work / f"in-process-{best}") and _same_tables(
            work / "ray-warm", work / f"in-process-{best}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "name": "P5 sweep: in-process time / Ray time, 8 units, 2 local workers",
        "units": len(models) * len(EXPERIMENTS),
        "quick": quick,
        "cpus": os.cpu_count(),
        "in_process_s": in_process,
        "in_process_threads": best,
        "in_process_by_threads_s": {str(k): v for k, v in timings.items()},
        "ray_with_startup_s": ray_cold,
        "ray_without_startup_s": ray_warm,
        "ray_startup_and_warmup_s": startup,
        "ratio_with_startup": in_process / ray_cold,
        "ratio_without_startup": in_process / ray_warm,
        "target": f">= {TARGET} (without start-up)",
        "met": in_process / ray_warm >= TARGET,
        "tables_equal": equal,
        "unit_seconds_sum": unit_seconds,
    }


def table(result: dict[str, Any]) -> str:
    """The figures as aligned text."""
    r = result
    return "\n".join(
        [
            f"{r['name']}",
            f"  in-process            {r['in_process_s']:8.2f} s  (torch threads "
            f"{r['in_process_threads']}; by threads: "
            + ", ".join(f"{k}: {v:.2f} s" for k, v in r["in_process_by_threads_s"].items())
            + ")",
            f"  Ray, with start-up    {r['ray_with_startup_s']:8.2f} s  ratio "
            f"{r['ratio_with_startup']:.2f}",
            f"  Ray, without start-up {r['ray_without_startup_s']:8.2f} s  ratio "
            f"{r['ratio_without_startup']:.2f}  target {r['target']}  met={r['met']}",
            f"  (Ray start-up + worker warm-up: {r['ray_startup_and_warmup_s']:.2f} s; "
            f"tables equal to in-process: {r['tables_equal']})",
            "  (sum of the units' own compute times: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in r["unit_seconds_sum"].items())
            + ")",
        ]
    )


if __name__ == "__main__":
    figures = bench_sweep(quick="--quick" in sys.argv)
    print(table(figures))
