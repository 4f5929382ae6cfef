"""The demo's run under each CPU code path, held to the shipped reference run by
:func:`attncoda.compare` (docs/design.md, "The same evidence, by one rule").

    PYTHONPATH=src python bench/same_evidence.py [--paths plain,aten-default,...]
        [--runs DIR] [--reuse] [--out same-evidence.json]

Float rounding differs between CPUs: an Intel Xeon's MKL takes AVX-512 kernels an AMD
EPYC's does not, ATen's vectorised kernels follow ``ATEN_CPU_CAPABILITY``, the thread
count changes how sums split, and the exact and the fast path round differently. Each code
path makes the demo's run (``attncoda reproduce``, the demo's models and scale) in a process
of its own, and each run must be the same evidence as the reference. Prints, per path, the
comparison's summary and the largest share of its allowance each table used; exits 1 when
any path differs (or fails), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Each code path: the environment it adds and the arguments it adds to the demo's run.
PATHS: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "plain": ({}, ()),
    "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, ()),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, ()),
    "mkl-avx2": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, ()),
    "one-thread": ({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, ("--workers", "1")),
    "other-method": ({}, ()),  # the method the default does not take (:func:`_other_method`)
}


def _other_method() -> str:
    """The capture method a run takes when asked, other than the default one."""
    import inspect

    from attncoda.capture import capture

    default = inspect.signature(capture).parameters["method"].default
    return "exact" if default != "exact" else "fast"


def _run(name: str, folder: Path, timeout: float) -> dict:
    """The demo's run under code path ``name`` into ``folder``: its exit and seconds."""
    env, extra = PATHS[name]
    if name == "other-method":
        extra = ("--method", _other_method())
    command = [sys.executable, "-m", "attncoda.cli", "reproduce", "--out", str(folder), *extra]
    started = time.perf_counter()
    done = subprocess.run(
        command,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return {
        "command": " ".join([*(f"{k}={v}" for k, v in env.items()), *command[2:]]),
        "returncode": done.returncode,
        "seconds": round(time.perf_counter() - started, 1),
        "tail": done.stdout[-2000:] + done.stderr[-2000:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default=",".join(PATHS), help="comma list of code paths")
    parser.add_argument("--runs", help="where the run folders go (default: a new temporary one)")
    parser.add_argument(
        "--reuse", action="store_true", help="compare the run folders already in --runs"
    )
    parser.add_argument("--out", default="same-evidence.json", help="the JSON summary")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.paths.split(",") if n.strip()]
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        parser.error(f"unknown code path {unknown[0]!r}: use some of {', '.join(PATHS)}")
    folder = Path(args.runs or tempfile.mkdtemp(prefix="attncoda-paths-")).resolve()
    from attncoda import compare
    from attncoda.run.compare import reference_run

    summary: dict[str, dict] = {}
    differ = []
    for name in names:
        run = folder / name
        ran = {"returncode": 0} if args.reuse else _run(name, run, args.timeout)
        if ran["returncode"] != 0:
            differ.append(name)
            summary[name] = ran
            print(f"{name}: the run failed ({ran['returncode']}):\n{ran['tail']}")
            continue
        found = compare(run)
        shares = found.shares()
        summary[name] = {**ran, "lines": found.lines(), "shares": shares}
        if not found.same:
            differ.append(name)
        print(f"{name}: " + "\n  ".join(found.lines()))
        print("  largest share of its allowance, per table:")
        for table, share in sorted(shares.items()):
            print(f"    {table:24s} {share:.3g}")
    summary["reference"] = {"folder": str(reference_run())}
    Path(args.out).write_text(json.dumps(summary, indent=1, default=str))
    if differ:
        print(f"MISSED: not the same evidence under {', '.join(differ)}")
        return 1
    print(f"the same evidence under every code path ({len(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
