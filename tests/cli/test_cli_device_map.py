"""``--device-map`` on the command line: a run of a model placed over the CPU and the disk
records the map in its manifest and gives the tables of the model loaded whole; a bad
placement is one line, exit 2, and writes nothing."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from attncoda.cli import main

pytestmark = pytest.mark.slow

PROFILE = ["profile", "smollm2", "--docs", "1", "--max-tokens", "32"]


def test_profile_with_a_device_map_records_it_and_agrees_with_the_whole_model(tmp_path):
    from attncoda.store import read_json
    from attncoda.store.manifest import is_run_manifest

    whole, placed = tmp_path / "whole", tmp_path / "placed"
    assert main([*PROFILE, "--out", str(whole)]) == 0
    argv = [*PROFILE, "--device-map", "auto", "--max-memory", "cpu=200MB", "--out", str(placed)]
    assert main(argv) == 0
    manifest = read_json(placed / "manifest.json")
    assert is_run_manifest(manifest)
    assert manifest["config"]["device_map"] == "auto"
    assert manifest["config"]["max_memory"] == {"cpu": "200MB"}
    assert "device_map" not in read_json(whole / "manifest.json")["config"]
    done = next((placed / "units" / "profile").glob("*/_done.json"))
    where = read_json(done)["facts"]["model_info"]["device_map"]
    assert {"cpu", "disk"} <= set(where.values())  # 200 MB of CPU cannot hold 0.5 GB
    tables = [pd.read_parquet(f / "tables" / "profile_heads.parquet") for f in (whole, placed)]
    pd.testing.assert_frame_equal(tables[1], tables[0], check_exact=False, rtol=0, atol=1e-6)


BAD = [
    (
        ["--device-map", "everywhere"],
        "argument --device-map: invalid choice: 'everywhere' (choose from 'auto', 'balanced', "
        "'balanced_low_0', 'sequential')",
    ),
    (
        ["--device-map", "auto", "--device", "cuda"],
        "--device cuda and --device-map auto both say where models run: drop --device (the map "
        "places every module) or drop --device-map",
    ),
    (
        ["--max-memory", "0=2GiB"],
        "--max-memory 0=2GiB needs --device-map: add --device-map auto (or balanced, "
        "sequential), or drop --max-memory",
    ),
    (
        ["--offload-folder", "off"],
        "--offload-folder off needs --device-map: add --device-map auto (or balanced, "
        "sequential), or drop --offload-folder",
    ),
    (
        ["--device-map", "auto", "--max-memory", "0=lots"],
        "max_memory[0] = 'lots' is no memory size: give a positive number of bytes or a size "
        "such as '2GiB' or '500MB'",
    ),
    (
        ["--device-map", "auto", "--max-memory", "gpu=2GiB"],
        "max_memory key 'gpu' is no device: use a GPU index such as 0, 'cpu' or a device such "
        "as 'cuda:1'",
    ),
]


@pytest.mark.parametrize(("extra", "message"), BAD, ids=[" ".join(e) for e, _ in BAD])
def test_a_bad_placement_is_one_line_exit_2_and_writes_nothing(extra, message, tmp_path):
    out = tmp_path / "out"
    code = "import sys; from attncoda.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [sys.executable, "-c", code, "profile", "minilm", *extra, "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert done.stderr == f"attncoda: error: {message}\n"
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_api_takes_a_device_map_and_keeps_the_weights_it_offloads_in_the_run(tmp_path):
    import attncoda as ac
    from attncoda.store import read_json

    whole = ac.profile("minilm", docs=1, max_tokens=16, out=tmp_path / "whole")
    placed_map = {"embeddings": "disk", "encoder": "cpu", "pooler": "cpu"}
    placed = ac.profile("minilm", docs=1, max_tokens=16, device_map=placed_map, out=tmp_path / "p")
    config = read_json(tmp_path / "p" / "manifest.json")["config"]
    assert config["device_map"] == placed_map and config["device"] == "auto"
    assert (tmp_path / "p" / "offload").is_dir()  # the run's own folder, not the cwd
    pd.testing.assert_frame_equal(placed.table, whole.table, check_exact=False, rtol=0, atol=1e-6)
