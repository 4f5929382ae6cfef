"""The run's capture options reach the captures the runner makes for prune and collapse.

Prune and collapse never capture themselves: the runner captures prune's profiling windows
and each collapse checkpoint's windows with the run's options. ``--method fast`` must
therefore change their statistics in the last bits (the fast path's float32 rounding),
which a capture made by the exact path whatever the options would not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.capture.kernels import registry
from attncoda.capture.options import CaptureOptions
from attncoda.cli import main
from attncoda.run.reproduce import run_experiment

pytestmark = pytest.mark.slow

#: Heads' means of the statistics prune ranks by. Two whole captures (exact and fast, each
#: its own forward) differed by at most 2.2e-4 nats per row at 1024 tokens on Gemma 3
#: (docs/design.md, "Error bounds"); a mean over rows of 16 tokens of SmolLM2 is within
#: that, so 1e-3 nats (sink mass: 1e-4) leaves a margin and still catches a wrong model or
#: window (differences of 1e-2 and more).
ATOL = {"sink_mass": 1e-4, "entropy": 1e-3, "content_entropy": 1e-3, "sink_balance": 1e-3}


def _facts(out: Path, experiment: str) -> list[dict]:
    return [
        json.loads(done.read_text())["facts"]
        for done in sorted((out / "units" / experiment).glob("*/_done.json"))
    ]


def _assert_close_not_equal(exact: pd.DataFrame, fast: pd.DataFrame, keys: list[str]) -> None:
    """The same rows (by ``keys``), each statistic of :data:`ATOL` within its tolerance, and
    not all of them bit-equal."""
    exact = exact.sort_values(keys).reset_index(drop=True)
    fast = fast.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(exact[keys], fast[keys])
    differ = []
    for column, atol in ATOL.items():
        a, b = exact[column].to_numpy(np.float64), fast[column].to_numpy(np.float64)
        np.testing.assert_allclose(b, a, rtol=0, atol=atol, equal_nan=True, err_msg=column)
        differ.append(not np.array_equal(a, b, equal_nan=True))
    assert any(differ), "method fast gave statistics bit-equal to exact's: it captured exactly"


def test_prune_captures_its_profiling_windows_by_the_runs_method(tmp_path, capsys):
    tiny = [
        "--profile-docs", "2", "--eval-docs", "1", "--max-tokens", "16", "--ks", "1",
        "--channels", "full_entropy", "--orders", "high", "--n-boot", "1",
    ]  # fmt: skip
    runs = {"exact": ["--method", "exact"], "fast": ["--method", "fast", "--kernel", "sdpa"]}
    for method, options in runs.items():
        assert main(["prune", "smollm2", *tiny, *options, "--out", str(tmp_path / method)]) == 0
    capsys.readouterr()
    heads = {
        m: pd.read_parquet(tmp_path / m / "tables" / "prune_heads.parquet") for m in runs
    }
    _assert_close_not_equal(heads["exact"], heads["fast"], ["layer", "head"])
    for method, kernel in (("exact", None), ("fast", "sdpa")):
        out = tmp_path / method
        manifest = json.loads((out / "manifest.json").read_text())
        config = manifest["config"]
        assert (config["method"], config.get("kernel")) == (method, kernel)
        (facts,) = _facts(out, "prune")
        forward = "eager" if kernel is None else f"fast:{kernel}"
        # The manifest's model facts name the forward the capture followed.
        assert manifest["model_info"]["smollm2@-"]["forward"] == forward
        assert facts["captured"] == {
            "windows": 2, "method": method, "kernel": kernel, "forward": forward
        }  # fmt: skip
        assert (facts["summary"]["method"], facts["summary"]["kernel"]) == (method, kernel)


def test_collapse_captures_each_checkpoint_by_the_runs_method(tmp_path):
    checkpoints = {"exact": {}, "fast": {}}
    for method in checkpoints:
        out = tmp_path / method
        run_experiment(
            "collapse",
            [],
            out,
            series="bigram-backcopy@step0,step2000",
            settings={"collapse": {"docs": 2, "max_tokens": 32}},
            options=CaptureOptions(method=method),
            progress=False,
        )
        checkpoints[method] = pd.read_parquet(out / "tables" / "collapse_checkpoints.parquet")
        # The fast path's kernel on a CPU: cpp where it can be built, else sdpa.
        kernel = None if method == "exact" else registry.resolve_kernel("auto", "cpu")
        facts = _facts(out, "collapse")
        forward = "eager" if kernel is None else f"fast:{kernel}"
        assert [f["captured"] for f in facts] == [
            {"windows": 2, "method": method, "kernel": kernel, "forward": forward}
        ] * 2
        assert [f["summary"]["method"] for f in facts] == [method] * 2
    checkpoints = {
        m: t.rename(columns={"mean_sink_mass": "sink_mass"}) for m, t in checkpoints.items()
    }
    keys = ["revision", "step", "level", "layer", "head"]
    _assert_close_not_equal(checkpoints["exact"], checkpoints["fast"], keys)


def test_capture_ids_captures_by_the_options_and_refuses_ids_outside_the_vocabulary():
    from attncoda.capture import capture_windows
    from attncoda.run.captured import capture_ids
    from tiny_models import VOCAB, tiny

    model = tiny("llama", seed=0, positions=64, eager=True)
    wins = [[1, 2, 3, 4, 5], [6, 7, 8]]
    options = CaptureOptions(method="fast", kernel="sdpa", sink="0,1", seed=3)
    cap = capture_ids((model, None), wins, options)
    want = capture_windows(
        model, wins, record_rows="none", method="fast", kernel="sdpa", sink="0,1", seed=3
    )
    assert (cap.method, cap.kernel, cap.sink_spec, cap.seed) == ("fast", "sdpa", "0,1", 3)
    np.testing.assert_array_equal(cap.entropy, want.entropy)
    message = (
        f"the model has a vocabulary of {VOCAB} tokens, but the windows hold token id {VOCAB}: "
        "make the windows with this model's tokenizer"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        capture_ids((model, None), [[1, VOCAB]], options)
