"""The demo's threshold units made again under ATen's portable kernels hold the reference run's
evidence (docs/design.md, "The same evidence, by one rule").

A file of its own, apart from tests/test_code_paths.py, so that the suite's two workers run
the two long subprocesses at once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from test_code_paths import ROOT, _environment

#: The units the suite makes again under ATen's portable kernels and holds to the reference
#: run's rows of the same units: every result decided at a threshold of one embedded model
#: (the tie tolerance, the bins, the top-k cut, the predictor's interval ends).
UNITS = ("flips", "safety", "prune", "predictor")
#: The embedded model of those units: SmolLM2, the demo's causal model whose prune unit is
#: the shorter (Gemma 3's evaluates a 262,144-row vocabulary head).
MODEL = "smollm2"
#: Prune's channels here: the sink's share and the content's entropy, ranked from either end
#: (9 of the unit's 21 perplexity evaluations, each row independent of the others; the
#: other three channels under every code path are bench/same_evidence.py's).
CHANNELS = ("sink_mass", "content_entropy")
#: The run, at the demo's settings but prune's channels.
SCRIPT = """
import sys
from attncoda.run.reproduce import reproduce
reproduce([{model!r}], sys.argv[1], experiments={units!r}, workers=1, progress=False,
          settings={{"prune": {{"channels": {channels!r}}}}})
"""


def _reference_of_the_channels(folder):
    """The shipped reference with prune's rows of :data:`CHANNELS` (and the baseline)."""
    import pandas as pd

    from attncoda.run.compare import reference_run

    shutil.copytree(reference_run(), folder)
    path = folder / "tables" / "prune.parquet"
    prune = pd.read_parquet(path)
    prune[prune["channel"].isin(("none", *CHANNELS))].reset_index(drop=True).to_parquet(path)
    return folder


@pytest.mark.slow
def test_the_demos_threshold_units_are_the_reference_evidence_under_atens_portable_kernels(
    tmp_path,
):
    from attncoda import compare

    out = tmp_path / "run"
    script = SCRIPT.format(model=MODEL, units=list(UNITS), channels=list(CHANNELS))
    # One thread, as each of the demo's two workers runs while both are busy: the suite's
    # other worker keeps the other core (two threads here made both wait on each other).
    path = {"ATEN_CPU_CAPABILITY": "default", "threads": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        cwd=ROOT,
        env=_environment(path),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
    assert done.returncode == 0, tail
    found = compare(out, _reference_of_the_channels(tmp_path / "reference"), subset=True)
    assert found.same, "\n".join(found.lines())
    held = {t.table for t in found.tables}
    assert held >= {"flips", "safety", "safety_grid", "prune", "predictor"}, held
