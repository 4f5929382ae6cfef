"""The committed outputs hold under another CPU's code path, on this machine.

Float rounding differs between CPUs: an Intel Xeon's MKL takes AVX-512 kernels that an AMD
EPYC's does not, ATen's vectorised kernels follow the CPU's capability, and the thread count
changes how sums are split. On an Intel Xeon with one thread, the tutorial's count of
near-ties moved from 55 to 54, which a test that compared digits failed. So the tests of
committed outputs (the reference run's tables made again from the shipped checkpoints, the
tutorial notebook, the README's headline) run here again under other code paths, each in a
process of its own, and must pass under each: they compare through the rule of
``attncoda compare`` (docs/design.md, "The same evidence, by one rule").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The committed-output tests.
COMMITTED = (
    "tests/test_results.py::test_the_shipped_checkpoints_give_the_reference_tables",
    "tests/test_results.py::test_the_readme_headline_is_the_reference_runs",
    "tests/test_docs.py::test_the_tutorial_notebook_runs_and_prints_its_committed_outputs",
)
#: Code paths other than this machine's own: MKL without its AVX-512 kernels on one thread
#: (what an AMD EPYC's MKL takes, on an Intel Xeon), and ATen's portable kernels on two.
CODE_PATHS = {
    "mkl-avx2-1-thread": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "threads": "1"},
    "aten-default-2-threads": {"ATEN_CPU_CAPABILITY": "default", "threads": "2"},
}


def _environment(path: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop("PYTEST_CURRENT_TEST", None)
    threads = path["threads"]
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = threads
    env.update({k: v for k, v in path.items() if k != "threads"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return env


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CODE_PATHS))
def test_the_committed_outputs_hold_under_another_code_path(name):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(
        [*command, *COMMITTED],
        cwd=ROOT,
        env=_environment(CODE_PATHS[name]),
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
    assert done.returncode == 0, f"{name}:\n{tail}"
    assert f"{len(COMMITTED)} passed" in tail, tail
