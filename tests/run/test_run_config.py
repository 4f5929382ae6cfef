"""The run config: built once, typed and frozen, handed whole to every unit, and written to
the manifest as the JSON every run folder already holds."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from attncoda.capture.options import CaptureOptions
from attncoda.experiments.flips import Settings as FlipsSettings
from attncoda.run.compare import reference_run
from attncoda.run.config import DEMO_MODELS, Rows, RunConfig, run_config

REFERENCE = reference_run()


def test_the_reference_runs_config_is_what_the_demo_builds_and_reads_back():
    stored = json.loads((REFERENCE / "manifest.json").read_text())["config"]
    built = run_config(list(DEMO_MODELS))
    assert built.to_json() == stored  # the committed manifest's format, key for key
    read = RunConfig.from_json(stored)
    assert read == built and read.to_json() == stored
    # parsed once: each experiment's own Settings, the shared rows, the capture options
    assert read.settings["flips"] == FlipsSettings()
    assert read.rows == Rows() and read.options.sink == "first"
    assert pickle.loads(pickle.dumps(built)) == built  # worker processes and Ray get it whole


def test_every_part_of_a_config_reads_back_from_its_json(tmp_path):
    configs = [
        # a series the run trains, with the unseen runs beside it
        run_config(
            [], experiments=["collapse", "predictor"], settings={"train": {"retrain": True}}
        ),
        # attention files instead of models
        run_config(
            [], experiments=["flips"], attentions=[str(tmp_path / "a.npz")], tokens="ids.npy"
        ),
        # a device map with memory limits and a folder of its own, and the fast path's kernel
        run_config(
            ["smollm2"],
            experiments=["profile"],
            options=CaptureOptions(
                device_map="auto", max_memory={0: "2GiB"}, offload_folder=str(tmp_path)
            ),
        ),
        run_config(["smollm2"], experiments=["profile"], options=CaptureOptions(method="fast")),
    ]
    for config in configs:
        stored = json.loads(json.dumps(config.to_json()))  # as a manifest is read back
        assert RunConfig.from_json(stored) == config
        assert RunConfig.from_json(stored).to_json() == stored
    trained, given, placed, fast = configs
    assert trained.series is not None and trained.series.task == "bigram-backcopy"
    assert trained.series.unseen and trained.train is not None and trained.train.retrain
    assert given.attentions is not None and given.attentions.tokens == str(
        Path("ids.npy").resolve()
    )
    assert placed.options.max_memory == {"0": "2GiB"}
    assert fast.options.kernel != "auto"  # recorded as the kernel that runs here
