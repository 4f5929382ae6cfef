"""Workers benchmark: ``reproduce`` on 2 worker processes against 1, in one run.

``attncoda reproduce --models smollm2,minilm --experiments profile,flips,cluster --workers N``
for N = 1 then 2, each a fresh command (its start-up, the model loads and the units; the
models already joined and cached), into a fresh folder. Figures: each wall time, the CPU
share of each command (user + system over wall), ``ratio`` = the 2-worker wall time over
the 1-worker one (the target: at most 0.65), and ``tables_equal``: whether every table of
the two runs is the same, value for value. Timings are reported, never asserted.

Run: ``python bench/workers_bench.py`` (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _machine import machine  # noqa: E402

MODELS = "smollm2,minilm"
EXPERIMENTS = "profile,flips,cluster"
TARGET = 0.65


def _run(out: Path, workers: int) -> tuple[float, float]:
    """Wall seconds and CPU share of one ``reproduce`` command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "attncoda.cli",
            "reproduce",
            "--models",
            MODELS,
            "--experiments",
            EXPERIMENTS,
            "--workers",
            str(workers),
            "--out",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu / wall


def _same_tables(a: Path, b: Path) -> bool:
    import pandas as pd

    sys.path.insert(0, str(Path(__file__).parents[1] / "src"))
    from attncoda.store.runs import read_run_tables

    x, y = read_run_tables(a), read_run_tables(b)
    if sorted(x) != sorted(y):
        return False
    try:
        for name in x:
            if name != "units":  # its seconds differ from run to run
                pd.testing.assert_frame_equal(x[name], y[name], check_exact=True)
    except AssertionError:
        return False
    return True


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="attncoda-workers-") as folder:
        root = Path(folder)
        one, one_cpu = _run(root / "one", 1)
        two, two_cpu = _run(root / "two", 2)
        equal = _same_tables(root / "one", root / "two")
    print(f"machine: {machine()}")
    print(f"reproduce --models {MODELS} --experiments {EXPERIMENTS}")
    print(f"  --workers 1: {one:7.1f} s wall, {one_cpu:5.0%} CPU")
    print(f"  --workers 2: {two:7.1f} s wall, {two_cpu:5.0%} CPU")
    print(f"  ratio 2/1: {two / one:.2f} (target at most {TARGET}); tables_equal: {equal}")
    from _targets import verdict

    missed = [f"--workers 2 / 1 = {two / one:.2f} (target at most {TARGET})"] * (two / one > TARGET)
    return verdict([], [*missed, *(["the tables of 1 and 2 workers differ"] * (not equal))])


if __name__ == "__main__":
    raise SystemExit(main())
