"""A benchmark that misses says so: bench/gpu.py exits 1 and names each part that failed (a
``pytest -m gpu`` that fails, a first-use check, a run that differs from the CPU's, a speed
ratio over its target), and so does a benchmark whose target is missed. The GPU script
itself needs a GPU (or ``--cpu-fallback``, a smoke run), so its verdict is tested on
summaries, and once end to end with its tests part made to fail."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu():
    return _bench("gpu")


def test_an_unknown_part_is_refused(gpu):
    assert gpu._parts("tests, speed") == ("tests", "speed")
    with pytest.raises(SystemExit, match="unknown part"):
        gpu._parts("tests,sped")


def _passing() -> dict:
    ran = {"returncode": 0, "seconds": 1.0, "device": "cuda", "tail": []}
    return {
        "pytest_gpu": {"returncode": 0, "seconds": 1.0, "tail": ["17 passed"]},
        "self_check": {"bfloat16 d128 causal": {"status": "ok", "s": 1.0}},
        "experiments": {
            "label": "cuda",
            "cuda": {"reproduce": dict(ran)},
            "cpu": {"reproduce": {**ran, "device": "cpu"}},
            "compared": {"reproduce": {"same": True, "lines": ["same evidence ..."]}},
        },
        "models": {
            "llama3-8b": {
                "L=8192": {"fused_over_sdpa": 1.1, "fused_peak_over_sdpa": 1.05},
            }
        },
    }


def test_a_run_whose_every_part_passed_has_no_failure(gpu):
    assert gpu.failures(_passing()) == []


@pytest.mark.parametrize(
    ("part", "edit", "named"),
    [
        ("tests", lambda s: s["pytest_gpu"].update(returncode=1), "tests (pytest -m gpu exit 1)"),
        ("checks", lambda s: s["self_check"]["bfloat16 d128 causal"].update(status="mismatch"),
         "checks (1 not ok: bfloat16 d128 causal)"),
        ("experiments", lambda s: s["experiments"]["cpu"]["reproduce"].update(returncode=1),
         "experiments (reproduce on cpu exit 1)"),
        ("experiments", lambda s: s["experiments"]["compared"]["reproduce"].update(
            same=False, lines=["different: 1 of 16 tables"]),
         "experiments (reproduce: different: 1 of 16 tables)"),
        ("speed", lambda s: s["models"]["llama3-8b"]["L=8192"].update(fused_over_sdpa=1.42),
         "speed (llama3-8b L=8192 fused/SDPA 1.42 > 1.15)"),
        ("speed", lambda s: s["models"]["llama3-8b"]["L=8192"].update(fused_peak_over_sdpa=1.3),
         "speed (llama3-8b L=8192 peak fused/SDPA 1.30 > 1.15)"),
    ],
)  # fmt: skip
def test_each_part_that_fails_is_named(gpu, part, edit, named):
    summary = _passing()
    edit(summary)
    assert gpu.failures(summary) == [named]


def test_the_cpu_fallback_speed_is_a_smoke_run_not_figures(gpu):
    summary = _passing()
    summary["models"]["llama3-8b"]["L=8192"]["fused_over_sdpa"] = 9.0
    assert gpu.failures(summary, figures=False) == []


def test_the_script_exits_non_zero_when_a_part_fails(tmp_path):
    # The tests part's pytest gets an option it does not know: it fails as a usage error
    # (exit 4), and the script must say so and exit 1.
    env = {**os.environ, "PYTEST_ADDOPTS": "--no-such-option-here"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--cpu-fallback", "--parts", "tests",
         "--out", str(tmp_path / "summary.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAILED: tests (pytest -m gpu exit 4)" in done.stdout


def test_a_benchmark_whose_target_is_missed_exits_non_zero(monkeypatch, capsys):
    # The exact capture against the eager floor at L = 128 and 256 (the quick lengths),
    # measured for real, against a target no capture meets.
    long_bench = _bench("long_bench")
    monkeypatch.setattr(long_bench, "EXACT_TARGET", 0.01)
    assert long_bench.main(["--quick", "--only", "exact", "--repeats", "1", "--threads", "1"]) == 1
    out = capsys.readouterr().out
    assert "MISSED: exact capture / eager forward, smollm2 L=128" in out
