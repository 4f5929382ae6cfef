"""The example scripts of docs/examples run as a user runs them, and say what they promise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def test_bring_your_own_prints_flip_rates_and_saves_the_profile(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "bring_your_own.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "flip rate" in line]
    assert [line.split()[0] for line in lines] == [
        "cosine",
        "jsd",
        "entropy_gap",
        "hellinger",
        "tv",
    ]
    rates = [float(line.split()[3].rstrip("%")) for line in lines]
    assert all(0.0 < rate < 100.0 for rate in rates)
    png = tmp_path / "profile.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in done.stdout


def _run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_transformer_lens_records_the_intervened_bridge_and_prints_flip_rates():
    pytest.importorskip("transformer_lens")
    out = _run_example("transformer_lens.py")
    assert "recorded 2 passes, 30 layers x 9 heads" in out
    rates = [float(line.split()[3].rstrip("%")) for line in out.splitlines() if "flip rate" in line]
    assert len(rates) == 5 and all(0.0 <= rate <= 100.0 for rate in rates)


def test_nnsight_profiles_a_trace_with_an_intervention():
    pytest.importorskip("nnsight")
    out = _run_example("nnsight.py")
    masses = [float(line.split()[-1]) for line in out.splitlines() if "sink mass" in line]
    assert len(masses) == 30 and all(0.0 < mass < 1.0 for mass in masses)
