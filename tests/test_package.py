"""The package as a user meets it: a light import, a resolvable __all__, the demo command."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_import_leaves_torch_and_transformers_out():
    result = _run(
        """
        import sys
        import attncoda
        heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
        print("HEAVY=" + ",".join(heavy))
        """
    )
    assert result.returncode == 0, result.stderr
    assert "HEAVY=\n" in result.stdout or result.stdout.strip() == "HEAVY=", result.stdout


def test_every_public_name_resolves():
    result = _run(
        """
        import attncoda
        missing = [n for n in attncoda.__all__ if not hasattr(attncoda, n)]
        assert not missing, missing
        assert len(set(attncoda.__all__)) == len(attncoda.__all__)
        for name in attncoda.__all__:
            assert getattr(attncoda, name) is not None, name
        print("OK", len(attncoda.__all__))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK")


def test_coda_names_are_exported_at_top_level():
    import attncoda
    import attncoda.coda

    for name in attncoda.coda.__all__:
        assert name in attncoda.__all__
        assert getattr(attncoda, name) is getattr(attncoda.coda, name)


def test_demo_command_prints_the_three_views():
    result = subprocess.run(
        [sys.executable, "-m", "attncoda.cli", "demo", "--example-only"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for word in ("keep", "drop", "aitchison"):
        assert word in result.stdout, word


def test_console_script_demo():
    script = Path(sys.executable).with_name("attncoda")
    if not script.exists():
        pytest.skip("the attncoda console script is not installed beside this interpreter")
    result = subprocess.run(
        [str(script), "demo", "--example-only"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "aitchison" in result.stdout
