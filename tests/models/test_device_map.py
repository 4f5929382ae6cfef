"""Models placed by a device map (docs/design.md, "Models over several devices").

On the CPU, SmolLM2 with half its layers offloaded to the disk (accelerate's hooks read
each offloaded layer from ``offload_folder`` when it runs) gives the capture statistics of
the model loaded whole in memory; bad maps are refused by name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from attncoda._errors import AttncodaError

# Statistics are float64 sums of the same float32 ops in the same order, so the two loads
# agree bit for bit here; the test allows float32-level slack all the same.
TOL = 1e-6


def _half_on_disk(n_layers: int) -> dict[str, str]:
    """Embeddings and the first half of the layers on the CPU, the rest on the disk.

    SmolLM2 ties ``lm_head`` to the input embeddings, so the head stays beside them.
    """
    placed = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    for i in range(n_layers):
        placed[f"model.layers.{i}"] = "cpu" if i < n_layers // 2 else "disk"
    placed["model.norm"] = "disk"
    return placed


@pytest.fixture(scope="module")
def smollm2(embedded_model):
    return embedded_model("smollm2")


@pytest.fixture(scope="module")
def windows(smollm2):
    _, tokenizer, _ = smollm2
    text = "The quick brown fox jumps over the lazy dog while the cat sleeps. " * 4
    ids = tokenizer(text)["input_ids"]
    return [ids[:40], ids[3:30], ids[10:52]]


def _compare(whole, placed, windows, tokenizer):
    from attncoda.capture import capture_windows

    a = capture_windows(whole, windows, tokenizer=tokenizer, batch_size=2, record_rows=4)
    b = capture_windows(placed, windows, tokenizer=tokenizer, batch_size=2, record_rows=4)
    for name in ("sink_mass", "entropy", "content_entropy"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.shape == y.shape and np.isfinite(x[~np.isnan(x)]).all()
        np.testing.assert_allclose(y, x, rtol=0, atol=TOL, equal_nan=True, err_msg=name)
    return a, b


@pytest.fixture(scope="module")
def half_on_disk(smollm2, embedded_model, tmp_path_factory):
    placed_map = _half_on_disk(smollm2[2].n_layers)
    folder = tmp_path_factory.mktemp("offload")
    return placed_map, embedded_model("smollm2", device_map=placed_map, offload_folder=folder)


def test_half_the_layers_on_disk_give_the_in_memory_statistics(smollm2, windows, half_on_disk):
    whole, tokenizer, info = smollm2
    placed_map, (placed, _, placed_info) = half_on_disk
    # The layers really were offloaded: their weights wait on the meta device.
    assert placed.hf_device_map == placed_map
    assert "disk" in set(placed.hf_device_map.values())
    last = placed.model.layers[info.n_layers - 1].self_attn.q_proj.weight
    assert last.device.type == "meta"
    assert placed.model.layers[0].self_attn.q_proj.weight.device.type == "cpu"
    assert placed_info.device_map == placed_map
    assert json.loads(json.dumps(placed_info.to_dict()))["device_map"] == placed_map
    assert info.device_map is None
    _compare(whole, placed, windows, tokenizer)


def test_prune_losses_and_gradients_agree_with_half_the_layers_on_disk(
    smollm2, windows, half_on_disk
):
    """Prune's held-out loss and Michel et al.'s gate gradients run through the hooks too."""
    from attncoda.experiments.prune import gradient_importance, window_losses

    whole = smollm2[0]
    placed = half_on_disk[1][0]
    short = [w[:20] for w in windows[:2]]
    np.testing.assert_allclose(window_losses(placed, short), window_losses(whole, short), atol=TOL)
    expected = gradient_importance(whole, short)
    assert expected.max() > 0.01  # the gates do get gradients
    np.testing.assert_allclose(gradient_importance(placed, short), expected, rtol=0, atol=TOL)


def test_embeddings_on_disk_take_ids_on_the_cpu(smollm2, windows, embedded_model, tmp_path):
    """The first parameter is on ``meta``: the ids go to the CPU, where the hooks run it."""
    whole, tokenizer, _ = smollm2
    placed_map = {
        "model.embed_tokens": "disk",
        "lm_head": "disk",
        "model.rotary_emb": "cpu",
        "model.layers": "cpu",
        "model.norm": "cpu",
    }
    placed, _, _ = embedded_model("smollm2", device_map=placed_map, offload_folder=tmp_path)
    assert next(placed.parameters()).device.type == "meta"
    _compare(whole, placed, windows[:2], tokenizer)


def test_auto_under_a_memory_limit_offloads_and_agrees(smollm2, windows, embedded_model, tmp_path):
    whole, tokenizer, _ = smollm2
    placed, _, info = embedded_model(
        "smollm2", device_map="auto", max_memory={"cpu": "200MB"}, offload_folder=tmp_path
    )
    assert "disk" in set(info.device_map.values()) and "cpu" in set(info.device_map.values())
    _compare(whole, placed, windows[:1], tokenizer)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"device": "cpu", "device_map": "auto"},
            "device='cpu' and device_map='auto' both say where the model goes: drop device",
        ),
        ({"device_map": "everywhere"}, "unknown device_map 'everywhere': use one of auto,"),
        ({"device_map": {}}, "device_map is an empty dict"),
        ({"device_map": {"model": "gpu"}}, "device_map['model'] = 'gpu': use a GPU index"),
        ({"device_map": {"model": -1}}, "device_map['model'] = -1: use a GPU index"),
        (
            {"device_map": {"model": "disk", "lm_head": "cpu"}},
            "device_map puts 'model' on 'disk' but no offload_folder is given",
        ),
        ({"max_memory": {"cpu": "1GiB"}}, "max_memory={'cpu': '1GiB'} needs a device map"),
        ({"offload_folder": "x"}, "offload_folder='x' needs a device map"),
        (
            {"device_map": "auto", "max_memory": {"cpu": "lots"}},
            "max_memory['cpu'] = 'lots' is no memory size",
        ),
        ({"device_map": "auto", "max_memory": {"gpu": 5}}, "max_memory key 'gpu' is no device"),
        ({"device_map": 3}, "device_map must be one of auto, balanced"),
    ],
)
def test_bad_placements_are_refused_before_loading(kwargs, message):
    from attncoda.models.load import load_model

    # "no/such/spec" would be refused too, later: the placement is checked first.
    with pytest.raises(AttncodaError) as err:
        load_model("no/such-model-here", **kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_map_naming_a_missing_module_leaving_one_out_or_splitting_a_tie_is_refused(
    embedded_model, tmp_path
):
    with pytest.raises(AttncodaError, match=r"device_map names 'encoder', which LlamaForCausal"):
        embedded_model("smollm2", device_map={"encoder": "cpu", "": "cpu"})
    with pytest.raises(AttncodaError, match=r"device_map gives no device for 'model\.layers\.0"):
        embedded_model("smollm2", device_map={"model.embed_tokens": "cpu", "lm_head": "cpu"})
    tied = {**_half_on_disk(30), "lm_head": "disk"}
    with pytest.raises(AttncodaError, match=r"puts 'model.embed_tokens' on 'cpu' and 'lm_head' on"):
        embedded_model("smollm2", device_map=tied, offload_folder=tmp_path)


def test_max_memory_text_parses_as_the_cli_writes_it():
    from attncoda.models.placement import parse_max_memory

    assert parse_max_memory("0=2GiB, cpu=8GiB") == {0: "2GiB", "cpu": "8GiB"}
    with pytest.raises(AttncodaError, match=r"max_memory\[0\] = 'lots' is no memory size"):
        parse_max_memory("0=lots")
    with pytest.raises(AttncodaError, match="item '0' is not DEVICE=SIZE"):
        parse_max_memory("0")
