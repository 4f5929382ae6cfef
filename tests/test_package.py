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


def test_the_public_names_of_dir_are_all():
    """``dir(attncoda)``'s public names are ``__all__`` exactly, also once submodules are
    imported (each binds itself as an attribute of the package) and lazy names are cached in
    the package's globals: the package's ``__dir__`` lists ``__all__``, not its namespace,
    which also holds its own imports (``importlib``, ``REGISTRY``) and its subpackages."""
    result = _run(
        """
        import attncoda

        def public():
            return {name for name in dir(attncoda) if not name.startswith("_")}

        assert public() == set(attncoda.__all__), sorted(public() ^ set(attncoda.__all__))
        import attncoda.experiments.flips
        import attncoda.store

        attncoda.Result, attncoda.profile  # served lazily, then kept in the globals
        assert {"store", "experiments", "Result"} <= set(vars(attncoda))
        assert public() == set(attncoda.__all__), sorted(public() ^ set(attncoda.__all__))
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"


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


def test_core_dependencies_are_numpy_and_array_api_compat():
    import tomllib

    meta = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0] for d in meta["dependencies"])
    assert names == ["array-api-compat", "numpy"]
    extras = meta["optional-dependencies"]
    assert any(d.startswith("scipy") for d in extras["experiments"])
    assert any(d.startswith("scikit-learn") for d in extras["experiments"])


def test_the_mathematics_runs_without_scipy_sklearn_pandas_or_torch():
    # A finder first on sys.meta_path fails these imports as if they were not installed.
    result = _run(
        """
        import sys

        BLOCKED = ("scipy", "sklearn", "pandas", "pyarrow", "torch", "transformers")

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{name} is blocked")
                return None

        sys.meta_path.insert(0, Blocker())
        import numpy as np
        import attncoda as ac

        p = np.array([[0.7, 0.2, 0.1], [0.5, 0.25, 0.25]])
        lp = ac.log_probs(p)
        split = ac.entropy_split(lp, sink=0)
        assert np.allclose(split.total, -(p * np.log(p)).sum(-1), rtol=1e-12, atol=0)
        a = ac.aitchison_split(lp[0], lp[1], sink=0)
        assert np.isclose(a.total ** 2, a.sink ** 2 + a.content ** 2, rtol=1e-12)
        assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"
