"""Device, dtype and method options: validation, the run config, head distances on torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.options import DEVICES, DTYPES, CaptureOptions, resolve_device  # noqa: E402
from attncoda.experiments.contract import DocRows, HeadRows  # noqa: E402
from attncoda.experiments.flips import document_sums, flips  # noqa: E402
from attncoda.run.config import RunConfig, run_config  # noqa: E402


def test_resolve_device(monkeypatch):
    assert DEVICES == ("cpu", "cuda", "auto")
    assert resolve_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    with pytest.raises(AttncodaError, match=r"device 'cuda' asked for, but torch sees no GPU"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda") == "cuda"
    with pytest.raises(AttncodaError, match=r"unknown device 'tpu': use one of cpu, cuda, auto"):
        resolve_device("tpu")


def test_auto_is_the_default_device_and_cuda_without_a_gpu_is_refused_at_once(monkeypatch):
    import inspect

    import attncoda as ac
    from attncoda.models.load import load_model

    assert CaptureOptions().device == "auto"
    assert inspect.signature(ac.profile).parameters["device"].default == "auto"
    assert inspect.signature(load_model).parameters["device"].default is None  # None: auto
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(AttncodaError, match=r"^device 'cuda' asked for, but torch sees no GPU"):
        CaptureOptions(device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert CaptureOptions(device="cuda").device == "cuda"


def test_dtype_option():
    assert "bfloat16" in DTYPES and CaptureOptions().dtype is None
    assert CaptureOptions(dtype="float16").dtype == "float16"
    with pytest.raises(AttncodaError, match=r"^unknown dtype 'int8': use one of float32, "):
        CaptureOptions(dtype="int8")


def test_run_config_records_a_device_map_and_loads_by_it(tmp_path):
    plain = run_config(["smollm2"], experiments=["profile"])
    assert not {"device_map", "max_memory", "offload_folder"} & set(plain.to_json())
    config = run_config(
        ["smollm2"],
        experiments=["profile"],
        options=CaptureOptions(device_map="auto", max_memory={0: "2GiB"}),
    )
    stored = config.to_json()
    assert (stored["device_map"], stored["max_memory"]) == ("auto", {"0": "2GiB"})
    assert "offload_folder" not in stored and stored["device"] == "auto"
    given = run_config(
        ["smollm2"],
        experiments=["profile"],
        options=CaptureOptions(device_map="auto", offload_folder="."),
    )
    assert given.to_json()["offload_folder"] == str(Path.cwd().resolve())
    # a run loads by its map, the disk's weights in its own folder unless one is given
    options = config.options_at(tmp_path / "run")
    assert options.offload_folder == str(tmp_path / "run" / "offload")
    assert options.max_memory == {"0": "2GiB"}
    assert given.options_at(tmp_path / "run").offload_folder == str(Path.cwd().resolve())
    assert plain.options_at(tmp_path / "run") == plain.options
    assert plain.options.device_map is None and plain.options.offload_folder is None
    with pytest.raises(AttncodaError, match=r"--device cuda and --device-map auto both say"):
        run_config(["smollm2"], options=CaptureOptions(device="cuda", device_map="auto"))
    # A config written before auto was the default says cpu beside its map: still read.
    old = RunConfig.from_json({**stored, "device": "cpu"})
    assert old.options_at(tmp_path).device == "cpu"
    with pytest.raises(AttncodaError, match=r"max_memory=\{0: '1GiB'\} needs a device map"):
        run_config(["smollm2"], options=CaptureOptions(max_memory={0: "1GiB"}))
    with pytest.raises(AttncodaError, match=r"unknown device_map 'everywhere'"):
        run_config(["smollm2"], options=CaptureOptions(device_map="everywhere"))


def test_run_config_records_device_dtype_and_method():
    config = run_config(["smollm2"], experiments=["profile"]).to_json()
    assert (config["device"], config["dtype"], config["method"]) == ("auto", None, "auto")
    config = run_config(
        ["smollm2"],
        experiments=["profile"],
        options=CaptureOptions(device="cpu", dtype="bfloat16", method="fast"),
    ).to_json()
    assert (config["device"], config["dtype"], config["method"]) == ("cpu", "bfloat16", "fast")
    with pytest.raises(AttncodaError, match=r"unknown device 'gpu'"):
        run_config(["smollm2"], options=CaptureOptions(device="gpu"))
    with pytest.raises(AttncodaError, match=r"unknown method 'quick'"):
        run_config(["smollm2"], options=CaptureOptions(method="quick"))
    with pytest.raises(AttncodaError, match=r"unknown dtype 'half'"):
        run_config(["smollm2"], options=CaptureOptions(dtype="half"))


def rows(seed=0, n_layers=2, n_heads=3, n=20, docs=3):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(docs):
        mask = np.tril(np.ones((n, n), dtype=bool))
        z = rng.normal(size=(n_layers * n_heads, n, n)) * 2
        z[:, :, 0] += rng.uniform(1, 5, size=(n_layers * n_heads, 1))
        z = np.where(mask, z, -np.inf)
        logp = z - np.logaddexp.reduce(z, axis=-1, keepdims=True)
        out.append(DocRows(logp=logp.astype(np.float32), key_mask=mask, sink=(0,)))
    return HeadRows("synthetic", n_layers, n_heads, tuple(out), np.zeros(n_layers * n_heads))


@pytest.mark.parametrize("metric", ["cosine", "jsd", "entropy_gap", "hellinger", "tv"])
def test_head_distances_on_torch_equal_numpy(metric, monkeypatch):
    # device="cuda" sends the rows to torch on that device; torch on the CPU stands in for
    # it here (the same code path, another array namespace).
    head_rows = rows()
    for convention in ("keep", "drop"):
        ref = document_sums(head_rows, metric, convention)
        got = document_sums(head_rows, metric, convention, device="cpu")
        # float32 rows: the two namespaces round sums in another order (~1e-7 relative).
        np.testing.assert_allclose(got.sums, ref.sums, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(got.counts, ref.counts)
        # and the pooled distances within the two stated roundings
        assert (np.abs(got.distances - ref.distances) <= got.rounding + ref.rounding).all()


def _smallest_gap(d: np.ndarray) -> float:
    """The smallest ``|D[A, C] - D[A, B]|`` over every triplet (A; B, C) of distinct heads."""
    n = d.shape[0]
    gaps = [
        abs(d[a, c] - d[a, b])
        for a in range(n)
        for b in range(n)
        for c in range(b + 1, n)
        if a not in (b, c)
    ]
    return float(min(gaps))


@pytest.mark.parametrize("metric", ["cosine", "jsd", "entropy_gap", "hellinger", "tv"])
def test_flips_on_the_torch_path_agree_with_the_numpy_path(metric, monkeypatch):
    # flips(device="cpu") is numpy; any other torch device sends the rows to torch. A
    # torch.device("cpu") object takes the torch path on this machine, so the path a GPU
    # takes runs here end to end, with torch's CPU kernels in place of CUDA's.
    import attncoda.experiments.flips._sums as flips_module  # where document sums are made

    seen: list[str] = []
    real = flips_module.head_distances

    def observed(logp, *args, **kwargs):
        seen.append(type(logp).__module__.split(".")[0])
        return real(logp, *args, **kwargs)

    monkeypatch.setattr(flips_module, "head_distances", observed)
    head_rows = rows()  # its closest triplet is 3.9e-4 of max|D| from a tie, in every metric
    numpy_side = flips(head_rows, [metric], n_boot=5)
    assert set(seen) == {"numpy"}
    seen.clear()
    torch_side = flips(head_rows, [metric], n_boot=5, device=torch.device("cpu"))
    assert set(seen) == {"torch"} and len(seen) == 2 * len(head_rows.docs)  # keep and drop
    for convention in ("keep", "drop"):
        ref = numpy_side.distances[(metric, convention)]
        got = torch_side.distances[(metric, convention)]
        # float32 rows summed in another order by the two namespaces: ~1e-7 relative.
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
        # The verdicts can only agree when no triplet sits closer to a tie than those
        # differences: checked, so that the equal counts below are a consequence, not luck.
        scale = np.abs(ref).max()
        assert _smallest_gap(ref) > 2 * (1e-5 * scale + 1e-7) + numpy_side.tol * scale
    columns = ["n_heads", "n_triplets", "n_ties", "flips", "flip_rate"]
    assert torch_side.table[columns].equals(numpy_side.table[columns])
    assert (torch_side.n_docs, torch_side.n_rows) == (numpy_side.n_docs, numpy_side.n_rows)


def test_a_ray_task_asks_for_a_gpu_when_the_run_can_use_one():
    from attncoda.run.ray_tasks import task_gpus

    stored = run_config(["smollm2"], experiments=["profile"]).to_json()

    def config(**options):  # read as a manifest records it: cuda needs no GPU here
        return RunConfig.from_json({**stored, **options})

    with_gpu, without = {"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0}
    assert task_gpus(config(device="auto"), with_gpu) == 1
    assert task_gpus(config(device="cuda"), with_gpu) == 1
    assert task_gpus(config(device="cpu"), with_gpu) == 0  # the run asked for the CPU
    assert task_gpus(config(device="auto"), without) == 0
    assert task_gpus(config(device="cpu", device_map="auto"), with_gpu) == 1
    assert task_gpus(config(device="cpu", device_map="auto"), without) == 0
